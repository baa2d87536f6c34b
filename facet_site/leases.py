"""Leases on job records: the one pattern every long job (ingest batch, export, import, validation)
uses to be found again when its worker dies (docs/operations.md).

A job takes its row with a conditional UPDATE (queued -> running, or running whose lease ran out),
stamping `heartbeat_at`; while it works, a thread in the worker stamps `heartbeat_at` again every
FACET_JOB_HEARTBEAT_S. A running row whose heartbeat is older than FACET_JOB_LEASE_S lost its
worker (a killed pool process, a killed worker, a lost broker message): the periodic
`resume_stalled` job (facet_site/recovery.py) puts it back to queued and queues its job again.
Queued rows nobody took within a lease (a message lost with a filesystem-broker worker) are
queued again too. Every step is a conditional UPDATE, so two beats or a redelivered message
never run a job twice at the same time.
"""
from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

log = logging.getLogger(__name__)


def cutoff():
    """Heartbeats older than this belong to dead workers."""
    return timezone.now() - timedelta(seconds=settings.FACET_JOB_LEASE_S)


def stalled(running: str) -> Q:
    """Running rows whose lease ran out (no heartbeat at all: taken before leases existed)."""
    return Q(status=running) & (Q(heartbeat_at__lt=cutoff()) | Q(heartbeat_at__isnull=True))


def is_stalled(row, running: str) -> bool:
    """The same test as `stalled`, on a row in hand (pages show Resume for it)."""
    return row.status == running and (row.heartbeat_at is None or row.heartbeat_at < cutoff())


def retry(model, pk: int, *, retryable, queued: str, running: str, **fields) -> bool:
    """A row that failed (a status in `retryable`) or whose worker died goes back to queued (the
    Retry / Resume buttons, the CLI); its job must be queued again by the caller."""
    retryable = [retryable] if isinstance(retryable, str) else list(retryable)
    return bool(model.objects.filter(pk=pk).filter(Q(status__in=retryable) | stalled(running)).update(
        status=queued, heartbeat_at=timezone.now(), **fields))


def claim(model, pk: int, *, queued, running: str, **fields) -> bool:
    """Take the row for this worker: queued (a status or a list) -> running, or running whose
    lease ran out (its worker died and nobody resumed it yet). One of two workers wins."""
    queued = [queued] if isinstance(queued, str) else list(queued)
    now = timezone.now()
    return bool(model.objects.filter(pk=pk).filter(Q(status__in=queued) | stalled(running)).update(
        status=running, heartbeat_at=now, **fields))


def requeue_stalled(model, *, queued: str, running: str, message_field: str | None = None,
                    scope: Q | None = None) -> list[int]:
    """Running rows whose lease ran out go back to queued; queued rows nobody took within a lease
    are stamped again. Returns the ids whose job must be queued again (each at most once a lease)."""
    ids: list[int] = []
    base = model.objects.filter(scope) if scope is not None else model.objects.all()
    now = timezone.now()
    extra = {message_field: "Its worker stopped answering; queued again."} if message_field else {}
    for pk in list(base.filter(stalled(running)).values_list("pk", flat=True)):
        if model.objects.filter(pk=pk).filter(stalled(running)).update(status=queued, heartbeat_at=now, **extra):
            ids.append(pk)
    lost = Q(status=queued) & (Q(heartbeat_at__lt=cutoff()) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff()))
    for pk in list(base.filter(lost).values_list("pk", flat=True)):
        if model.objects.filter(pk=pk).filter(lost).update(heartbeat_at=now):
            ids.append(pk)
    return ids


def seconds_left(model, pk: int, *, running: str) -> float | None:
    """For a job whose row another worker holds (a redelivered message: its pool process was
    killed, the broker gave the job back): seconds until that holder's lease runs out, when this
    job may take the row over; None when the row is not running (finished, failed, gone)."""
    row = model.objects.filter(pk=pk, status=running).values("heartbeat_at").first()
    if row is None:
        return None
    if row["heartbeat_at"] is None:
        return 1.0
    left = (row["heartbeat_at"] - cutoff()).total_seconds()
    return max(left, 0.0) + 1.0


def wait_out(job, model, pk: int, *, running: str) -> None:
    """For a bound Celery job that found its row held by another worker: retry once the holder's
    lease runs out (the claim then takes the row over); nothing when the row is not running."""
    wait = seconds_left(model, pk, running=running)
    if wait is not None:
        raise job.retry(countdown=wait)


@contextmanager
def heartbeat(model, pk: int, *, running: str):
    """While the block runs, a thread stamps the row's heartbeat (only while it is still running).
    The thread has its own database connection, closed when the block ends."""
    stop = threading.Event()
    every = settings.FACET_JOB_HEARTBEAT_S

    def beat():
        try:
            while not stop.wait(every):
                try:
                    model.objects.filter(pk=pk, status=running).update(heartbeat_at=timezone.now())
                except Exception:  # a database hiccup: the next beat tries again
                    log.warning("could not stamp the heartbeat of %s %s", model.__name__, pk, exc_info=True)
        finally:
            connection.close()

    thread = threading.Thread(target=beat, name=f"lease-{model.__name__}-{pk}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every + 10)
