"""Work for several reviewers: review policies (required reviews and gold rate on a run, a saved
view or a named queue), the multi-review queue with its per-reviewer locks, assignments by leads
(to named reviewers or round-robin, with priority) and the mixing-in of gold tasks.

A task of a multi-review queue is handed to a reviewer only while it still needs reviews and
they have not decided its current version. Each reviewer holds their own TeamLock; at most as
many reviewers as reviews are missing hold one at a time. Taking a lock locks the task row first
(`SELECT … FOR UPDATE`), so two reviewers racing for the last missing review cannot both get it.
"""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, F, OuterRef, Q
from django.utils import timezone

from facet_site.roles import can_lead, can_review

from . import consensus, summary
from .filters import TaskFilter
from .models import (
    Assignment,
    Decision,
    GoldTask,
    ReviewPolicy,
    ReviewState,
    SavedView,
    Task,
    TeamLock,
)
from .review import NotAllowed, ReviewError
from .review_queue import lock_timeout

OPEN_STATES = (ReviewState.UNREVIEWED, ReviewState.IN_REVIEW)


class InvalidPolicy(ReviewError):
    status = 422


# --- policies -----------------------------------------------------------------------------------


def _number(field: str, value, kind):
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise InvalidPolicy(f"{field}: expected a number, not {value!r}.") from None


def save_policy(*, user, name: str, required_reviews: int | str, gold_rate: float | str = 0.0,
                run_id: int | None = None, saved_view_id: int | None = None, query: str = "") -> ReviewPolicy:
    """Create or update (same name) a policy, then refresh the review state of every task it
    covers: a task approved by one reviewer may now await a second."""
    if not can_lead(user):
        raise NotAllowed("Only admins and leads set the required reviews.")
    name = (name or "").strip()
    if not name:
        raise InvalidPolicy("name: give the queue a name.")
    required_reviews = _number("required_reviews", required_reviews, int)
    gold_rate = _number("gold_rate", gold_rate or 0, float)
    if not 1 <= required_reviews <= consensus.MAX_REQUIRED:
        raise InvalidPolicy(f"required_reviews: between 1 and {consensus.MAX_REQUIRED}, not {required_reviews}.")
    if not 0.0 <= gold_rate <= 0.5:
        raise InvalidPolicy(f"gold_rate: between 0 and 0.5, not {gold_rate}.")
    scopes = [s for s in (run_id, saved_view_id, (query or "").strip() or None) if s]
    if len(scopes) != 1:
        raise InvalidPolicy("scope: give exactly one of run, saved view or query.")
    if saved_view_id and not SavedView.objects.filter(pk=saved_view_id).exists():
        raise InvalidPolicy(f"saved_view: no saved view #{saved_view_id}.")
    if query and TaskFilter.from_query(query).errors:
        raise InvalidPolicy(f"query: {'; '.join(TaskFilter.from_query(query).errors)}")
    from scenarios.models import SynthesisRun

    if run_id and not SynthesisRun.objects.filter(pk=run_id).exists():
        raise InvalidPolicy(f"run: no run #{run_id}.")
    policy, _ = ReviewPolicy.objects.update_or_create(name=name, defaults={
        "required_reviews": required_reviews, "gold_rate": gold_rate, "run_id": run_id or None,
        "saved_view_id": saved_view_id or None, "query": (query or "").strip() if not (run_id or saved_view_id) else "",
        "created_by": user})
    refresh_covered(policy)
    return policy


def refresh_covered(policy: ReviewPolicy) -> int:
    """Re-derive the review state of the policy's tasks that have decisions on their current hash."""
    decided = Decision.objects.filter(task=OuterRef("pk"), content_hash=OuterRef("current_version__content_hash"))
    ids = list(consensus.policy_filter(policy).queryset().filter(Exists(decided)).values_list("id", flat=True))
    for task_id in ids:
        with transaction.atomic():
            Task.objects.select_for_update().get(pk=task_id)
            summary.refresh_summary(task_id)
    return len(ids)


# --- the multi-review queue ---------------------------------------------------------------------


def _live(now=None):
    now = now or timezone.now()
    return TeamLock.objects.filter(renewed_at__gte=now - lock_timeout())


def decided_by(user, task_ids=None):
    """Ids of tasks the user has a live decision on, on their current version."""
    qs = Decision.objects.filter(author=user, content_hash=OuterRef("current_version__content_hash"),
                                 task=OuterRef("pk"), withdraws__isnull=True, withdrawn_by__isnull=True)
    tasks = Task.objects.filter(Exists(qs))
    if task_ids is not None:
        tasks = tasks.filter(pk__in=task_ids)
    return set(tasks.values_list("id", flat=True))


def open_tasks(policy: ReviewPolicy):
    """The policy's tasks that still need reviews."""
    return (consensus.policy_filter(policy).queryset()
            .filter(current_version__isnull=False, review_state__in=OPEN_STATES))


def queue_for(user, policy: ReviewPolicy) -> list[int]:
    """The user's queue: tasks assigned to them first (by priority), then the rest in the
    selection's order; tasks they already decided left out."""
    ids = list(open_tasks(policy).values_list("id", flat=True))
    done = decided_by(user, ids)
    ids = [t for t in ids if t not in done]
    assigned = list(Assignment.objects.filter(reviewer=user, task_id__in=ids)
                    .order_by("-priority", "task_id").values_list("task_id", flat=True))
    first = set(assigned)
    return assigned + [t for t in ids if t not in first]


def take(user, task_id: int, *, policy: ReviewPolicy | None, gold: bool = False) -> bool:
    """Take (or renew) the user's lock on a task, if it still needs a review they may give."""
    now = timezone.now()
    with transaction.atomic():
        task = Task.objects.select_for_update(of=("self",)).select_related("current_version").get(pk=task_id)
        mine = TeamLock.objects.filter(task=task, holder=user).first()
        if mine is not None:
            TeamLock.objects.filter(pk=mine.pk).update(renewed_at=now)
            return True
        if not gold:
            if task.review_state not in OPEN_STATES or task.current_version_id is None:
                return False
            c = consensus.consensus_of(task, required=policy.required_reviews if policy else None)
            others = _live(now).filter(task=task).exclude(holder=user).count()
            if len(c.reviews) + others >= c.required:
                return False
        try:
            with transaction.atomic():
                TeamLock.objects.create(task=task, holder=user, policy=policy, taken_at=now, renewed_at=now)
        except IntegrityError:  # a stale lock of ours from an earlier visit
            TeamLock.objects.filter(task=task, holder=user).update(taken_at=now, renewed_at=now, policy=policy)
    return True


def release(user, task_id: int) -> bool:
    return bool(TeamLock.objects.filter(task_id=task_id, holder=user).delete()[0])


def gold_due(user, policy: ReviewPolicy) -> bool:
    """Every 1/rate-th hand-out is a gold task: due when the user's next decision crosses a
    multiple of 1/rate (deterministic, so a test can count on it; the reviewer is not told)."""
    if policy.gold_rate <= 0:
        return False
    k = Decision.objects.filter(author=user, withdraws__isnull=True).count()
    return int((k + 1) * policy.gold_rate) > int(k * policy.gold_rate)


def gold_candidates(user) -> list[int]:
    """Gold tasks still on the version they were judged on, that the user has not decided."""
    ids = list(GoldTask.objects.filter(task__current_version__content_hash=F("content_hash"))
               .order_by("task_id").values_list("task_id", flat=True))
    done = decided_by(user, ids)
    return [t for t in ids if t not in done]


def next_task(user, policy: ReviewPolicy, *, after: int | None = None) -> Task | None:
    """Lock and return the user's next task: a gold task when one is due, else the first of
    their queue (after `after`, wrapping) that still has room for their review."""
    if not can_review(user):
        raise NotAllowed("Your role does not allow reviewing.")
    if gold_due(user, policy):
        for task_id in gold_candidates(user):
            if take(user, task_id, policy=policy, gold=True):
                return _opened(user, task_id)
    ids = queue_for(user, policy)
    if after in ids:
        i = ids.index(after)
        ids = ids[i + 1:] + ids[:i]
    for task_id in ids:
        if take(user, task_id, policy=policy):
            return _opened(user, task_id)
    return None


def _opened(user, task_id: int) -> Task:
    # one task at a time: taking one lets go of the others
    TeamLock.objects.filter(holder=user).exclude(task_id=task_id).delete()
    return Task.objects.select_related("current_version").get(pk=task_id)


def queue_counts(policy: ReviewPolicy, user) -> dict:
    qs = open_tasks(policy)
    return {
        "open": qs.count(),
        "awaiting": qs.filter(review_state=ReviewState.IN_REVIEW).count(),
        "mine": len(queue_for(user, policy)),
        "assigned": Assignment.objects.filter(reviewer=user, task__in=qs).exclude(
            task_id__in=decided_by(user)).count(),
        "disputed": consensus.policy_filter(policy).queryset().filter(review_state=ReviewState.DISPUTED).count(),
    }


# --- assignments --------------------------------------------------------------------------------


def assign(task_filter: TaskFilter, *, user, reviewers: list[str], mode: str = "named", priority: int = 0) -> dict:
    """Assign the filtered tasks: to every named reviewer ("named"), or spread one reviewer per
    task in turn ("round_robin"). An assignment already there gets the new priority."""
    if not can_lead(user):
        raise NotAllowed("Only admins and leads assign tasks.")
    if task_filter.errors:
        raise InvalidPolicy(f"The selection has errors ({'; '.join(task_filter.errors)}): fix the filter first.")
    if mode not in ("named", "round_robin"):
        raise InvalidPolicy(f"mode: expected named or round_robin, not {mode!r}")
    User = get_user_model()
    people = list(User.objects.filter(username__in=reviewers).order_by("username"))
    missing = sorted(set(reviewers) - {u.get_username() for u in people})
    if missing or not people:
        raise InvalidPolicy(f"reviewers: no such user {', '.join(missing)}" if missing else "reviewers: name at least one.")
    not_reviewers = [u.get_username() for u in people if not can_review(u)]
    if not_reviewers:
        raise InvalidPolicy(f"reviewers: {', '.join(not_reviewers)} may not review.")
    ids = list(task_filter.queryset().filter(current_version__isnull=False).values_list("id", flat=True))
    pairs = [(t, p) for t in ids for p in people] if mode == "named" else \
        [(t, people[i % len(people)]) for i, t in enumerate(ids)]
    with transaction.atomic():
        for task_id, person in pairs:
            Assignment.objects.update_or_create(task_id=task_id, reviewer=person,
                                                defaults={"priority": int(priority), "assigned_by": user})
    per = {}
    for _, person in pairs:
        per[person.get_username()] = per.get(person.get_username(), 0) + 1
    return {"tasks": len(ids), "assignments": len(pairs), "per_reviewer": per}


def assignments_of(user):
    return (Assignment.objects.filter(reviewer=user).select_related("task", "assigned_by")
            .order_by("-priority", "task_id"))


def workload() -> list[dict]:
    """Per reviewer: open assignments (not yet decided on the current version)."""
    rows = []
    decided = Decision.objects.filter(task=OuterRef("task"), author=OuterRef("reviewer"),
                                      content_hash=OuterRef("task__current_version__content_hash"))
    for row in (Assignment.objects.annotate(done=Exists(decided)).values("reviewer__username")
                .annotate(total=Count("id"), open=Count("id", filter=Q(done=False))).order_by("reviewer__username")):
        rows.append({"reviewer": row["reviewer__username"], "total": row["total"], "open": row["open"]})
    return rows
