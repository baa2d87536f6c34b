"""Retry and resume of one task's construction by hand: the task page's button and
`POST /api/tasks/{id}/retry` (docs/operations.md, "Retry and resume of runs, tasks and the API").

- A constructed task that **failed** (a step's permanent error, or its validation's infrastructure
  error) goes back to the step that failed, with the versions and environment it has.
- A task whose step's worker **stopped answering** (its claim older than a lease; no validation
  of it still beating) is freed, so its step is queued again. Beat does the same every minute;
  the button is for when nobody runs beat.
- A task **waiting for a Docker Engine** is tried again now instead of at the next beat.

Also the rollout batch's Resume (`resume_rollout_batch`): its waiting, stale and pending
trajectories queued again, at most once a lease however often it is clicked; and a re-check's
"try again now" (`resume_recheck`), which queues it again only when it moved a validation out of
waiting for Docker.

Each starts with a conditional UPDATE on the task (Task.retry_construction, free_stalled,
Task.resume), so a double click acts once; the run's advance is queued after commit and queues
the task's step.
"""
from __future__ import annotations

from django.db import transaction

from facet_site import leases

from . import construction, rechecks, rollouts
from .models import (OPEN_STATUSES, Recheck, RolloutBatch, Step, Task, TaskStatus, Validation,
                     ValidationStatus)

RETRY, RESUME, WAKE = "retry", "resume", "wake"


def failed_step(task: Task) -> str:
    """The step a failed task failed at: construction records it first in the task's message
    ("build: …"; "validation: …" for an infrastructure error); otherwise the validation when the
    task has a version, else the environment."""
    head = (task.message or "").split(":", 1)[0].strip()
    if head in Step.values and head != Step.DONE:
        return head
    return Step.VALIDATE if head == "validation" or task.current_version_id else Step.ENVIRONMENT


def is_stalled(task: Task) -> bool:
    return (task.status in OPEN_STATUSES and task.claimed_at is not None
            and task.claimed_at < leases.cutoff())


def offer(task: Task) -> str:
    """What the task page offers: RETRY, RESUME, WAKE, or "" (nothing failed or stalled)."""
    if task.imported or task.run_id is None:
        return ""  # an imported task is validated again with Validate, not constructed
    if task.status == TaskStatus.FAILED:
        return RETRY
    if is_stalled(task):
        return RESUME
    if task.status == TaskStatus.WAITING_FOR_DOCKER:
        return WAKE
    return ""


def retry_construction(*, task: Task, user=None) -> str:
    """Do what `offer` offers; returns the action done, or "" when there was nothing to do (or
    another click got there first, or no Docker Engine answers yet for a waiting task)."""
    action = offer(task)
    with transaction.atomic():
        if action == RETRY:
            step = failed_step(task)
            who = getattr(user, "username", None) or "a user"
            done = Task.retry_construction(task.pk, step=step, message=f"Retrying {step} (by {who}).")
        elif action == RESUME:
            done = bool(Task.free_stalled(task.pk, message="Its worker stopped answering; resumed by hand."))
        elif action == WAKE:
            construction.resume_waiting(run=task.run)
            done = not Task.objects.filter(pk=task.pk, status=TaskStatus.WAITING_FOR_DOCKER).exists()
        else:
            done = False
        if done:
            construction.queue_advance(task.run_id)
    task.refresh_from_db()
    return action if done else ""


def resume_rollout_batch(batch: RolloutBatch) -> int | None:
    """Queue again what waited for Docker, whose worker died, or whose message was lost (every
    pending trajectory) in an open batch. None when the batch is over or was resumed by hand
    within a lease (a double click: its trajectories are queued already); else how many were
    queued. When none were, the stamp is taken back so the next click may try again."""
    with transaction.atomic():
        if not RolloutBatch.mark_resumed(batch.pk):
            return None
        queued = rollouts.resume(batch, all_pending=True)
        if not queued:
            RolloutBatch.objects.filter(pk=batch.pk).update(resumed_at=None)
    return queued


def resume_recheck(recheck: Recheck) -> bool:
    """An open re-check's validations that wait for a Docker Engine go back to queued and the
    re-check's job is queued again; False when none waited (a double click: the first took them)."""
    if recheck.status not in rechecks.OPEN:
        return False
    with transaction.atomic():
        # one conditional UPDATE over the re-check's waiting validations: of two clicks, one moves them
        moved = Validation.objects.filter(recheck=recheck, status=ValidationStatus.WAITING_FOR_DOCKER).update(
            status=ValidationStatus.QUEUED)
        if moved:
            rechecks.queue(recheck)
    return bool(moved)
