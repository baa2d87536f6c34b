"""JSON API of review: decisions, the audit log with undo, bulk decisions on a task filter and
the review queue. Viewers read; every write needs a reviewer or an admin (403 otherwise)."""
from datetime import datetime

from django.db.models import Q
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from ninja.pagination import paginate

from facet_site.pagination import PageNumberPagination  # bounded page numbers
from facet_site.roles import can_review

from . import consensus, review, review_queue, summary
from .models import AuditEvent, Task

# mounted at /tasks (decisions, bulk decisions, locks), /audit and /queue by facet_site/api.py
task_review_router = Router(tags=["review"])
audit_router = Router(tags=["review"])
queue_router = Router(tags=["review"])


class DecisionIn(Schema):
    verdict: str  # approve | reject | needs_fix
    reason: str = ""  # models.RejectReason; required for reject and needs_fix
    comment: str = ""
    content_hash: str | None = None  # the version you reviewed: refused (409) when a newer one exists
    force: bool = False  # admins only: approve a task that is not validated
    override_reason: str = ""  # admins only: approve despite error-level findings, and why


class DecisionOut(Schema):
    id: int
    task_id: int
    version_id: int
    version: int = Field(alias="version.number")
    content_hash: str
    verdict: str
    reason: str
    comment: str
    author: str | None = Field(None, alias="author.username")
    bulk: bool
    withdraws_id: int | None = None
    withdrawn: bool = False  # set by review.history
    standing: bool = False  # set by review.history, or by the route that made the decision
    created_at: datetime


class AuditEventOut(Schema):
    id: int
    actor: str | None = Field(None, alias="actor.username")
    action: str
    object_type: str
    object_id: str
    task_id: int | None = None
    before: dict | None = None
    after: dict | None = None
    undoes_id: int | None = None
    undone_by_id: int | None = None
    created_at: datetime

    @staticmethod
    def resolve_undone_by_id(event: AuditEvent) -> int | None:
        try:
            return event.undone_by.pk
        except AuditEvent.DoesNotExist:
            return None


class BulkIn(Schema):
    query: str = ""  # a task-list filter query string (tasks.filters.TaskFilter), e.g. "status=validated&run=3"
    verdict: str
    reason: str = ""
    comment: str = ""
    confirm: bool = False  # false: only say what would happen
    expected: int | None = None  # the eligible count you confirmed; 409 when the selection changed


class SkippedOut(Schema):
    why: str
    count: int


class BulkOut(Schema):
    applied: bool
    filter: str
    verdict: str
    total: int
    eligible: int
    decided: int = 0
    skipped: list[SkippedOut]
    sample: list[int]
    audit_event_id: int | None = None


class QueueOut(Schema):
    """The task taken from the queue, with the queue's position, total and query set by the route."""

    task_id: int = Field(alias="pk")
    name: str
    status: str
    review_state: str
    version: int | None = Field(None, alias="current_version.number")
    content_hash: str | None = Field(None, alias="current_version.content_hash")
    position: int | None = None
    total: int
    lock_expires_in_s: int
    queue: str


def _reviewer(request, action: str):
    if not can_review(request.auth):
        raise HttpError(403, f"Only reviewers and admins may {action}.")


def _refused(exc: review.ReviewError):
    return HttpError(exc.status, str(exc))


@task_review_router.post("/{int:task_id}/decisions", response={201: DecisionOut},
             summary="Approve, reject or ask for a fix of the task's current version (reviewers)")
def create_decision(request, task_id: int, payload: DecisionIn):
    _reviewer(request, "decide on tasks")
    task = get_object_or_404(Task, pk=task_id)
    try:
        decision = review.decide(task, user=request.auth, verdict=payload.verdict, reason=payload.reason,
                                 comment=payload.comment, content_hash=payload.content_hash, force=payload.force,
                                 override_reason=payload.override_reason)
    except review.ReviewError as exc:
        raise _refused(exc) from None
    task.refresh_from_db()
    standing = summary.standing_decision(task)
    decision.standing = standing is not None and standing.pk == decision.pk
    return Status(201, decision)


@task_review_router.get("/{int:task_id}/decisions", response=list[DecisionOut],
            summary="Every decision on the task, newest first (undo entries have withdraws_id)")
def list_decisions(request, task_id: int):
    task = get_object_or_404(Task.objects.select_related("current_version"), pk=task_id)
    # several required reviews: others' reviews of the current version stay hidden until yours is in
    return consensus.visible(task, request.auth, review.history(task))


@audit_router.get("", response=list[AuditEventOut], summary="The audit log, newest first (filter by task, actor, action)")
@paginate(PageNumberPagination, page_size=50)
def list_audit(request, task: int | None = None, actor: str = "", action: str = ""):
    qs = AuditEvent.objects.select_related("actor", "undone_by").order_by("-id")
    if task is not None:
        qs = qs.filter(task_id=task)
    if actor:
        qs = qs.filter(actor__username=actor)
    if action:
        qs = qs.filter(action=action)
    # several required reviews: others' entries on tasks the caller has yet to review are left out
    return qs.exclude(Q(task_id__in=consensus.blind_tasks(request.auth)) & ~Q(actor=request.auth))


@audit_router.post("/{int:event_id}/undo", response={201: AuditEventOut},
             summary="Undo a decision or a bulk decision with a compensating entry (reviewers: their own; admins: any)")
def undo_event(request, event_id: int):
    _reviewer(request, "undo")
    event = get_object_or_404(AuditEvent.objects.select_related("undone_by"), pk=event_id)
    try:
        compensation = review.undo(event, user=request.auth)
    except review.ReviewError as exc:
        raise _refused(exc) from None
    return Status(201, compensation)


@task_review_router.post("/bulk-decisions", response=BulkOut,
             summary="Decide on every task a filter selects: without confirm, what would happen; with it, do it")
def bulk_decisions(request, payload: BulkIn):
    _reviewer(request, "make bulk decisions")
    from .filters import TaskFilter

    task_filter = TaskFilter.from_query(payload.query)
    if task_filter.errors:
        raise HttpError(422, "; ".join(task_filter.errors))
    try:
        plan = review.plan_bulk(task_filter, verdict=payload.verdict, sample_size=20)
        out = {"applied": False, "filter": task_filter.describe(), "verdict": payload.verdict, "total": plan.total,
               "eligible": len(plan.eligible), "skipped": [{"why": s["why"], "count": s["count"]} for s in plan.skipped],
               "sample": [t.pk for t in plan.sample]}
        if not payload.confirm:
            review.check_decision(payload.verdict, payload.reason.strip())
            return out
        result = review.apply_bulk(task_filter, user=request.auth, verdict=payload.verdict, reason=payload.reason,
                                   comment=payload.comment, expected=payload.expected)
    except review.ReviewError as exc:
        raise _refused(exc) from None
    out.update(applied=True, decided=result.decided, audit_event_id=result.event.pk,
               skipped=[{"why": why, "count": n} for why, n in result.skipped.items()])
    return out


class QueueNextIn(Schema):
    query: str = ""  # a task-filter query string; default: validated and not reviewed
    after: int | None = Field(None, ge=1, le=2**63 - 1)  # the task you just looked at, to move on from it


@queue_router.post("/next", response={200: QueueOut, 204: None},
                   summary="Take the lock of the next task of the review queue (reviewers); 204 when none is free")
def queue_next(request, payload: QueueNextIn = None):
    """Taking the lock and releasing the reviewer's other queue locks are writes: a POST, so a
    session caller needs the CSRF token and no link or image can move anyone's queue."""
    _reviewer(request, "take tasks from the review queue")
    payload = payload or QueueNextIn()
    task_filter = review_queue.queue_filter(payload.query)
    task = review_queue.advance(request.auth, task_filter, current=payload.after)
    if task is None:
        return Status(204, None)
    task.position, task.total = review_queue.position(task.pk, review_queue.queue_ids(task_filter))
    task.lock_expires_in_s = int(review_queue.lock_timeout().total_seconds())
    task.queue = task_filter.query_string()
    return task


@task_review_router.delete("/{int:task_id}/lock", response={204: None}, summary="Let go of your review lock on a task")
def release_lock(request, task_id: int):
    _reviewer(request, "hold review locks")
    review_queue.release_lock(task_id, request.auth)
    return Status(204, None)
