"""Retry and resume of one synthesis run by hand: the run page's button, `POST /api/runs/{id}/retry`
(docs/operations.md, "Retry and resume of runs, tasks and the API").

- A run that finished with failed items is **retried**: those items go back to the queue and the
  run back to running at the earliest stage they failed in (from a stage before retrieval,
  retrieval runs again and adds only pairs it had not made; judged pairs and reconstructed
  scenarios are kept).
- A queued or running run that showed no sign of life for its `stale_after_minutes` (no item
  claimed or finished, not started, retrieved or resumed) is **resumed**: items whose claim went
  stale go back to the queue and the run is advanced again. Beat does the same every minute for
  running runs; the button is for when nobody runs beat, or a queued run's first message was lost.

Each is one conditional UPDATE on the run (SynthesisRun.reopen / mark_resumed) before anything
else, so a double click, or two reviewers at once, act once; the advance is queued after commit.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from . import jobs, services
from .models import RunStatus, SynthesisRun, WorkStatus


def item_stages():
    """(stage, work-item model) in the order a run goes through them, as the orchestration knows them."""
    return tuple(services.STAGE_ITEMS.items())


@dataclass(frozen=True)
class Offer:
    """What the run's page offers: Resume when `stalled` (quiet since `since`), Retry when `failed` > 0."""

    stalled: bool = False
    since: datetime | None = None
    failed: int = 0

    @property
    def available(self) -> bool:
        return self.stalled or self.failed > 0


@dataclass(frozen=True)
class Recovery:
    """What a click did: `action` is "retried", "resumed" or "" (nothing to do); `items` went back to the queue."""

    action: str = ""
    items: int = 0


def stale_cutoff(run: SynthesisRun) -> datetime:
    """Signs of life older than this are a dead worker's or a lost message's (the run's own window)."""
    return timezone.now() - timedelta(minutes=run.limit("stale_after_minutes", 30))


def last_sign_of_life(run: SynthesisRun) -> datetime:
    """The latest moment anything happened to the run: made, started, retrieved, resumed, an item
    claimed or finished."""
    stamps = [run.created_at, run.started_at, run.resumed_at, run.retrieval_claimed_at]
    for _, model in item_stages():
        latest = model.objects.filter(run=run).aggregate(claimed=Max("claimed_at"), finished=Max("finished_at"))
        stamps += [latest["claimed"], latest["finished"]]
    return max(s for s in stamps if s is not None)


def failed_by_stage(run: SynthesisRun) -> dict[str, int]:
    counts = {stage: model.objects.filter(run=run, status=WorkStatus.FAILED).count() for stage, model in item_stages()}
    return {stage: n for stage, n in counts.items() if n}


def offer(run: SynthesisRun) -> Offer:
    if run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
        since = last_sign_of_life(run)
        return Offer(stalled=since < stale_cutoff(run), since=since)
    if run.status == RunStatus.SUCCEEDED:
        return Offer(failed=sum(failed_by_stage(run).values()))
    return Offer()  # cancelled (on purpose) or failed as a whole: nothing to take up again


def retry_run(*, run: SynthesisRun, user=None) -> Recovery:
    """Retry the failed items of a finished run, or resume a stalled one; Recovery() when neither
    applies (or another click got there first)."""
    with transaction.atomic():
        if run.status == RunStatus.SUCCEEDED:
            outcome = _retry_failed(run, user)
        elif run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
            outcome = _resume(run)
        else:
            outcome = Recovery()
        if outcome.action:
            jobs.advance_run.delay_on_commit(run.pk)
    run.refresh_from_db()
    return outcome


def _retry_failed(run: SynthesisRun, user) -> Recovery:
    failed = failed_by_stage(run)
    if not failed:
        return Recovery()
    first = next(stage for stage, _ in item_stages() if stage in failed)
    n = sum(failed.values())
    who = getattr(user, "username", None) or "a user"
    if not SynthesisRun.reopen(run.pk, stage=first, message=f"Retrying {n} failed item{'s' if n != 1 else ''} (by {who})."):
        return Recovery()
    items = 0
    for _, model in item_stages():
        items += model.objects.filter(run=run, status=WorkStatus.FAILED).update(
            status=WorkStatus.PENDING, error="", claimed_at=None, finished_at=None)
    return Recovery("retried", items)


def _resume(run: SynthesisRun) -> Recovery:
    cutoff = stale_cutoff(run)
    if not SynthesisRun.mark_resumed(run.pk, cutoff=cutoff):
        return Recovery()
    stale = Q(claimed_at__lt=cutoff) | Q(claimed_at__isnull=True)
    items = 0
    for _, model in item_stages():
        items += model.objects.filter(stale, run=run, status__in=[WorkStatus.QUEUED, WorkStatus.RUNNING]).update(
            status=WorkStatus.PENDING)
    SynthesisRun.objects.filter(pk=run.pk, retrieval_claimed_at__lt=cutoff).update(retrieval_claimed_at=None)
    return Recovery("resumed", items)
