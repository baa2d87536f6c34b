"""Consensus of several independent reviews: how many reviews a task needs (ReviewPolicy), where
its review stands from the decisions on its current version's hash, adjudication of
disagreements, blind review, and what each decision was made under (DecisionNote).

The rules (docs/review.md, "Review by several reviewers"):

- A task needs the largest `required_reviews` of the policies whose selection holds it, 1 without
  one. With 1, today's rule stands: the newest live decision on the current hash is in force.
- With N > 1, a review is a reviewer's latest live decision on the current hash (adjudications
  aside). The first N reviewers to decide are counted (later ones, such as gold calibration,
  are recorded but do not move a settled task). Fewer than N: "awaiting reviews". N that agree on
  the verdict, and on the reason when the verdict is reject or needs fix: that verdict. Otherwise
  "in adjudication", until an admin or lead adjudicates: the newest live adjudication settles it.
- A new version has a new hash: every review of the old one stays in the history, and the task
  starts again from no review.

This module imports no other review module: tasks.summary asks it for the review state, and
tasks.review calls it while recording a decision.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Exists, OuterRef

from facet_site.roles import can_lead

from .filters import TaskFilter
from .models import Decision, DecisionNote, GoldTask, Guideline, ReviewPolicy, ReviewState, ReviewVerdict, Task, TeamLock

STATE_OF_VERDICT = {ReviewVerdict.APPROVE: ReviewState.APPROVED, ReviewVerdict.REJECT: ReviewState.REJECTED,
                    ReviewVerdict.NEEDS_FIX: ReviewState.NEEDS_FIX}
# a reviewer's gap between two decisions longer than this is a break, not time spent on the task
SESSION_GAP = timedelta(minutes=30)
MAX_REQUIRED = 5

# --- required reviews ----------------------------------------------------------------------------


def policy_filter(policy: ReviewPolicy) -> TaskFilter:
    """The task selection a policy covers."""
    if policy.run_id:
        return TaskFilter.from_query({"run": str(policy.run_id)})
    if policy.saved_view_id:
        return TaskFilter.from_query(policy.saved_view.query)
    return TaskFilter.from_query(policy.query)


def policies_for(task: Task) -> list[ReviewPolicy]:
    found = []
    for policy in ReviewPolicy.objects.filter(required_reviews__gt=1).select_related("saved_view"):
        if policy.run_id:
            if policy.run_id == task.run_id:
                found.append(policy)
        elif policy_filter(policy).queryset().filter(pk=task.pk).exists():
            found.append(policy)
    return found


def required_reviews(task: Task) -> int:
    return max([p.required_reviews for p in policies_for(task)], default=1)


# --- the consensus of a task ------------------------------------------------------------------


def key(decision: Decision) -> tuple[str, str]:
    """What two reviews must share to agree: the verdict, and the reason unless it approves."""
    return decision.verdict, "" if decision.verdict == ReviewVerdict.APPROVE else decision.reason


@dataclass
class Consensus:
    required: int
    state: str
    reviews: list[Decision] = field(default_factory=list)  # counted reviews, in the order reviewers came
    extra: list[Decision] = field(default_factory=list)  # reviews past the required number
    adjudication: Decision | None = None

    @property
    def agreed(self) -> bool | None:
        """None until the required reviews are in."""
        if len(self.reviews) < self.required or self.required < 2:
            return None
        return len({key(d) for d in self.reviews}) == 1

    def describe(self) -> dict:
        out = {"required": self.required, "reviews": len(self.reviews), "consensus": self.state}
        if self.agreed is not None:
            out["agreed"] = self.agreed
        if self.adjudication is not None:
            out["adjudicated"] = self.adjudication.verdict
        return out


def live_decisions(task: Task):
    """Decisions on the current hash that are neither withdrawn nor withdrawals, oldest first."""
    return (Decision.objects.filter(task=task, content_hash=task.current_version.content_hash, withdraws__isnull=True,
                                    withdrawn_by__isnull=True)
            .select_related("author", "note").order_by("id"))


def _is_adjudication(decision: Decision) -> bool:
    try:
        return decision.note.adjudication
    except DecisionNote.DoesNotExist:
        return False


def consensus_of(task: Task, *, required: int | None = None) -> Consensus:
    required = required or required_reviews(task)
    if task.current_version_id is None:
        return Consensus(required=required, state=ReviewState.UNREVIEWED)
    decisions = list(live_decisions(task))
    if not decisions:
        return Consensus(required=required, state=ReviewState.UNREVIEWED)
    if required <= 1:
        newest = decisions[-1]
        return Consensus(required=1, state=STATE_OF_VERDICT[newest.verdict], reviews=[newest])
    adjudications = [d for d in decisions if _is_adjudication(d)]
    # dicts keep the order of first insertion: reviewers in the order they first decided,
    # each with their latest decision
    latest: dict[int | None, Decision] = {}
    for d in decisions:
        if not _is_adjudication(d):
            latest[d.author_id] = d
    ordered = list(latest.values())
    c = Consensus(required=required, state=ReviewState.UNREVIEWED, reviews=ordered[:required], extra=ordered[required:])
    if adjudications:
        c.adjudication = adjudications[-1]
        c.state = STATE_OF_VERDICT[c.adjudication.verdict]
    elif len(c.reviews) < required:
        c.state = ReviewState.IN_REVIEW
    elif c.agreed:
        c.state = STATE_OF_VERDICT[c.reviews[0].verdict]
    else:
        c.state = ReviewState.DISPUTED
    return c


def state_of(task: Task) -> str:
    """Task.review_state as the decisions say (called by tasks.summary, its only writer)."""
    return consensus_of(task).state


def describe(task: Task) -> dict:
    return consensus_of(task).describe()


def effect(before: dict, after: dict) -> str:
    """In words, what a decision, bulk decision or undo did to the consensus of one task."""
    if after.get("required", 1) <= 1:
        return f"review state {before.get('consensus')} → {after.get('consensus')}"
    state = ReviewState(after["consensus"]).label.lower()
    return f"{after['reviews']} of {after['required']} reviews; {state}"


# --- blind review ------------------------------------------------------------------------------


def blind_tasks(user, task_ids=None):
    """Ids of the tasks whose others' reviews `user` may not see yet: still awaiting reviews or in
    adjudication (so several are required) and without the user's own live review of the current
    version. Admins and leads adjudicate: they see everything. Once a task is settled its reviews
    are open to all. A queryset of ids (of `task_ids` when given)."""
    if can_lead(user):
        return Task.objects.none().values_list("id", flat=True)
    own = Decision.objects.filter(task=OuterRef("pk"), author=user, content_hash=OuterRef("current_version__content_hash"),
                                  withdraws__isnull=True, withdrawn_by__isnull=True)
    qs = Task.objects.filter(review_state__in=[ReviewState.IN_REVIEW, ReviewState.DISPUTED]).exclude(Exists(own))
    if task_ids is not None:
        qs = qs.filter(pk__in=[t for t in task_ids if t])
    return qs.values_list("id", flat=True)


def is_blind(task: Task, user) -> bool:
    return task.current_version_id is not None and blind_tasks(user, [task.pk]).exists()


def visible(task: Task, user, decisions: list[Decision]) -> list[Decision]:
    """The history the user may see: while blind, others' decisions on the current hash are left out."""
    if not is_blind(task, user):
        return decisions
    current = task.current_version.content_hash
    return [d for d in decisions if d.content_hash != current or d.author_id == user.pk]


# --- adjudication ------------------------------------------------------------------------------


def adjudication_refusal(task: Task, user) -> str | None:
    if not can_lead(user):
        return "Only admins and leads adjudicate."
    if consensus_of(task).state != ReviewState.DISPUTED:
        return f"Task #{task.pk} is not in adjudication: its reviews do not disagree."
    return None


def adjudication_queue():
    return (Task.objects.filter(review_state=ReviewState.DISPUTED).select_related("current_version", "run")
            .order_by("updated_at", "id"))


# --- what a decision was made under ------------------------------------------------------------


def current_guideline() -> Guideline | None:
    return Guideline.objects.order_by("-number").first()


def _seconds(decision: Decision, user) -> float | None:
    lock = TeamLock.objects.filter(task_id=decision.task_id, holder=user).first()
    if lock is not None:
        return max(0.0, (decision.created_at - lock.taken_at).total_seconds())
    previous = (Decision.objects.filter(author=user, withdraws__isnull=True).exclude(pk=decision.pk)
                .order_by("-id").values_list("created_at", flat=True).first())
    if previous is not None and decision.created_at - previous <= SESSION_GAP:
        return max(0.0, (decision.created_at - previous).total_seconds())
    return None


def note(decision: Decision, *, user, adjudication: bool = False) -> DecisionNote:
    """Record the guideline in force, whether it adjudicates, the time spent and, on a gold task,
    whether the verdict was the known one. Called by tasks.review in the decision's transaction."""
    gold = GoldTask.objects.filter(task_id=decision.task_id, content_hash=decision.content_hash).first()
    return DecisionNote.objects.create(
        decision=decision, adjudication=adjudication, guideline=current_guideline(), seconds=_seconds(decision, user),
        gold_verdict=gold.verdict if gold and not adjudication else "",
        gold_correct=(decision.verdict == gold.verdict) if gold and not adjudication else None)
