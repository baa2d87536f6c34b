"""Human review of tasks: decisions, their audit trail and undo, bulk decisions on a filtered
selection, the review queue and its locks, and the numbers of the overview page.

Decisions and audit events are append-only. Where a task's review stands is derived from its
decisions (summary.standing_decision) and denormalised by summary.refresh_summary only. Every
function here that writes a decision first locks the task row and then refreshes the summary in
the same transaction, so two reviewers deciding at once leave Task.review_state equal to what
the decisions say (without the lock, the transaction that commits last could write the state of
the decision that is not the newest).

Approving needs a validated task: a reviewer may confirm the rejection of a discarded or failed
task, or ask for a fix, but an approval of a task whose current version did not pass validation
is refused unless an admin forces it (the audit event records `forced`). Bulk decisions never
force.

Approving also needs a version without error-level findings (Task.finding_kinds, over every
validation of the version: a leaked answer, a flaky or networked verifier, ...). An admin may
override them with a mandatory reason, which the decision, the audit event and the export
manifest carry. Bulk approvals never override.

The review queue and its locks are in review_queue.py; the overview's numbers in review_numbers.py.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.db.models import Count

from facet_site.roles import can_review, is_admin

from . import consensus, summary
from .filters import TaskFilter
from .models import (
    AuditEvent,
    Decision,
    RejectReason,
    Task,
    TaskStatus,
    ReviewVerdict,
)

# audit actions written here
DECIDE = "decide"
UNDO = "undo"
BULK_DECIDE = "bulk_decide"
RECLAIM_LOCK = "reclaim_lock"
ACTIONS = (DECIDE, UNDO, BULK_DECIDE, RECLAIM_LOCK)
UNDOABLE = {DECIDE, BULK_DECIDE}

STATE_OF_VERDICT = consensus.STATE_OF_VERDICT
REASON_REQUIRED = {ReviewVerdict.REJECT, ReviewVerdict.NEEDS_FIX}
UNDO_COMMENT = "undo"

BULK_CHUNK = 200


class ReviewError(Exception):
    """A refusal worth showing to the reviewer as it is (pages: a message; API: `status`)."""

    status = 409


class InvalidDecision(ReviewError):
    status = 422


class NotAllowed(ReviewError):
    status = 403


# --- decisions ---------------------------------------------------------------------------------


def check_decision(verdict: str, reason: str) -> None:
    if verdict not in ReviewVerdict.values:
        raise InvalidDecision(f"verdict: expected one of {', '.join(ReviewVerdict.values)}, not {verdict!r}")
    if reason and reason not in RejectReason.values:
        raise InvalidDecision(f"reason: expected one of {', '.join(RejectReason.values)}, not {reason!r}")
    if verdict in REASON_REQUIRED and not reason:
        raise InvalidDecision(f"reason: choose why the task is {'rejected' if verdict == ReviewVerdict.REJECT else 'sent back for a fix'}.")


def error_findings(task: Task) -> list[str]:
    """The check ids of the error-level findings on the task's current version."""
    return [k for k in (task.finding_kinds or "").split(",") if k]


def refusal(task: Task, verdict: str, *, user, force: bool = False, override_reason: str = "") -> str | None:
    """Why `user` may not give `verdict` on the task as it stands, or None."""
    if not can_review(user):
        return "Your role does not allow deciding on tasks."
    if task.current_version_id is None:
        return f"Task #{task.pk} has no version yet: there is nothing to decide on."
    if verdict == ReviewVerdict.APPROVE and task.status != TaskStatus.VALIDATED:
        if not force:
            return (f"Task #{task.pk} is {task.get_status_display().lower()}, not validated: only a validated task "
                    f"can be approved (an admin may force the approval).")
        if not is_admin(user):
            return "Only an admin may force the approval of a task that is not validated."
    if verdict == ReviewVerdict.APPROVE and (kinds := error_findings(task)):
        if not override_reason.strip():
            return (f"Task #{task.pk} v{task.current_version.number} has error-level findings ({', '.join(kinds)}): "
                    f"it cannot be approved. An admin may override them with a reason.")
        if not is_admin(user):
            return "Only an admin may override error-level findings to approve a task."
    return None


def _locked(task_id: int) -> Task:
    # The row lock serialises deciders of one task (PostgreSQL; SQLite serialises all writers).
    return Task.objects.select_for_update().get(pk=task_id)


def _snapshot(task: Task) -> dict:
    """The task's review as it stands, for an audit event's before/after."""
    standing = summary.standing_decision(task)
    return {
        "review_state": task.review_state,
        "decision": standing.pk if standing else None,
        "verdict": standing.verdict if standing else None,
        "reason": standing.reason if standing else None,
        "comment": standing.comment if standing else None,
        "version": task.current_version.number if task.current_version_id else None,
        # several reviewers: how many reviews are in, of how many, and whether they agree
        **consensus.describe(task),
    }


def _record(task: Task, *, user, verdict: str, reason: str, comment: str, bulk: bool = False,
            forced: bool = False, bulk_id: str = "", adjudication: bool = False,
            override_reason: str = "") -> Decision:
    """A decision on the locked task's current version (with what it was made under, see
    consensus.note), the summary and one audit event."""
    before = _snapshot(task)
    version = task.current_version
    overridden = error_findings(task) if override_reason else []
    decision = Decision.objects.create(task=task, version=version, content_hash=version.content_hash, verdict=verdict,
                                       reason=reason, comment=comment, author=user, bulk=bulk,
                                       override_reason=override_reason if overridden else "",
                                       overridden_findings=overridden)
    consensus.note(decision, user=user, adjudication=adjudication)
    task = summary.refresh_summary(task)
    decision.task = task  # with the review state the decision left
    after = _snapshot(task) | {"content_hash": version.content_hash}
    if forced:
        after["forced"] = True
    if overridden:
        after["override"] = {"reason": override_reason, "findings": overridden}
    if bulk_id:
        after["bulk_id"] = bulk_id
    if adjudication:
        after["adjudication"] = True
    AuditEvent.objects.create(actor=user, action=DECIDE, object_type="decision", object_id=str(decision.pk),
                              task=task, before=before, after=after)
    return decision


def decide(task: Task | int, *, user, verdict: str, reason: str = "", comment: str = "",
           content_hash: str | None = None, force: bool = False, adjudicate: bool = False,
           override_reason: str = "") -> Decision:
    """Record one reviewer's decision on the task's current version.

    `content_hash` is the version the reviewer looked at: when a repair or an edit made a newer
    one meanwhile, the decision is refused rather than bound to files nobody read. `adjudicate`:
    an admin's or lead's decision that settles a disagreement (tasks.consensus)."""
    if not can_review(user):
        raise NotAllowed("Your role does not allow deciding on tasks.")
    reason = (reason or "").strip()
    comment = (comment or "").strip()
    # an admin's reason to approve despite error-level findings (refusal says when it is needed)
    override_reason = (override_reason or "").strip() if verdict == ReviewVerdict.APPROVE else ""
    check_decision(verdict, reason)
    task_id = task.pk if isinstance(task, Task) else task
    with transaction.atomic():
        task = _locked(task_id)
        why = refusal(task, verdict, user=user, force=force, override_reason=override_reason)
        if adjudicate and not why:
            why = consensus.adjudication_refusal(task, user)
        if why:
            raise ReviewError(why)
        if content_hash and content_hash != task.current_version.content_hash:
            raise ReviewError(f"Task #{task.pk} has a newer version (v{task.current_version.number}) than the one you "
                              f"reviewed: look at it and decide again.")
        forced = verdict == ReviewVerdict.APPROVE and task.status != TaskStatus.VALIDATED
        return _record(task, user=user, verdict=verdict, reason=reason, comment=comment, forced=forced,
                       adjudication=adjudicate, override_reason=override_reason)


def history(task: Task) -> list[Decision]:
    """Every decision on the task, newest first, with `standing`, `withdrawn` and `current`
    (made on the current version) set for display."""
    standing = summary.standing_decision(task)
    current_hash = task.current_version.content_hash if task.current_version_id else None
    rows = list(Decision.objects.filter(task=task).select_related("author", "version", "withdraws")
                .annotate(n_withdrawn=Count("withdrawn_by")).order_by("-id"))
    for d in rows:
        d.standing = standing is not None and d.pk == standing.pk
        d.withdrawn = bool(d.n_withdrawn)
        d.current = d.content_hash == current_hash
    return rows


# --- undo --------------------------------------------------------------------------------------


def _undone(event: AuditEvent) -> bool:
    try:
        return event.undone_by is not None  # select_related("undone_by") answers without a query
    except AuditEvent.DoesNotExist:
        return False


def check_undo(event: AuditEvent, *, user) -> None:
    """Raises NotAllowed (the user's role or authorship) or ReviewError (the entry) unless the
    user may undo the entry."""
    if not can_review(user):
        raise NotAllowed("Your role does not allow undoing.")
    if event.undoes_id is not None:
        raise ReviewError("This entry is itself an undo; an undo cannot be undone (decide again instead).")
    if event.action not in UNDOABLE:
        raise ReviewError("Only decisions and bulk decisions can be undone.")
    if _undone(event):
        raise ReviewError(f"Entry #{event.pk} has already been undone.")
    if not is_admin(user) and event.actor_id != user.pk:
        raise NotAllowed("Reviewers may undo only their own entries; an admin may undo any.")


def undo_refusal(event: AuditEvent, *, user) -> str | None:
    try:
        check_undo(event, user=user)
    except ReviewError as exc:
        return str(exc)
    return None


def undo(event: AuditEvent | int, *, user) -> AuditEvent:
    """Compensate one audit entry: for a decision, a withdrawing Decision (same verdict and
    reason, comment "undo") so the decision before it stands again; for a bulk decision, every
    decision it made that is not undone yet. Returns the compensating audit event."""
    if not isinstance(event, AuditEvent):
        event = AuditEvent.objects.get(pk=event)
    check_undo(event, user=user)
    if event.action == DECIDE:
        return _undo_decision(event, user=user)
    return _undo_bulk(event, user=user)


def _undo_decision(event: AuditEvent, *, user) -> AuditEvent:
    decision = Decision.objects.get(pk=int(event.object_id))
    try:
        with transaction.atomic():
            task = _locked(decision.task_id)
            # re-checked under the lock: a second undo of the same entry waited for the first
            if AuditEvent.objects.filter(undoes=event).exists() or Decision.objects.filter(withdraws=decision).exists():
                raise ReviewError(f"Entry #{event.pk} has already been undone.")
            before = _snapshot(task)
            compensation = Decision.objects.create(
                task=task, version=decision.version, content_hash=decision.content_hash, verdict=decision.verdict,
                reason=decision.reason, comment=UNDO_COMMENT, author=user, bulk=decision.bulk, withdraws=decision)
            task = summary.refresh_summary(task)
            return AuditEvent.objects.create(
                actor=user, action=UNDO, object_type="decision", object_id=str(compensation.pk), task=task,
                before=before, after=_snapshot(task) | {"withdraws": decision.pk}, undoes=event)
    except IntegrityError:  # the unique undoes/withdraws caught a concurrent undo
        raise ReviewError(f"Entry #{event.pk} has already been undone.") from None


def _undo_bulk(event: AuditEvent, *, user) -> AuditEvent:
    bulk_id = (event.after or {}).get("bulk_id", "")
    children = AuditEvent.objects.filter(action=DECIDE, after__bulk_id=bulk_id, undone_by__isnull=True).order_by("id") \
        if bulk_id else AuditEvent.objects.none()
    ids = list(children.values_list("id", flat=True))
    try:
        # the compensating entry is written first: it claims the undo, a second one fails here
        with transaction.atomic():
            compensation = AuditEvent.objects.create(
                actor=user, action=UNDO, object_type="selection", object_id=event.object_id,
                before={"decided": (event.after or {}).get("decided")}, after={"undoing": len(ids)}, undoes=event)
    except IntegrityError:
        raise ReviewError(f"Entry #{event.pk} has already been undone.") from None
    for child in AuditEvent.objects.filter(pk__in=ids).order_by("id"):
        try:
            _undo_decision(child, user=user)
        except ReviewError:
            pass  # undone one by one in the meantime
    return compensation


# --- bulk decisions ------------------------------------------------------------------------------


@dataclass
class BulkPlan:
    """What a bulk decision on a selection would do, for the confirmation page and the API."""

    task_filter: TaskFilter
    verdict: str
    total: int = 0
    eligible: list[int] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # {"why", "count", "sample": [Task]}
    sample: list[Task] = field(default_factory=list)

    @property
    def described(self) -> str:
        return self.task_filter.describe()


def plan_bulk(task_filter: TaskFilter, *, verdict: str, sample_size: int = 10) -> BulkPlan:
    if verdict not in ReviewVerdict.values:
        raise InvalidDecision(f"verdict: expected one of {', '.join(ReviewVerdict.values)}, not {verdict!r}")
    qs = task_filter.queryset()
    plan = BulkPlan(task_filter=task_filter, verdict=verdict, total=qs.count())
    rest = qs.filter(current_version__isnull=False)
    groups = [("no version yet: nothing to decide on", qs.filter(current_version__isnull=True))]
    if verdict == ReviewVerdict.APPROVE:
        groups.append(("not validated: only validated tasks can be approved", rest.exclude(status=TaskStatus.VALIDATED)))
        rest = rest.filter(status=TaskStatus.VALIDATED)
        groups.append(("error-level findings: only an admin may approve, one task at a time, with a reason",
                       rest.exclude(finding_kinds="")))
        rest = rest.filter(finding_kinds="")
    target = STATE_OF_VERDICT[verdict]
    groups.append((f"already {target.label.lower()} on their current version", rest.filter(review_state=target)))
    rest = rest.exclude(review_state=target)
    for why, group in groups:
        n = group.count()
        if n:
            plan.skipped.append({"why": why, "count": n, "sample": list(group[:5])})
    plan.eligible = list(rest.values_list("id", flat=True))
    plan.sample = list(rest.select_related("run")[:sample_size])
    return plan


@dataclass
class BulkResult:
    decided: int
    skipped: dict
    event: AuditEvent
    consensus: dict = field(default_factory=dict)  # review state -> decided tasks now in it


def apply_bulk(task_filter: TaskFilter, *, user, verdict: str, reason: str = "", comment: str = "",
               expected: int | None = None, chunk_size: int = BULK_CHUNK) -> BulkResult:
    """Decide on every eligible task of the selection, one transaction per chunk, each task
    re-checked under its row lock (the selection may have changed since the confirmation).
    `expected` is the number of eligible tasks the confirmation showed: if the selection now
    holds a different number, nothing is done and the reviewer is asked to confirm again."""
    if not can_review(user):
        raise NotAllowed("Your role does not allow bulk decisions.")
    if task_filter.errors:
        # an ignored parameter widens the selection: never decide on more than was asked for
        raise InvalidDecision(f"The selection has errors ({'; '.join(task_filter.errors)}): fix the filter first.")
    reason, comment = (reason or "").strip(), (comment or "").strip()
    check_decision(verdict, reason)
    plan = plan_bulk(task_filter, verdict=verdict, sample_size=0)
    if expected is not None and expected != len(plan.eligible):
        raise ReviewError(f"The selection changed since you confirmed it: {len(plan.eligible)} tasks would be decided "
                          f"now, not {expected}. Confirm again.")
    bulk_id = uuid.uuid4().hex
    decided = 0
    states: dict[str, int] = {}
    skipped = {s["why"]: s["count"] for s in plan.skipped}
    target = STATE_OF_VERDICT[verdict]
    for start in range(0, len(plan.eligible), chunk_size):
        chunk = plan.eligible[start:start + chunk_size]
        with transaction.atomic():
            for task in Task.objects.select_for_update().filter(pk__in=chunk).order_by("pk"):
                why = refusal(task, verdict, user=user) or (
                    f"already {target.label.lower()} on their current version" if task.review_state == target else None)
                if why:
                    skipped[why] = skipped.get(why, 0) + 1
                    continue
                decision = _record(task, user=user, verdict=verdict, reason=reason, comment=comment, bulk=True,
                                   bulk_id=bulk_id)
                decided += 1
                # with several required reviews a bulk decision is one review: say where each task stands
                state = decision.task.review_state
                states[state] = states.get(state, 0) + 1
    event = AuditEvent.objects.create(
        actor=user, action=BULK_DECIDE, object_type="selection", object_id=bulk_id,
        before={"filter": task_filter.describe(), "query": task_filter.query_string(with_view=False),
                "tasks": plan.total},
        after={"verdict": verdict, "reason": reason, "comment": comment, "decided": decided, "skipped": skipped,
               "bulk_id": bulk_id, "consensus": states})
    return BulkResult(decided=decided, skipped=skipped, event=event, consensus=states)
