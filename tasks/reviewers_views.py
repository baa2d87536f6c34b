"""Pages of review at team scale: multi-review queues (policies) and their review page, the
adjudication queue, the reviewers' page with agreement (and its CSV), assignments, guidelines and
gold tasks. Thin: the workflows are in tasks.assignment, consensus, agreement, guidelines, gold."""
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_POST

from facet_site.roles import can_lead, can_review, require
from scenarios.models import SynthesisRun

from . import agreement, assignment, consensus, gold, guidelines, review
from .filters import TaskFilter
from .models import ReviewPolicy, ReviewVerdict, RejectReason, SavedView, Task
from .review_views import review_page_context


def _refused(request, exc: review.ReviewError):
    if isinstance(exc, review.NotAllowed):
        raise PermissionDenied(str(exc))
    messages.error(request, str(exc))


def _int(value, default=None):
    value = (value or "").strip()
    return int(value) if value.lstrip("-").isdigit() else default


# --- policies and their queues -------------------------------------------------------------------


def team_home(request):
    policies = list(ReviewPolicy.objects.select_related("run", "saved_view").order_by("name"))
    for p in policies:
        p.described = consensus.policy_filter(p).describe()
        p.counts = assignment.queue_counts(p, request.user) if can_review(request.user) else None
    return render(request, "tasks/team.html", {
        "policies": policies, "disputed": consensus.adjudication_queue().count(),
        "runs": SynthesisRun.objects.order_by("-id")[:100],
        "views": SavedView.objects.filter(shared=True).order_by("name") if can_lead(request.user) else [],
        "workload": assignment.workload(), "max_required": consensus.MAX_REQUIRED,
    })


@require_POST
@require(can_lead)
def policy_save(request):
    data = request.POST
    scope = data.get("scope", "query")
    try:
        policy = assignment.save_policy(
            user=request.user, name=data.get("name", ""), required_reviews=data.get("required_reviews", ""),
            gold_rate=data.get("gold_rate", ""),
            run_id=_int(data.get("run")) if scope == "run" else None,
            saved_view_id=_int(data.get("saved_view")) if scope == "view" else None,
            query=data.get("query", "") if scope == "query" else "")
    except review.ReviewError as exc:
        _refused(request, exc)
        return redirect("tasks:team")
    messages.success(request, f"Queue “{policy.name}”: {policy.required_reviews} review"
                              f"{'s' if policy.required_reviews != 1 else ''} per task.")
    return redirect("tasks:team-queue", policy_id=policy.pk)


def team_queue(request, policy_id: int):
    policy = get_object_or_404(ReviewPolicy, pk=policy_id)
    mine = assignment.assignments_of(request.user).filter(task__in=assignment.open_tasks(policy))[:20]
    return render(request, "tasks/team_queue.html", {
        "policy": policy, "described": consensus.policy_filter(policy).describe(),
        "query": consensus.policy_filter(policy).query_string(),
        "counts": assignment.queue_counts(policy, request.user) if can_review(request.user) else None,
        "assigned": mine,
    })


def _team_review_url(policy_id: int, task_id: int) -> str:
    return reverse("tasks:team-review", args=[policy_id, task_id])


@require_POST
@require(can_review)
def team_next(request, policy_id: int):
    policy = get_object_or_404(ReviewPolicy, pk=policy_id)
    task = assignment.next_task(request.user, policy, after=_int(request.POST.get("current")))
    if task is None:
        messages.info(request, "Nothing left in this queue for you: every task has your review or enough reviewers.")
        return redirect("tasks:team-queue", policy_id=policy.pk)
    return redirect(_team_review_url(policy.pk, task.pk))


def team_review(request, policy_id: int, task_id: int):
    """The review page of a multi-review queue: the same page as the classic queue's, its panel
    posting to this queue and blind to the others' reviews until the reviewer's own is in."""
    policy = get_object_or_404(ReviewPolicy, pk=policy_id)
    task = get_object_or_404(Task.objects.select_related("current_version", "run"), pk=task_id)
    context = review_page_context(request, task)
    context["review_panel"]["team"] = {"policy": policy, "decide_url": reverse("tasks:team-decide", args=[policy.pk, task.pk]),
                                       "next_url": reverse("tasks:team-next", args=[policy.pk]),
                                       "queue_url": reverse("tasks:team-queue", args=[policy.pk])}
    return render(request, "tasks/review_task.html", context)


@require_POST
@require(can_review)
def team_decide(request, policy_id: int, task_id: int):
    policy = get_object_or_404(ReviewPolicy, pk=policy_id)
    task = get_object_or_404(Task, pk=task_id)
    try:
        decision = review.decide(task, user=request.user, verdict=request.POST.get("verdict", ""),
                                 reason=request.POST.get("reason", ""), comment=request.POST.get("comment", ""),
                                 content_hash=request.POST.get("content_hash") or None)
    except review.ReviewError as exc:
        _refused(request, exc)
        return redirect(_team_review_url(policy.pk, task.pk))
    task.refresh_from_db()
    c = consensus.describe(task)
    messages.success(request, f"{decision.get_verdict_display()}: “{task.name}” — {consensus.effect({}, c)}.")
    assignment.release(request.user, task.pk)
    nxt = assignment.next_task(request.user, policy, after=task.pk)
    if nxt is None:
        messages.info(request, "Nothing left in this queue for you.")
        return redirect("tasks:team-queue", policy_id=policy.pk)
    return redirect(_team_review_url(policy.pk, nxt.pk))


@require_POST
@require(can_review)
def team_release(request, policy_id: int, task_id: int):
    assignment.release(request.user, task_id)
    messages.success(request, f"You let go of task #{task_id}.")
    return redirect("tasks:team-queue", policy_id=policy_id)


# --- adjudication ------------------------------------------------------------------------------


def adjudication(request):
    tasks = list(consensus.adjudication_queue()[:200])
    for t in tasks:
        t.consensus = consensus.consensus_of(t)
    return render(request, "tasks/adjudication.html", {"tasks": tasks, "may_adjudicate": can_lead(request.user)})


# --- reviewers and agreement ----------------------------------------------------------------------


def _period(request) -> tuple[str, int | None]:
    key = request.GET.get("days", "30")
    key = key if key in agreement.PERIODS else "30"
    return key, agreement.PERIODS[key]


def _run(request):
    run_id = request.GET.get("run", "")
    return SynthesisRun.objects.filter(pk=int(run_id)).first() if run_id.isdigit() else None


def reviewers(request):
    key, days = _period(request)
    run = _run(request)
    figures = agreement.figures(run=run, since=agreement.since(days))
    return render(request, "tasks/reviewers.html", {
        "period": key, "periods": list(agreement.PERIODS), "run": run, "runs": SynthesisRun.objects.order_by("-id")[:100],
        "rows": agreement.reviewers(days=days), "figures": figures,
        "csv_query": urlencode([(k, v) for k, v in (("days", key), ("run", run.pk if run else "")) if v]),
    })


def agreement_csv(request):
    _, days = _period(request)
    body = agreement.as_csv(agreement.figures(run=_run(request), since=agreement.since(days)))
    response = HttpResponse(body, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="agreement.csv"'
    return response


# --- assignments, guidelines, gold ----------------------------------------------------------------


@require(can_lead)
def assign(request):
    query = request.POST.get("query", "") if request.method == "POST" else request.GET.get("query", "")
    task_filter = TaskFilter.from_query(query)
    if request.method == "POST":
        try:
            result = assignment.assign(task_filter, user=request.user, reviewers=request.POST.getlist("reviewers"),
                                       mode=request.POST.get("mode", "named"),
                                       priority=_int(request.POST.get("priority"), 0))
        except review.ReviewError as exc:
            _refused(request, exc)
        else:
            per = ", ".join(f"{name}: {n}" for name, n in result["per_reviewer"].items())
            messages.success(request, f"{result['tasks']} task{'s' if result['tasks'] != 1 else ''} assigned ({per}).")
            return redirect("tasks:team")
    people = [u for u in get_user_model().objects.filter(is_active=True).order_by("username") if can_review(u)]
    return render(request, "tasks/assign.html", {
        "query": task_filter.query_string(), "described": task_filter.describe(), "errors": task_filter.errors,
        "count": task_filter.queryset().count(), "people": people})


def guidelines_page(request):
    if request.method == "POST":
        if not can_lead(request.user):
            raise PermissionDenied("Only admins and leads edit the review guidelines.")
        try:
            g = guidelines.publish(user=request.user, text=request.POST.get("text", ""), note=request.POST.get("note", ""))
        except review.ReviewError as exc:
            _refused(request, exc)
        else:
            messages.success(request, f"Guidelines version {g.number} is in force.")
            return redirect("tasks:guidelines")
    current = guidelines.current_guideline()
    return render(request, "tasks/guidelines.html", {
        "current": current, "html": guidelines.rendered(current), "history": guidelines.history(),
        "may_edit": can_lead(request.user)})


def gold_page(request):
    if request.method == "POST":
        if not can_lead(request.user):
            raise PermissionDenied("Only admins and leads mark gold tasks.")
        task = get_object_or_404(Task.objects.select_related("current_version"), pk=_int(request.POST.get("task"), 0))
        try:
            if request.POST.get("unmark"):
                gold.unmark(task, user=request.user)
                messages.success(request, f"Task #{task.pk} is no longer a gold task.")
            else:
                gold.mark(task, user=request.user, verdict=request.POST.get("verdict", ""),
                          reason=request.POST.get("reason", ""), note=request.POST.get("note", ""))
                messages.success(request, f"Task #{task.pk} is a gold task.")
        except review.ReviewError as exc:
            _refused(request, exc)
        return redirect("tasks:gold")
    may = can_lead(request.user)
    return render(request, "tasks/gold.html", {
        # the known verdicts are for leads: a reviewer who saw them would no longer be checked
        "gold": list(gold.gold_tasks()) if may else [], "count": gold.gold_tasks().count(),
        "accuracy": gold.accuracy(), "may_edit": may, "verdicts": ReviewVerdict.choices,
        "reasons": RejectReason.choices})


urlpatterns = [
    path("team/", team_home, name="team"),
    path("team/policies/save/", policy_save, name="team-policy-save"),
    path("team/<int:policy_id>/", team_queue, name="team-queue"),
    path("team/<int:policy_id>/next/", team_next, name="team-next"),
    path("team/<int:policy_id>/tasks/<int:task_id>/", team_review, name="team-review"),
    path("team/<int:policy_id>/tasks/<int:task_id>/decide/", team_decide, name="team-decide"),
    path("team/<int:policy_id>/tasks/<int:task_id>/release/", team_release, name="team-release"),
    path("team/adjudication/", adjudication, name="adjudication"),
    path("team/reviewers/", reviewers, name="reviewers"),
    path("team/agreement.csv", agreement_csv, name="agreement-csv"),
    path("team/assign/", assign, name="assign"),
    path("team/guidelines/", guidelines_page, name="guidelines"),
    path("team/gold/", gold_page, name="gold"),
]
