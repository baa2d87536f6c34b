"""Rollout batches (list, new, detail with live progress, cancel, resume), Harbor result import,
trajectories as transcripts, and the analytics pages. Views are thin: tasks.rollouts owns the
workflows, tasks.analytics the queries, tasks.analytics_charts the figures.

Every analytics page reads the same GET parameters (tasks.analytics.AnalyticsFilter: the shared
task filter plus batch, model, agent, source, version) and every table on it downloads as CSV
with `?format=csv&table=<name>` (the first table without `table`)."""
from __future__ import annotations

import csv
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_POST

from facet_site.roles import can_review, require

from . import analytics as an
from . import analytics_charts as charts
from . import rollouts
from .models import BatchStatus, LabelKind, RolloutBatch, Trajectory, TrajectoryStatus
from .rollouts import ImportRefused, RolloutError

PAGES = [
    ("analytics", "Overview"), ("analytics-passk", "Pass@k per task"), ("analytics-tags", "Tags and categories"),
    ("analytics-failures", "Failures"), ("analytics-strategies", "Strategies"), ("analytics-datasets", "Datasets"),
    ("analytics-commands", "Commands"), ("analytics-families", "Families"),
]
PAGE_SIZE = 50
TRANSCRIPTS_ON_TASK_PAGE = 12


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


def _page(request, template: str, af: an.AnalyticsFilter, page: str, context: dict, tables: list[str]):
    query = af.query_string()
    choices = an.rollout_choices()
    context.update({
        "af": af, "tf": af.tasks, "pages": PAGES, "page": page, "query": query, "choices": choices,
        "categories": choices["categories"], "families": choices["families"],
        "csv_links": [(t, f"?{af.query_string(format='csv', table=t)}") for t in tables],
    })
    return render(request, template, context)


def overview(request):
    af = an.AnalyticsFilter.from_query(request.GET)
    data = an.overview(af)
    if _wants_csv(request):
        return _table(request, {"overview": (list(data), [data])}, "overview")
    tags = an.label_pass_rates(af, [LabelKind.TAG], top=20)
    figure = charts.pass_rate_bars(tags["rows"], tags["overall"], lambda r: af.task_list_url(tag=[r["label"]]))
    return _page(request, "tasks/analytics.html", af, "analytics", {"data": data, "figure": figure}, ["overview"])


def passk(request):
    af = an.AnalyticsFilter.from_query(request.GET)
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
    af = an.AnalyticsFilter.from_query(request.GET)
    top = _int_param(request, "top", 20, 1, 200)
    by_kind = an.label_pass_rates_by_kind(af, [LabelKind.TAG, LabelKind.CATEGORY, LabelKind.DOMAIN], top=top)
    by_tag, by_category, by_domain = (by_kind[k] for k in (LabelKind.TAG, LabelKind.CATEGORY, LabelKind.DOMAIN))
    for result, field_name in ((by_tag, "tag"), (by_category, "category"), (by_domain, "category")):
        for r in result["rows"]:
            r["url"] = af.task_list_url(**{field_name: [r["label"]]})
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
    af = an.AnalyticsFilter.from_query(request.GET)
    checks = an.failed_checks(af)
    initial = an.initial_failures(af)
    if _wants_csv(request):
        return _table(request, {
            "failed-checks": (["failed_checks", "rollouts", "share"], checks["rows"]),
            "failure-reasons": (["failure", "rollouts"], checks["reasons"]),
            "initial-failures": (["strategy", "failure", "tasks", "share"], initial["rows"]),
        }, "failed-checks")

    def initial_url(r):
        # the ids are looked up when the bar is clicked (initial_failure_tasks), not for every bar here
        return reverse("tasks:analytics-initial-failure-tasks") + "?" + af.query_string(
            strategy=r["strategy"], failure=r["failure"])

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
    af = an.AnalyticsFilter.from_query(request.GET)
    strategy, failure = request.GET.get("strategy", ""), request.GET.get("failure", "")
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
    af = an.AnalyticsFilter.from_query(request.GET)
    rows = an.strategy_comparison(af)
    if _wants_csv(request):
        return _table(request, {"strategies": (["strategy", "selected", "reached", "initially_valid", "initial_rate",
                                                "final", "yield"], rows)}, "strategies")
    figure = charts.strategy_bars(rows, lambda r, key: af.task_list_url(strategy=[r["strategy"]],
                                                                        stage=STAGE_OF_METRIC[key]))
    return _page(request, "tasks/analytics_strategies.html", af, "analytics-strategies",
                 {"rows": rows, "figure": figure}, ["strategies"])


def datasets(request):
    af = an.AnalyticsFilter.from_query(request.GET)
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
    af = an.AnalyticsFilter.from_query(request.GET)
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
    af = an.AnalyticsFilter.from_query(request.GET)
    data = an.family_distribution(af)
    if _wants_csv(request):
        return _table(request, {"families": (["family", "tasks", "share"], data["rows"])}, "families")
    figure = charts.family_bars(data["rows"], lambda r: af.task_list_url(family=[r["family"]], status=data["statuses"]))
    return _page(request, "tasks/analytics_families.html", af, "analytics-families", {"data": data, "figure": figure},
                 ["families"])


# --- rollout batches ----------------------------------------------------------------------------


def batch_list(request):
    page = Paginator(RolloutBatch.objects.select_related("created_by").order_by("-id"), PAGE_SIZE).get_page(
        request.GET.get("page"))
    ids = [b.pk for b in page.object_list]
    counts: dict[int, dict] = {}
    for batch_id, status, n in (Trajectory.objects.filter(batch_id__in=ids).values("batch_id", "status")
                                .annotate(n=Count("id")).values_list("batch_id", "status", "n")):
        counts.setdefault(batch_id, {})[status] = n
    for b in page.object_list:
        c = counts.get(b.pk, {})
        b.n_total = sum(c.values())
        b.n_finished = c.get(TrajectoryStatus.DONE, 0) + c.get(TrajectoryStatus.ERROR, 0)
        b.n_waiting = c.get(TrajectoryStatus.WAITING_FOR_DOCKER, 0)
    return render(request, "tasks/rollouts.html", {"page": page, "problems": None})


def batch_new(request):
    query = request.GET.get("query")
    if query is None:  # arrived from the task list's "Roll out" link: its filter is the query
        query = urlencode([(k, v) for k, vs in request.GET.lists() for v in vs if k not in ("page",)])
    form = {"query": query or rollouts.DEFAULT_QUERY, "model": "", "attempts": 3, "max_turns": 30, "timeout_s": 900,
            "name": ""}
    if request.GET.get("attempts", "").isdigit():  # the form's live count sends it along
        form["attempts"] = int(request.GET["attempts"])
    error = ""
    if request.method == "POST":
        if not can_review(request.user):
            return HttpResponse("Your role does not allow starting rollouts.", status=403)
        form.update({k: request.POST.get(k, form[k]) for k in form})
        try:
            numbers = {k: int(str(form[k]).strip()) for k in ("attempts", "max_turns", "timeout_s")}
        except ValueError:
            error = "attempts, turns and time budget must be whole numbers"
        else:
            try:
                batch = rollouts.create_batch(query=form["query"], model=form["model"], name=form["name"],
                                              user=request.user, **numbers)
            except RolloutError as exc:
                error = str(exc)
            else:
                rollouts.start_batch(batch)
                messages.success(request, f"Rollout batch #{batch.pk} started: {batch.trajectories.count()} "
                                          f"trajectories on {batch.selection.get('tasks')} tasks.")
                return redirect("tasks:rollout-batch", batch_id=batch.pk)
    tf, tasks = rollouts.selected_tasks(form["query"])
    n_tasks = tasks.count()
    try:
        per_task = max(1, int(form["attempts"]))
    except (TypeError, ValueError):
        per_task = 3
    return render(request, "tasks/rollout_new.html", {
        "form": form, "error": error, "tf": tf, "n_tasks": n_tasks, "n_trajectories": n_tasks * per_task,
        "default_model": rollouts.LLMSettings.from_env().model, "limits": rollouts.LIMITS,
        "task_list_query": tf.query_string(with_view=False)}, status=400 if error else 200)


def batch_detail(request, batch_id: int):
    batch = get_object_or_404(RolloutBatch.objects.select_related("created_by", "run"), pk=batch_id)
    progress = rollouts.progress(batch)
    open_batch = batch.status in (BatchStatus.QUEUED, BatchStatus.RUNNING)
    context = {"batch": batch, "progress": progress, "open": open_batch, "report": rollouts.job_report(batch)}
    if request.htmx and request.GET.get("part") == "progress":
        response = render(request, "tasks/rollout_batch.html#progress", context)
        if not open_batch:
            response.status_code = 286  # finished: htmx stops polling
        return response
    status = request.GET.get("status", "")
    qs = batch.trajectories.select_related("task").order_by("task_id", "attempt")
    if status in TrajectoryStatus.values:
        qs = qs.filter(status=status)
    context["page"] = Paginator(qs, 100).get_page(request.GET.get("page"))
    context["status"] = status
    context["statuses"] = TrajectoryStatus.choices
    return render(request, "tasks/rollout_batch.html", context)


@require_POST
@require(can_review)
def batch_cancel(request, batch_id: int):
    batch = get_object_or_404(RolloutBatch, pk=batch_id)
    if rollouts.cancel_batch(batch, user=request.user):
        messages.success(request, f"Batch #{batch.pk} is cancelled; running attempts stop at their next turn.")
    else:
        messages.error(request, f"Batch #{batch.pk} had already finished.")
    return redirect("tasks:rollout-batch", batch_id=batch.pk)


@require_POST
@require(can_review)
def batch_resume(request, batch_id: int):
    from . import jobs

    batch = get_object_or_404(RolloutBatch, pk=batch_id)
    n = rollouts.resume(batch, dispatch=lambda tid: jobs.docker_rollout.delay(tid), all_pending=True)
    messages.success(request, f"{n} trajectories of batch #{batch.pk} queued again." if n else
                     "Nothing to resume (no Docker engine answers yet, or nothing is waiting).")
    return redirect("tasks:rollout-batch", batch_id=batch.pk)


@require_POST
@require(can_review)
def batch_import(request):
    upload = request.FILES.get("archive")
    if upload is None:
        messages.error(request, "Choose an archive (.zip or .tar.gz) of a Harbor job directory.")
        return redirect("tasks:rollouts")
    try:
        outcome = rollouts.import_upload(upload, user=request.user, allow_partial=bool(request.POST.get("partial")))
    except ImportRefused as exc:
        outcome = rollouts.ImportOutcome(batches=[], refused=[exc])
    if outcome.refused:
        page = Paginator(RolloutBatch.objects.order_by("-id"), PAGE_SIZE).get_page(1)
        return render(request, "tasks/rollouts.html", {"page": page, "problems": outcome.refused,
                                                       "imported": outcome.batches}, status=400)
    for batch in outcome.batches:
        messages.success(request, f"Imported batch #{batch.pk} {batch.name}: {batch.message}.")
    return redirect("tasks:rollout-batch", batch_id=outcome.batches[0].pk)


# --- trajectories -------------------------------------------------------------------------------


def trajectory_list(request):
    af = an.AnalyticsFilter.from_query(request.GET)
    passed = request.GET.get("passed", "")
    failure = request.GET.get("failure", "")
    raw = request.GET.get("failed_checks", "")
    qs = an.trajectory_list(af, passed=passed, failure=failure, failed_checks=int(raw) if raw.isdigit() else None)
    page = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
    outcomes = an.trial_outcomes([t.trial_id for t in page.object_list if t.trial_id])
    for t in page.object_list:
        counts = outcomes.get(t.trial_id, {})
        t.tests_ok = counts.get("passed", 0)
        t.tests_bad = sum(counts.get(o, 0) for o in an.FAILED_OUTCOMES)
    return render(request, "tasks/rollout_trajectories.html", {
        "af": af, "page": page, "passed": passed, "failure": failure, "failed_checks": raw,
        "query": urlencode([(k, v) for k, vs in request.GET.lists() for v in vs if k != "page"])})


def _transcript(traj: Trajectory) -> dict:
    turns = list(traj.turns.all())
    tests = list(traj.trial.tests.all()) if traj.trial_id else []
    return {"traj": traj, "turns": turns, "tests": tests,
            "tests_failed": sum(1 for t in tests if t.outcome in an.FAILED_OUTCOMES)}


def trajectory_detail(request, trajectory_id: int):
    traj = get_object_or_404(Trajectory.objects.select_related("task", "batch", "version", "trial"), pk=trajectory_id)
    return render(request, "tasks/rollout_trajectory.html", {"t": _transcript(traj)})


def rollouts_context(request, task) -> dict:
    """Context for tasks/_rollouts_panel.html on the task page: the task's trajectories as
    readable transcripts, newest first, each next to its per-test verifier result, and the
    task's pass@k over the finished attempts on its current version."""
    qs = (Trajectory.objects.filter(task=task).select_related("batch", "version", "trial").order_by("-id"))
    total = qs.count()
    shown = list(qs[:TRANSCRIPTS_ON_TASK_PAGE].prefetch_related("turns", "trial__tests"))
    by_model = []
    if task.current_version_id:
        for model, n, c in (Trajectory.objects.filter(task=task, version_id=task.current_version_id,
                                                      status=TrajectoryStatus.DONE)
                            .values("model").annotate(n=Count("id"), c=Count("id", filter=Q(passed=True)))
                            .order_by("model").values_list("model", "n", "c")):
            by_model.append({"model": model or "(unknown)", **an.pass_at_k_summary([(task.pk, n, c)])})
    transcripts = []
    for traj in shown:
        tests = list(traj.trial.tests.all()) if traj.trial_id else []
        transcripts.append({"traj": traj, "turns": list(traj.turns.all()), "tests": tests,
                            "tests_failed": sum(1 for t in tests if t.outcome in an.FAILED_OUTCOMES)})
    return {"rollouts": {"task": task, "transcripts": transcripts, "total": total, "more": total - len(shown),
                         "by_model": by_model, "list_url": reverse("tasks:trajectories") + f"?ids={task.pk}"}}


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
    path("rollouts/", batch_list, name="rollouts"),
    path("rollouts/new/", batch_new, name="rollout-new"),
    path("rollouts/import/", batch_import, name="rollout-import"),
    path("rollouts/trajectories/", trajectory_list, name="trajectories"),
    path("rollouts/trajectories/<int:trajectory_id>/", trajectory_detail, name="trajectory"),
    path("rollouts/<int:batch_id>/", batch_detail, name="rollout-batch"),
    path("rollouts/<int:batch_id>/cancel/", batch_cancel, name="rollout-cancel"),
    path("rollouts/<int:batch_id>/resume/", batch_resume, name="rollout-resume"),
]
