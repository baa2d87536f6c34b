"""The task list: the shared filter (tasks.filters.TaskFilter), sort, columns, per-status counts,
the funnel table it loads after itself, and saved views."""
from __future__ import annotations

from dataclasses import replace
from urllib.parse import quote

from django.contrib import messages
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import Truncator
from django.views.decorators.http import require_POST

from facet_site import stamps
from facet_site.roles import can_review, is_admin
from facet_site.lib import validation as val
from scenarios.models import Strategy, SynthesisRun

from .filters import COLUMNS, TaskFilter
from .funnel import funnel
from .models import LabelKind, RejectReason, ReviewState, SavedView, Task, TaskLabel, TaskStatus

PAGE_SIZE = 50
# list columns a header click sorts by (filters.SORTS key per column)
SORTABLE = {"name": "name", "status": "status", "review": "review", "run": "run", "tests": "tests",
            "repairs": "repairs", "pass": "pass", "updated": "updated"}
LIST_FIELDS = ("id", "name", "status", "step", "strategy", "run_id", "imported", "review_state", "n_tests",
               "repair_rounds", "pass_rate", "n_rollouts", "message", "discard_reason", "updated_at",
               "finding_kinds", "validation_failure",
               "current_version__number", "current_version__content_hash", "environment__repair_count")
# the list's "has findings" filter: any, none, or one error-level check
FINDING_CHOICES = [("any", "Has findings"), ("none", "No findings"),
                   *((k, k) for k in (*val.DEFECTS_BEFORE_TRIALS, *val.DEFECTS_AFTER_TRIALS, "answers_in_image",
                                      "tests_use_solution", "no_reward_written", "solution_writes_reward"))]
MAX_OPTIONS = 500  # label values offered in one filter drop-down
# parameters the filter form has a field for; any other one of the filter (sort, ids, a funnel
# stage, ...) rides along in a hidden field so that changing a filter keeps it
FORM_FIELDS = {"status", "run", "strategy", "review", "reason", "category", "tag", "family", "origin", "rolled", "q",
               "finding", "failure",
               "tests_min", "tests_max", "repairs_min", "repairs_max", "pass_min", "pass_max", "cols"}



# --- the task list ---------------------------------------------------------------------------------


class _CountedPaginator(Paginator):
    """A paginator told its count (from the per-status counts), so a page costs one COUNT less."""

    def __init__(self, object_list, per_page, *, count: int):
        super().__init__(object_list, per_page)
        self.__dict__["count"] = count


LABELS_STAMP = "SELECT MAX(id) FROM tasks_tasklabel"  # labels are added with tasks; stale ones go rarely


def _label_values(kinds) -> list[str]:
    """The values the filter form offers (a DISTINCT over every label, so once per change)."""
    return stamps.cached("label-values", LABELS_STAMP, lambda: list(
        TaskLabel.objects.filter(kind__in=kinds).order_by("value").values_list("value", flat=True)
        .distinct()[:MAX_OPTIONS]), tuple(kinds))


def _status_counts(f: TaskFilter) -> dict[str, int]:
    """Tasks per status for the filter without its own status condition, so the chips show
    what choosing another status would give."""
    rows = replace(f, status=[]).queryset().order_by().values_list("status").annotate(n=Count("pk"))
    return dict(rows)


def _row_cells(task: Task, cols: list[str]) -> list[str]:
    """The row's <td>s for the chosen columns, escaped by format_html. Built here rather than in
    the template: 50 rows × a dozen {% if col == ... %} branches were most of the page's time."""
    detail = reverse("tasks:detail", args=[task.pk])
    cells = []
    for col in cols:
        if col == "name":
            cells.append(format_html('<td><a href="{}">{}</a>{}</td>', detail, task.name,
                                     mark_safe(' <span class="badge">imported</span>') if task.imported else ""))
        elif col == "status":
            step = format_html('<div class="desc">{}</div>', task.get_step_display()) if task.step != "done" else ""
            # an imported task waits for a validation somebody starts; "Validating" read as if one ran
            label = ("Imported, awaiting validation" if task.imported and task.status == TaskStatus.VALIDATING
                     else task.get_status_display())
            cells.append(format_html('<td><span class="badge st-{}">{}</span>{}</td>', task.status, label, step))
        elif col == "review":
            cells.append(format_html('<td><span class="badge rv-{}">{}</span></td>', task.review_state,
                                     task.get_review_state_display()))
        elif col == "run":
            cells.append(format_html('<td><a href="?run={}">#{}</a></td>', task.run_id, task.run_id)
                         if task.run_id else mark_safe("<td></td>"))
        elif col == "strategy":
            cells.append(format_html("<td>{}</td>", task.strategy))
        elif col == "category":
            links = format_html_join(", ", '<a href="?category={}">{}</a>',
                                     ((quote(c), c) for c in getattr(task, "categories", [])))
            cells.append(format_html("<td>{}</td>", links or mark_safe('<span class="muted">—</span>')))
        elif col == "findings":
            kinds = [k for k in task.finding_kinds.split(",") if k]
            failure = (format_html('<a class="badge st-discarded" href="?failure={}">{}</a> ', task.validation_failure,
                                   task.validation_failure) if task.validation_failure else "")
            links = format_html_join(" ", '<a class="badge finding" href="?finding={}">{}</a>', ((k, k) for k in kinds))
            cells.append(format_html("<td>{}{}</td>", failure, links) if failure or kinds
                         else mark_safe('<td><span class="muted">—</span></td>'))
        elif col == "tests":
            cells.append(format_html('<td class="num">{}</td>', "—" if task.n_tests is None else task.n_tests))
        elif col == "repairs":
            # a repaired environment counts too: "0" there read as "nothing was ever repaired"
            env = task.environment.repair_count if task.environment_id else 0
            cells.append(format_html('<td class="num">{}{}</td>', task.repair_rounds, format_html(
                ' <span class="desc" title="environment repairs">+ {} env</span>', env) if env else ""))
        elif col == "pass":
            cells.append(format_html('<td class="num">{} <span class="desc">({})</span></td>', f"{task.pass_rate:.2f}",
                                     task.n_rollouts) if task.pass_rate is not None
                         else mark_safe('<td class="num">—</td>'))
        elif col == "version":
            v = task.current_version
            cells.append(format_html("<td>v{} <code>{}</code></td>", v.number, v.content_hash[7:19]) if v
                         else mark_safe("<td></td>"))
        elif col == "updated":
            cells.append(format_html('<td title="{}">{}</td>', task.updated_at.isoformat(),
                                     naturaltime(task.updated_at)))
        elif col == "note":
            cells.append(format_html('<td class="desc">{}</td>',
                                     Truncator(task.discard_reason or task.message).chars(140)))
    return cells


def _list_url(f: TaskFilter, page: int | str | None = None) -> str:
    """The canonical, shareable URL of a list view: only the parameters that say something."""
    query = f.query_string()
    if page and str(page) != "1":
        query = f"{query}&page={page}" if query else f"page={page}"
    return reverse("tasks:list") + (f"?{query}" if query else "")


def task_list(request):
    f = TaskFilter.from_query(request.GET)
    if not request.htmx and any(v == "" for _, values in request.GET.lists() for v in values):
        # a submitted form sends every field, empty ones too: show the URL worth sharing
        return redirect(_list_url(f, request.GET.get("page")))
    counts = _status_counts(f)
    total = sum(n for s, n in counts.items() if not f.status or s in f.status)
    qs = f.queryset().select_related("current_version", "environment").only(*LIST_FIELDS)
    page = _CountedPaginator(qs, PAGE_SIZE, count=total).get_page(request.GET.get("page"))
    tasks = list(page.object_list)
    if "category" in f.cols and tasks:
        labels: dict[int, list[str]] = {}
        for task_id, value in (TaskLabel.objects.filter(task_id__in=[t.pk for t in tasks], kind=LabelKind.CATEGORY)
                               .order_by("value").values_list("task_id", "value")):
            labels.setdefault(task_id, []).append(value)
        for t in tasks:
            t.categories = labels.get(t.pk, [])
    for t in tasks:
        t.cells = _row_cells(t, f.cols)
    query = f.query_string()
    filter_query = f.query_string(with_view=False)
    single_run = SynthesisRun.objects.filter(pk=f.run[0]).first() if len(f.run) == 1 else None
    headers = []
    for col in f.cols:
        key = SORTABLE.get(col)
        link = None
        if key:
            link = "?" + f.query_string(sort=key if f.sort != key else f"-{key}")
        direction = "asc" if f.sort == key else "desc" if key and f.sort == f"-{key}" else ""
        headers.append({"col": col, "label": COLUMNS[col], "link": link, "direction": direction})
    views = SavedView.objects.filter(Q(owner=request.user) | Q(shared=True)).select_related("owner")
    context = {
        "f": f, "page": page, "tasks": tasks, "total": total, "counts": counts,
        "status_chips": [(value, label, counts.get(value, 0), value in f.status) for value, label in TaskStatus.choices],
        "query": query, "filter_query": filter_query, "headers": headers, "columns": list(COLUMNS.items()),
        "sort_id_link": "?" + f.query_string(sort="id" if f.sort != "id" else "-id"),
        "statuses": TaskStatus.choices, "review_states": ReviewState.choices, "reasons": RejectReason.choices,
        "strategies": Strategy.choices,
        "run_choices": [(r.pk, f"#{r.pk} {Truncator(r.name).chars(40)}")
                        for r in SynthesisRun.objects.order_by("-id").only("id", "name")[:MAX_OPTIONS]],
        "categories": _label_values([LabelKind.DOMAIN, LabelKind.CATEGORY]), "tags": _label_values([LabelKind.TAG]),
        "families": _label_values([LabelKind.FAMILY]),
        "finding_choices": FINDING_CHOICES, "failure_types": val.FAILURE_TYPES,
        "saved_views": views, "run": single_run,
        "hidden": [(k, v) for k, v in f.params() if k not in FORM_FIELDS],
    }
    if request.htmx:
        response = render(request, "tasks/list.html#results", context)
        response["HX-Push-Url"] = _list_url(f, page.number)
        return response
    return render(request, "tasks/list.html", context)


def funnel_table(request):
    """The funnel table of one run (?run=) or of all runs, for the task list to load after itself."""
    run_id = request.GET.get("run", "")
    run = SynthesisRun.objects.filter(pk=int(run_id)).first() if run_id.isdigit() else None
    return render(request, "tasks/_funnel.html", {"funnel": funnel(run)})


@require_POST
def save_view(request):
    """Save the current query under a name. Anyone may keep private views; shared views, seen
    by everyone, are for reviewers and admins."""
    name = (request.POST.get("name") or "").strip()[:120]
    shared = request.POST.get("shared") == "on"
    # normalised through the filter: what is stored is what the list understands
    query = TaskFilter.from_query(request.POST.get("query", "")).query_string()
    if shared and not can_review(request.user):
        return HttpResponse("Viewers may save private views only.", status=403)
    if not name:
        messages.error(request, "name: give the view a name.")
        return redirect(reverse("tasks:list") + (f"?{query}" if query else ""))
    view, created = SavedView.objects.update_or_create(owner=request.user, name=name,
                                                       defaults={"query": query, "shared": shared})
    messages.success(request, f"View “{view.name}” {'saved' if created else 'updated'}"
                              f"{' and shared' if shared else ''}.")
    return redirect(reverse("tasks:list") + (f"?{query}" if query else ""))


@require_POST
def delete_view(request, view_id: int):
    view = get_object_or_404(SavedView, pk=view_id)
    if view.owner_id != request.user.pk and not is_admin(request.user):
        return HttpResponse("Only the view's owner may delete it.", status=403)
    view.delete()
    messages.success(request, f"View “{view.name}” deleted.")
    return redirect(request.POST.get("next") if _local(request.POST.get("next")) else "tasks:list")


def _local(url: str | None) -> bool:
    return bool(url) and url.startswith("/") and not url.startswith("//")
