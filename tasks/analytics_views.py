"""The analytics pages (overview, pass@k, tags and categories, failures, strategies, datasets,
commands, families). Views are thin: tasks.analytics owns the queries, tasks.analytics_charts
the figures.

Every analytics page reads the same GET parameters (tasks.analytics_selection.AnalyticsFilter: the shared
task filter plus batch, model, agent, source, version) and every table on it downloads as CSV
with `?format=csv&table=<name>` (the first table without `table`)."""
from __future__ import annotations

import csv

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse

from skills.models import Category

from . import analytics as an
from .analytics_selection import AnalyticsFilter, rollout_choices
from .filters import DIFFICULTY_VALUES
from . import analytics_charts as charts
from .models import LabelKind

PAGES = [
    ("analytics", "Overview"), ("analytics-passk", "Pass@k per task"), ("analytics-tags", "Tags and categories"),
    ("analytics-failures", "Failures"), ("analytics-strategies", "Strategies"), ("analytics-datasets", "Datasets"),
    ("analytics-commands", "Commands"), ("analytics-families", "Families"),
]
PAGE_SIZE = 50


# --- CSV ----------------------------------------------------------------------------------------


def _cell(value):
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else value


def csv_response(name: str, columns: list[str], rows: list[dict]) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="facet-{name}.csv"'
    writer = csv.writer(response)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return response


def _wants_csv(request) -> bool:
    return request.GET.get("format") == "csv"


def _table(request, tables: dict, default: str) -> HttpResponse:
    name = request.GET.get("table") or default
    if name not in tables:
        raise Http404(f"no table {name!r} here; one of: {', '.join(tables)}")
    columns, rows = tables[name]
    return csv_response(name, columns, rows)


# --- the analytics pages ------------------------------------------------------------------------


def _page(request, template: str, af: AnalyticsFilter, page: str, context: dict, tables: list[str]):
    query = af.query_string()
    choices = rollout_choices()
    context.update({
        "af": af, "tf": af.tasks, "pages": PAGES, "page": page, "query": query, "choices": choices,
        "categories": choices["categories"], "families": choices["families"], "difficulties": DIFFICULTY_VALUES,
        "csv_links": [(t, f"?{af.query_string(format='csv', table=t)}") for t in tables],
    })
    return render(request, template, context)


def overview(request):
    af = AnalyticsFilter.from_query(request.GET)
    data = an.overview(af)
    if _wants_csv(request):
        return _table(request, {"overview": (list(data), [data])}, "overview")
    tags = an.label_pass_rates(af, [LabelKind.TAG], top=20)
    figure = charts.pass_rate_bars(tags["rows"], tags["overall"], lambda r: af.task_list_url(tag=[r["label"]]))
    return _page(request, "tasks/analytics.html", af, "analytics", {"data": data, "figure": figure}, ["overview"])


def passk(request):
    af = AnalyticsFilter.from_query(request.GET)
    sort = request.GET.get("sort", "-p1")
    if sort.lstrip("-") not in an.PASSK_SORTS:
        sort = "-p1"
    rows = an.pass_at_k_rows(af, sort)
    data = an.pass_at_k_table(af)
    if _wants_csv(request):
        return _table(request, {
            "pass-at-k": (["task_id", "task", "n", "c", "p1", "p3"], rows.iterator()),
            "pass-at-k-models": (["model", "tasks", "trajectories", "passed", "p1", "p1_tasks", "p3", "p3_tasks",
                                  "p3_excluded"], data["by_model"]),
        }, "pass-at-k")
    # the count is the summary's: no second pass over the rollouts for the paginator
    page = Paginator(_Counted(rows, data["summary"]["tasks"]), PAGE_SIZE).get_page(request.GET.get("page"))
    figures = {
        "buckets": charts.p1_histogram(data["buckets"], lambda b: af.task_list_url(
            pass_min=b["link_min"], pass_max=b["link_max"], rolled="yes")),
        "models": charts.model_passk_bars(data["by_model"], lambda r: af.task_list_url(rolled="yes")),
    }
    return _page(request, "tasks/analytics_passk.html", af, "analytics-passk",
                 {"data": data, "rows_page": page, "figures": figures, "sort": sort,
                  "sort_query": af.query_string()}, ["pass-at-k", "pass-at-k-models"])


class _Counted:
    """A queryset whose length is already known."""

    def __init__(self, qs, count: int):
        self.qs, self._count = qs, count

    def count(self):
        return self._count

    def __len__(self):
        return self._count

    def __getitem__(self, item):
        return self.qs[item]


def _int_param(request, name: str, default: int, low: int, high: int) -> int:
    raw = request.GET.get(name, "")
    return max(low, min(high, int(raw))) if raw.isdigit() else default


def tags(request):
    af = AnalyticsFilter.from_query(request.GET)
    top = _int_param(request, "top", 20, 1, 200)
    by_kind = an.label_pass_rates_by_kind(af, [LabelKind.TAG, LabelKind.CATEGORY, LabelKind.DOMAIN], top=top)
    by_tag, by_category, by_domain = (by_kind[k] for k in (LabelKind.TAG, LabelKind.CATEGORY, LabelKind.DOMAIN))
    # labels keep the category's slug (the filters and the CSV use it); pages show the name the
    # Taxonomy page shows
    names = dict(Category.objects.values_list("slug", "name"))
    for result, field_name in ((by_tag, "tag"), (by_category, "category"), (by_domain, "category")):
        for r in result["rows"]:
            r["url"] = af.task_list_url(**{field_name: [r["label"]]})
            if field_name == "category":
                r["name"] = names.get(r["label"], r["label"])
    columns = ["label", "rollouts", "passed", "tasks", "rate", "low", "high"]
    if _wants_csv(request):
        return _table(request, {"tags": (columns, by_tag["rows"]), "categories": (columns, by_category["rows"]),
                                "domains": (columns, by_domain["rows"])}, "tags")
    figures = {
        "tags": charts.pass_rate_bars(by_tag["rows"], by_tag["overall"], lambda r: r["url"]),
        "categories": charts.pass_rate_bars(by_category["rows"], by_category["overall"], lambda r: r["url"],
                                            noun="category"),
    }
    return _page(request, "tasks/analytics_tags.html", af, "analytics-tags",
                 {"by_tag": by_tag, "by_category": by_category, "by_domain": by_domain, "figures": figures, "top": top},
                 ["tags", "categories", "domains"])


def failures(request):
    af = AnalyticsFilter.from_query(request.GET)
    checks = an.failed_checks(af)
    initial = an.initial_failures(af)
    if _wants_csv(request):
        return _table(request, {
            "failed-checks": (["failed_checks", "rollouts", "share"], checks["rows"]),
            "failure-reasons": (["failure", "rollouts"], checks["reasons"]),
            "initial-failures": (["strategy", "failure", "tasks", "share"], initial["rows"]),
        }, "failed-checks")

    def initial_url(r):
        # the ids are looked up when the bar is clicked (initial_failure_tasks), not for every bar here;
        # `first_failure`, not `failure`: the task list's own `failure` filter is the current state
        return reverse("tasks:analytics-initial-failure-tasks") + "?" + af.query_string(
            strategy=r["strategy"], first_failure=r["failure"])

    figures = {
        "checks": charts.failed_checks_bars(checks["rows"], lambda r: af.trajectory_list_url(
            passed="no", failed_checks=r["failed_checks"])),
        "initial": charts.failure_types_bars(initial["rows"], initial_url),
    }
    return _page(request, "tasks/analytics_failures.html", af, "analytics-failures",
                 {"checks": checks, "initial": initial, "figures": figures},
                 ["failed-checks", "failure-reasons", "initial-failures"])


MAX_IDS_IN_LINK = 500


def initial_failure_tasks(request):
    """The tasks behind one bar of Figure 2b: constructed tasks of a strategy whose first finished
    validation failed with a type. The task list has no filter for that, so this opens it by ids
    (the task filter's own), or at the strategy's "entering validation" stage when they are many."""
    af = AnalyticsFilter.from_query(request.GET)
    strategy, failure = request.GET.get("strategy", ""), request.GET.get("first_failure", "")
    tasks = af.task_queryset().filter(imported=False, strategy=strategy)
    ids = list(an.first_validations(tasks).filter(accepted=False, failure="" if failure == "(none)" else failure)
               .order_by("version__task_id").values_list("version__task_id", flat=True)[:MAX_IDS_IN_LINK + 1])
    if len(ids) > MAX_IDS_IN_LINK:
        messages.info(request, f"More than {MAX_IDS_IN_LINK} tasks failed their first validation with {failure}: "
                               "showing the strategy's tasks that reached validation.")
        return redirect(af.task_list_url(strategy=[strategy], stage="entering_validation"))
    return redirect(af.task_list_url(strategy=[strategy], ids=ids or [0]))


STAGE_OF_METRIC = {"reached": "entering_validation", "initially_valid": "first_pass_valid", "final": "final_validated"}


def strategies(request):
    af = AnalyticsFilter.from_query(request.GET)
    rows = an.strategy_comparison(af)
    if _wants_csv(request):
        return _table(request, {"strategies": (["strategy", "selected", "reached", "initially_valid", "initial_rate",
                                                "final", "yield"], rows)}, "strategies")
    figure = charts.strategy_bars(rows, lambda r, key: af.task_list_url(strategy=[r["strategy"]],
                                                                        stage=STAGE_OF_METRIC[key]))
    return _page(request, "tasks/analytics_strategies.html", af, "analytics-strategies",
                 {"rows": rows, "figure": figure}, ["strategies"])


def datasets(request):
    af = AnalyticsFilter.from_query(request.GET)
    data = an.dataset_statistics(af)
    columns = ["dataset", "source", "model", "agent", "trajectories", "successful", "turns", "tasks", "tests", "p1",
               "p3", "p3_excluded"]
    if _wants_csv(request):
        return _table(request, {"datasets": (columns, data["totals"] + data["rows"]),
                                "paper": (["dataset", "trajectories", "turns", "tasks", "tests", "p1", "p3"],
                                          data["paper"])}, "datasets")

    def url(r):
        if r.get("batch_id"):
            return af.trajectory_list_url(batch=r["batch_id"])
        return af.trajectory_list_url(source=r.get("source", ""))

    figure = charts.dataset_bars(data["totals"] + data["rows"][:12], url)
    return _page(request, "tasks/analytics_datasets.html", af, "analytics-datasets", {"data": data, "figure": figure},
                 ["datasets", "paper"])


def commands(request):
    af = AnalyticsFilter.from_query(request.GET)
    top = _int_param(request, "top", 15, 1, 100)
    data = an.command_patterns(af, top=top)
    if _wants_csv(request):
        return _table(request, {
            "commands": (["command", "occurrences", "share", "observation", "action", "dominant"], data["all_commands"]),
            "turn-states": (["state", "turns", "share"], data["states"]),
            "transitions": (["from", "to", "count", "probability"], data["transitions"]),
        }, "commands")
    figures = {
        "commands": charts.command_bars(data["commands"], lambda r: af.trajectory_list_url(passed="yes")),
        "transitions": charts.transitions_heatmap(data["transitions"], an.STATES),
    }
    return _page(request, "tasks/analytics_commands.html", af, "analytics-commands",
                 {"data": data, "figures": figures, "top": top}, ["commands", "turn-states", "transitions"])


def families(request):
    af = AnalyticsFilter.from_query(request.GET)
    data = an.family_distribution(af)
    difficulty = an.difficulty_distribution(af)
    if _wants_csv(request):
        return _table(request, {"families": (["family", "tasks", "share"], data["rows"]),
                                "difficulty": (["difficulty", "tasks", "share"], difficulty["rows"])}, "families")
    figure = charts.family_bars(data["rows"], lambda r: af.task_list_url(family=[r["family"]], status=data["statuses"]))
    links = [{**r, "url": af.task_list_url(difficulty=[r["difficulty"]], status=difficulty["statuses"])}
             for r in difficulty["rows"]]
    difficulty = {**difficulty, "rows": links}
    return _page(request, "tasks/analytics_families.html", af, "analytics-families",
                 {"data": data, "figure": figure, "difficulty": difficulty}, ["families", "difficulty"])


urlpatterns = [
    path("analytics/", overview, name="analytics"),
    path("analytics/pass-at-k/", passk, name="analytics-passk"),
    path("analytics/tags/", tags, name="analytics-tags"),
    path("analytics/failures/", failures, name="analytics-failures"),
    path("analytics/failures/initial-tasks/", initial_failure_tasks, name="analytics-initial-failure-tasks"),
    path("analytics/strategies/", strategies, name="analytics-strategies"),
    path("analytics/datasets/", datasets, name="analytics-datasets"),
    path("analytics/commands/", commands, name="analytics-commands"),
    path("analytics/families/", families, name="analytics-families"),
]
