"""The review queue and its locks: a reviewer works through a task filter's tasks one at a time,
each task locked by one reviewer while they look at it.

A lock lasts FACET_REVIEW_LOCK_MINUTES after it was taken or renewed; a stale lock is anybody's to
reclaim (an audit event records the reclaim). Locks are taken with conditional writes, so two
reviewers racing for one task never both get it.
"""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from .filters import TaskFilter
from .models import AuditEvent, ReviewLock, Task
from .review import RECLAIM_LOCK

# The queue when no filter is given: what construction validated and nobody has decided yet.
DEFAULT_QUEUE = "status=validated&review=unreviewed"


def lock_timeout() -> timedelta:
    return timedelta(minutes=getattr(settings, "FACET_REVIEW_LOCK_MINUTES", 15))


def live_locks():
    return ReviewLock.objects.filter(acquired_at__gte=timezone.now() - lock_timeout())


def lock_of(task: Task) -> ReviewLock | None:
    """The task's lock while it is live (a stale one is anybody's to reclaim)."""
    return live_locks().select_related("holder").filter(task=task).first()


def take_lock(task_id: int, user, *, now=None) -> bool:
    """Take (or renew) the review lock of one task with conditional writes: a new row (the
    one-to-one constraint lets one of two racing reviewers in), or an UPDATE that only matches
    the stale lock that was read, so a reclaim never steals a lock renewed meanwhile."""
    now = now or timezone.now()
    lock = ReviewLock.objects.filter(task_id=task_id).first()
    if lock is None:
        try:
            with transaction.atomic():
                ReviewLock.objects.create(task_id=task_id, holder=user, acquired_at=now)
            return True
        except IntegrityError:
            return False
    if lock.holder_id == user.pk:
        return bool(ReviewLock.objects.filter(pk=lock.pk, holder=user).update(acquired_at=now))
    if lock.acquired_at >= now - lock_timeout():
        return False
    won = ReviewLock.objects.filter(pk=lock.pk, holder_id=lock.holder_id, acquired_at=lock.acquired_at) \
        .update(holder=user, acquired_at=now)
    if won:
        AuditEvent.objects.create(
            actor=user, action=RECLAIM_LOCK, object_type="task", object_id=str(task_id), task_id=task_id,
            before={"holder": lock.holder.get_username(), "acquired_at": lock.acquired_at.isoformat()},
            after={"holder": user.get_username(), "acquired_at": now.isoformat()})
    return bool(won)


def release_lock(task_id: int, user) -> bool:
    return bool(ReviewLock.objects.filter(task_id=task_id, holder=user).delete()[0])


def queue_filter(query) -> TaskFilter:
    """The queue's selection: the given task filter, or the default queue when it selects
    nothing in particular (a sort alone keeps the default selection, in that order)."""
    f = TaskFilter.from_query(query)
    if f.is_empty:
        default = TaskFilter.from_query(DEFAULT_QUEUE)
        default.sort = f.sort
        return default
    return f


def queue_ids(task_filter: TaskFilter) -> list[int]:
    return list(task_filter.queryset().values_list("id", flat=True))


def position(task_id: int, ids: list[int]) -> tuple[int | None, int]:
    """("X of N"): the task's 1-based place in the queue, or None when it is not in it."""
    try:
        return ids.index(task_id) + 1, len(ids)
    except ValueError:
        return None, len(ids)


def advance(user, task_filter: TaskFilter, *, current: int | None = None, direction: str = "next",
            before: list[int] | None = None) -> Task | None:
    """Lock and return the next (or previous) task of the queue that nobody else is reviewing.

    Without `current`, the reviewer's own live lock in the queue comes first (a reload resumes),
    then the top of the queue. `before` is the queue as it was before a decision took `current`
    out of it, so that deciding moves on from where the reviewer was rather than from the top.
    On success the reviewer's other locks are released: one reviewer reviews one task at a time.
    """
    ids = queue_ids(task_filter)
    in_queue = set(ids)
    order = before if before is not None else ids
    if current is not None and current in order:
        i = order.index(current)
        candidates = order[i + 1:] if direction == "next" else list(reversed(order[:i]))
        candidates = [t for t in candidates if t in in_queue]
        if direction == "next":  # past the end: start again from the top
            candidates += [t for t in ids if t not in candidates and t != current]
    elif direction == "next":
        mine = set(live_locks().filter(holder=user, task_id__in=ids).values_list("task_id", flat=True))
        candidates = [t for t in ids if t in mine] + [t for t in ids if t not in mine and t != current]
    else:
        candidates = []
    busy = set(live_locks().exclude(holder=user).filter(task_id__in=candidates).values_list("task_id", flat=True))
    for task_id in candidates:
        if task_id in busy:
            continue
        if take_lock(task_id, user):
            ReviewLock.objects.filter(holder=user).exclude(task_id=task_id).delete()
            return Task.objects.select_related("current_version").get(pk=task_id)
    return None
