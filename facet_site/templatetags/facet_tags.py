from django import template

register = template.Library()


@register.filter
def percent(value, digits=2):
    """0.2128 → "21.28%"; empty for a missing value."""
    if value is None or value == "":
        return "—"
    return f"{float(value) * 100:.{int(digits)}f}%"
