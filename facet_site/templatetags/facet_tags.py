"""Template filters and tags shared by every app's pages (percentages, <option> lists)."""
from django import template

register = template.Library()


@register.filter
def percent(value, digits=2):
    """0.2128 → "21.28%"; empty for a missing value."""
    if value is None or value == "":
        return "—"
    return f"{float(value) * 100:.{int(digits)}f}%"


@register.simple_tag
def options(choices, selected):
    """<option>s for a filter <select>: `choices` are values or (value, label) pairs, `selected`
    the chosen values. Joined in Python with the standard library's escape (quotes included): a
    loop of template tags, or format_html per option, over hundreds of tag values was most of
    the task list's rendering time."""
    from html import escape

    from django.utils.safestring import mark_safe

    chosen = {str(v) for v in (selected or [])}
    out = []
    for choice in choices:
        value, label = choice if isinstance(choice, (tuple, list)) else (choice, choice)
        value = str(value)
        out.append(f'<option value="{escape(value)}"{" selected" if value in chosen else ""}>{escape(str(label))}</option>')
    return mark_safe("".join(out))
