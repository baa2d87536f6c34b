"""Review pages: decisions, the review queue with its locks, bulk decisions with confirmation,
the audit log with undo, and the overview (funnel, reasons, throughput). Thin: the workflows are
in tasks.review."""
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from facet_site import stamps
from facet_site.lib.render import highlight_code, render_markdown
from facet_site.roles import can_lead, can_review, is_admin, require
from scenarios.models import SynthesisRun

from . import agreement, charts, consensus, guidelines, review, review_numbers, review_queue
from .filters import TaskFilter
from .models import AuditEvent, RejectReason, ReviewLock, ReviewState, Task, TaskStatus, ReviewVerdict

AUDIT_PAGE = 50


# --- the review panel (on the task page and the queue's review page) ----------------------------


def _queue_query(request) -> str | None:
    """The queue a page was opened from (its task-filter query), or None outside the queue."""
    raw = request.GET.get("queue") if request.method == "GET" else request.POST.get("queue")
    if raw is None:
        return None
    return review_queue.queue_filter(raw).query_string()


def review_url(task_id: int, queue: str) -> str:
    return f"{reverse('tasks:review', args=[task_id])}?{urlencode({'queue': queue})}"


def queue_url(queue: str) -> str:
    return f"{reverse('tasks:queue')}?{queue}"


def panel_context(request, task) -> dict:
    """Context for tasks/_review_panel.html: the decision form, the lock, the queue controls
    when the page was opened from the queue (?queue=<task filter query>), and the history.
    One key, "review_panel", so it merges into any page's context."""
    user = request.user
    queue = _queue_query(request)
    ctx = {
        "task": task,
        # several required reviews: blind to the others' reviews until one's own is in
        "decisions": consensus.visible(task, user, review.history(task)),
        "consensus": consensus.consensus_of(task),
        "guideline": guidelines.current_guideline(),
        "verdicts": ReviewVerdict.choices,
        "reasons": RejectReason.choices,
        "can_decide": can_review(user) and task.current_version_id is not None,
        "may_force": is_admin(user) and task.status != TaskStatus.VALIDATED,
        "may_override": is_admin(user) and bool(review.error_findings(task)),
        "approve_refusal": review.refusal(task, ReviewVerdict.APPROVE, user=user) if can_review(user) else None,
        "lock": review_queue.lock_of(task),
        "content_hash": task.current_version.content_hash if task.current_version_id else "",
        "queue": queue,
        "here": request.get_full_path(),
    }
    ctx["guideline_html"] = guidelines.rendered(ctx["guideline"])
    ctx["adjudicate"] = ctx["consensus"].state == ReviewState.DISPUTED and can_lead(user)
    if queue is not None:
        ids = review_queue.queue_ids(review_queue.queue_filter(queue))
        ctx["position"], ctx["queue_total"] = review_queue.position(task.pk, ids)
        ctx["queue_url"] = queue_url(queue)
        ctx["queue_described"] = review_queue.queue_filter(queue).describe()
    return {"review_panel": ctx}


def _back(request, fallback: str) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}) and target.startswith("/"):
        return target
    return fallback


@require_POST
@require(can_review)
def decide(request, task_id: int):
    task = get_object_or_404(Task, pk=task_id)
    queue = _queue_query(request)
    before = review_queue.queue_ids(review_queue.queue_filter(queue)) if queue is not None else None
    try:
        decision = review.decide(task, user=request.user, verdict=request.POST.get("verdict", ""),
                                 reason=request.POST.get("reason", ""), comment=request.POST.get("comment", ""),
                                 content_hash=request.POST.get("content_hash") or None,
                                 force=request.POST.get("force") == "1",
                                 adjudicate=request.POST.get("adjudicate") == "1",
                                 override_reason=request.POST.get("override_reason", ""))
    except review.NotAllowed as exc:
        raise PermissionDenied(str(exc)) from None
    except review.ReviewError as exc:
        messages.error(request, str(exc))
        return redirect(_back(request, review_url(task.pk, queue) if queue is not None
                              else reverse("tasks:detail", args=[task.pk])))
    reason = f" ({decision.get_reason_display().lower()})" if decision.reason else ""
    what = consensus.effect({}, consensus.describe(decision.task))
    messages.success(request, f"{decision.get_verdict_display()}{reason}: “{task.name}” v{decision.version.number} — "
                              f"{what}. The audit log can undo it.")
    if queue is None:
        return redirect(_back(request, reverse("tasks:detail", args=[task.pk])))
    # from the queue: on to the next task, letting go of this one
    review_queue.release_lock(task.pk, request.user)
    nxt = review_queue.advance(request.user, review_queue.queue_filter(queue), current=task.pk, before=before)
    if nxt is None:
        messages.info(request, "Nothing left in this queue that nobody else is reviewing.")
        return redirect(queue_url(queue))
    return redirect(review_url(nxt.pk, queue))


# --- the queue -----------------------------------------------------------------------------------


@require_GET
def queue(request):
    task_filter = review_queue.queue_filter(request.GET)
    query = task_filter.query_string()
    ids = review_queue.queue_ids(task_filter)
    locks = list(review_queue.live_locks().select_related("holder", "task").order_by("acquired_at"))
    in_queue = set(ids)
    mine = [lock for lock in locks if lock.holder_id == request.user.pk and lock.task_id in in_queue]
    busy = sum(1 for lock in locks if lock.task_id in in_queue and lock.holder_id != request.user.pk)
    return render(request, "tasks/queue.html", {
        "query": query, "described": task_filter.describe(), "errors": task_filter.errors, "total": len(ids),
        "busy": busy, "free": len(ids) - busy, "mine": mine[0] if mine else None, "locks": locks,
        "upcoming": [t for t in map(Task.objects.in_bulk(ids[:10]).get, ids[:10]) if t],
        "statuses": TaskStatus.choices, "review_states": ReviewState.choices,
        "runs": SynthesisRun.objects.order_by("-id")[:100],
        "lock_minutes": int(review_queue.lock_timeout().total_seconds() // 60),
        "default_queue": review_queue.DEFAULT_QUEUE,
    })


@require_POST
@require(can_review)
def queue_next(request):
    """Take the lock of the next (or previous) task and open it; `current` is the task on screen."""
    queue = _queue_query(request) or review_queue.queue_filter("").query_string()
    current = request.POST.get("current", "")
    direction = "previous" if request.POST.get("direction") == "previous" else "next"
    nxt = review_queue.advance(request.user, review_queue.queue_filter(queue), current=int(current) if current.isdigit() else None,
                         direction=direction)
    if nxt is None:
        if current.isdigit():
            messages.info(request, f"No {direction} task in this queue that nobody else is reviewing.")
            return redirect(review_url(int(current), queue))
        messages.info(request, "Nothing in this queue that nobody else is reviewing.")
        return redirect(queue_url(queue))
    return redirect(review_url(nxt.pk, queue))


@require_POST
@require(can_review)
def release(request, task_id: int):
    queue = _queue_query(request)
    if review_queue.release_lock(task_id, request.user):
        messages.success(request, f"You let go of task #{task_id}: another reviewer may take it.")
    return redirect(queue_url(queue) if queue is not None else reverse("tasks:detail", args=[task_id]))


@require_POST
@require(can_review)
def renew(request, task_id: int):
    """The review page's heartbeat: keeps the reviewer's own lock while the page is open.
    It never takes a lock someone else holds."""
    if not ReviewLock.objects.filter(task_id=task_id, holder=request.user).exists():
        return HttpResponse("", status=204)
    review_queue.take_lock(task_id, request.user)
    return HttpResponse("", status=204)


def review_page(request, task_id: int):
    """One task with what a decision needs side by side: the instruction, the verifier's result
    on the current version, and the decision form (with the queue's controls)."""
    task = get_object_or_404(Task.objects.select_related("current_version", "run"), pk=task_id)
    return render(request, "tasks/review_task.html", review_page_context(request, task))


def review_page_context(request, task) -> dict:
    """The review page's context (also the multi-review queue's page, tasks.reviewers_views)."""
    version = task.current_version
    files = version.files if version else {}
    tests = {p: highlight_code(text, filename=p, anchor=f"t{i}-L") for i, (p, text) in
             enumerate(sorted((p, t) for p, t in files.items() if p.startswith("tests/")))}
    context = {
        "task": task, "version": version,
        "instruction": render_markdown(files.get("instruction.md", "")),
        "validation": review_numbers.validation_of(task),
        "test_files": tests,
        "repairs": task.repairs.count(),
    }
    context.update(panel_context(request, task))
    return context


# --- bulk decisions ---------------------------------------------------------------------------


@require(can_review)
def bulk(request):
    """GET ?<task filter>&verdict=...: what a bulk decision on the filtered selection would do.
    POST to the same URL with `confirm`: do it. The decision's reason travels as
    `decision_reason`, because `reason` already filters the selection by its decisions' reason."""
    task_filter = TaskFilter.from_query(request.GET)
    data = request.POST if request.method == "POST" else request.GET
    verdict = data.get("verdict", "") or request.GET.get("verdict", "")
    reason, comment = data.get("decision_reason", ""), data.get("comment", "")
    query = task_filter.query_string(with_view=False)
    context = {"task_filter": task_filter, "query": query, "verdict": verdict, "verdicts": ReviewVerdict.choices,
               "reasons": RejectReason.choices, "reason": reason, "comment": comment,
               "list_url": f"{reverse('tasks:list')}?{query}" if query else reverse("tasks:list")}
    if verdict not in ReviewVerdict.values:
        if verdict:
            messages.error(request, f"verdict: expected one of {', '.join(ReviewVerdict.values)}")
        return render(request, "tasks/bulk.html", context)
    if request.method == "POST" and data.get("confirm"):
        expected = data.get("expected", "")
        try:
            result = review.apply_bulk(task_filter, user=request.user, verdict=verdict, reason=reason, comment=comment,
                                       expected=int(expected) if expected.isdigit() else None)
        except review.NotAllowed as exc:
            raise PermissionDenied(str(exc)) from None
        except review.ReviewError as exc:
            messages.error(request, str(exc))
        else:
            skipped = sum(result.skipped.values())
            states = ", ".join(f"{n} {ReviewState(s).label.lower()}" for s, n in sorted(result.consensus.items()))
            messages.success(request, f"{ReviewVerdict(verdict).label}: {result.decided} task{'s' if result.decided != 1 else ''}"
                                      f" decided, {skipped} skipped (audit entry #{result.event.pk}; it can be undone)."
                                      + (f" Where they stand now: {states}." if states else ""))
            return redirect(f"{reverse('tasks:audit')}?action={review.BULK_DECIDE}")
    elif request.method == "POST":
        messages.error(request, "Tick the confirmation to apply the decision.")
    context["plan"] = review.plan_bulk(task_filter, verdict=verdict)
    context["verdict_label"] = ReviewVerdict(verdict).label
    context["needs_reason"] = verdict in review.REASON_REQUIRED
    context["action_url"] = f"{reverse('tasks:bulk')}?{urlencode([('verdict', verdict)])}{'&' + query if query else ''}"
    return render(request, "tasks/bulk.html", context)


# --- the audit log ----------------------------------------------------------------------------


def audit(request):
    events = AuditEvent.objects.select_related("actor", "task", "undoes", "undone_by").order_by("-id")
    task_id = request.GET.get("task", "").strip()
    actor = request.GET.get("actor", "").strip()
    action = request.GET.get("action", "").strip()
    if task_id.isdigit():
        events = events.filter(task_id=int(task_id))
    if actor:
        events = events.filter(actor__username=actor)
    if action:
        events = events.filter(action=action)
    page = Paginator(events, AUDIT_PAGE).get_page(request.GET.get("page"))
    # several required reviews: others' entries on a task the user has yet to review are masked
    blind = set(consensus.blind_tasks(request.user, [e.task_id for e in page]))
    for event in page:
        event.refusal = review.undo_refusal(event, user=request.user)
        hidden = event.task_id in blind and event.actor_id != request.user.pk
        event.changes = [("hidden", "until your own review is in", None)] if hidden else _changes(event)
    query = urlencode([(k, v) for k, v in (("task", task_id), ("actor", actor), ("action", action)) if v])
    return render(request, "tasks/audit.html", {
        "page": page, "task_id": task_id, "actor": actor, "action": action, "query": query,
        "actions": sorted(set(review.ACTIONS) | set(AuditEvent.objects.values_list("action", flat=True).distinct())),
        "actors": get_user_model().objects.order_by("username").values_list("username", flat=True),
    })


def _changes(event: AuditEvent) -> list[tuple[str, object, object]]:
    """(field, before, after) for every field either side names, in a stable order."""
    before, after = event.before or {}, event.after or {}
    keys = list(before) + [k for k in after if k not in before]
    return [(k, before.get(k), after.get(k)) for k in keys]


@require_POST
@require(can_review)
def undo(request, event_id: int):
    event = get_object_or_404(AuditEvent, pk=event_id)
    try:
        compensation = review.undo(event, user=request.user)
    except review.NotAllowed as exc:
        raise PermissionDenied(str(exc)) from None
    except review.ReviewError as exc:
        messages.error(request, str(exc))
    else:
        after = compensation.after or {}
        where = f" {consensus.effect(compensation.before or {}, after)}." if "consensus" in after else ""
        messages.success(request, f"Entry #{event.pk} undone by entry #{compensation.pk}.{where}")
    return redirect(_back(request, reverse("tasks:audit")))


# --- the overview --------------------------------------------------------------------------------


def overview(request):
    """The funnel comes with the page; decisions by reason and throughput are fragments the page
    loads right after (?part=reasons, ?part=throughput), so the funnel shows without waiting for
    them; ?part=summary is the home page's card."""
    runs = SynthesisRun.objects.order_by("-id")
    run_id = request.GET.get("run", "")
    run = runs.filter(pk=int(run_id)).first() if run_id.isdigit() else None
    part = request.GET.get("part", "")
    run_key = run.pk if run is not None else None
    if part == "reasons":
        reasons = stamps.cached("review-reasons", stamps.TASKS_STAMP, lambda: review_numbers.reasons(run), run_key)
        return render(request, "tasks/overview.html#reasons", {
            "run": run, "reasons": reasons, "reasons_chart": charts.reasons_chart(reasons),
            "any_reason": any(r["total"] for r in reasons)})
    if part == "agreement":
        # not cached: a decision changes it, and it is one grouped query over current decisions
        return render(request, "tasks/overview.html#agreement", {"run": run, "agreement": agreement.overall(run=run)})
    if part == "throughput":
        throughput = stamps.cached("review-throughput", stamps.TASKS_STAMP, lambda: review_numbers.throughput(run), run_key)
        return render(request, "tasks/overview.html#throughput", {
            "run": run, "throughput": throughput, "throughput_chart": charts.throughput_chart(throughput)})
    funnel = stamps.cached("review-funnel", stamps.TASKS_STAMP, lambda: review_numbers.funnel(run), run_key)
    if part == "summary":
        return render(request, "tasks/overview.html#summary", {"stages": {r["stage"]: r for r in funnel}})

    def figures_and_tables():
        return {"funnel_chart": charts.funnel_chart(funnel), "states": review_numbers.review_states(run),
                "by_run": review_numbers.by_run() if run is None else []}

    return render(request, "tasks/overview.html", {
        "runs": runs[:200], "run": run, "funnel": funnel,
        **stamps.cached("review-overview", stamps.TASKS_STAMP, figures_and_tables, run_key),
        "part_query": f"&run={run.pk}" if run is not None else "",
    })


urlpatterns = [
    path("queue/", queue, name="queue"),
    path("queue/next/", queue_next, name="queue-next"),
    path("overview/", overview, name="overview"),
    path("bulk/", bulk, name="bulk"),
    path("audit/", audit, name="audit"),
    path("audit/<int:event_id>/undo/", undo, name="undo"),
    path("<int:task_id>/decide/", decide, name="decide"),
    path("<int:task_id>/review/", review_page, name="review"),
    path("<int:task_id>/release/", release, name="release-lock"),
    path("<int:task_id>/renew/", renew, name="renew-lock"),
]
