"""Rollout batches (list, new, detail with live progress, cancel, resume), Harbor result import,
and trajectories as transcripts (their own pages and the task page's Rollouts tab). Views are
thin: tasks.rollouts owns the workflows, tasks.analytics the trajectory queries."""
from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_POST

from facet_site.roles import can_review, require

from . import analytics as an
from .analytics_selection import AnalyticsFilter
from . import rollouts, task_recovery
from .models import RolloutBatchStatus, RolloutBatch, Trajectory, TrajectoryStatus
from .rollout_imports import ImportOutcome, ImportRefused, import_upload, job_report
from .rollouts import RolloutError

PAGE_SIZE = 50
TRANSCRIPTS_ON_TASK_PAGE = 12


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
        "default_model": settings.FACET_LLM.model, "limits": rollouts.LIMITS,
        "task_list_query": tf.query_string(with_view=False)}, status=400 if error else 200)


def batch_detail(request, batch_id: int):
    batch = get_object_or_404(RolloutBatch.objects.select_related("created_by", "run"), pk=batch_id)
    progress = rollouts.progress(batch)
    open_batch = batch.status in (RolloutBatchStatus.QUEUED, RolloutBatchStatus.RUNNING)
    context = {"batch": batch, "progress": progress, "open": open_batch, "report": job_report(batch)}
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
    batch = get_object_or_404(RolloutBatch, pk=batch_id)
    n = task_recovery.resume_rollout_batch(batch)
    if n is None:
        messages.info(request, f"Batch #{batch.pk} is over, or was resumed a moment ago: its trajectories are queued.")
    else:
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
        outcome = import_upload(upload, user=request.user, allow_partial=bool(request.POST.get("partial")))
    except ImportRefused as exc:
        outcome = ImportOutcome(batches=[], refused=[exc])
    if outcome.refused:
        page = Paginator(RolloutBatch.objects.order_by("-id"), PAGE_SIZE).get_page(1)
        return render(request, "tasks/rollouts.html", {"page": page, "problems": outcome.refused,
                                                       "imported": outcome.batches}, status=400)
    for batch in outcome.batches:
        messages.success(request, f"Imported batch #{batch.pk} {batch.name}: {batch.message}.")
    return redirect("tasks:rollout-batch", batch_id=outcome.batches[0].pk)


# --- trajectories -------------------------------------------------------------------------------


def trajectory_list(request):
    af = AnalyticsFilter.from_query(request.GET)
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
    transcripts = [_transcript(traj) for traj in shown]
    return {"rollouts": {"task": task, "transcripts": transcripts, "total": total, "more": total - len(shown),
                         "by_model": by_model, "list_url": reverse("tasks:trajectories") + f"?ids={task.pk}"}}


urlpatterns = [
    path("rollouts/", batch_list, name="rollouts"),
    path("rollouts/new/", batch_new, name="rollout-new"),
    path("rollouts/import/", batch_import, name="rollout-import"),
    path("rollouts/trajectories/", trajectory_list, name="trajectories"),
    path("rollouts/trajectories/<int:trajectory_id>/", trajectory_detail, name="trajectory"),
    path("rollouts/<int:batch_id>/", batch_detail, name="rollout-batch"),
    path("rollouts/<int:batch_id>/cancel/", batch_cancel, name="rollout-cancel"),
    path("rollouts/<int:batch_id>/resume/", batch_resume, name="rollout-resume"),
]
