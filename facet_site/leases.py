"""Leases on job records: the one pattern every long job uses to be found again when its worker
dies (docs/operations.md). Ingest batches, exports, imports and validations carry `heartbeat_at`;
synthesis work items and construction tasks renew their `claimed_at`; rollout trajectories stamp
`heartbeat_at` beside the `claimed_at` their writes check.

A job takes its row with a conditional UPDATE (queued -> running, or running whose lease ran out);
while it works, the row is stamped again every FACET_JOB_HEARTBEAT_S by this process's lease
keeper (one thread per worker process, one UPDATE per kind of row per beat, no database
connection held between beats, so an LLM worker's 64 threads cost no extra connections). A
running row whose stamp is older than FACET_JOB_LEASE_S lost its worker (a killed pool process, a
killed worker, a lost broker message): the periodic `resume_stalled` job (facet_site/recovery.py)
puts it back and queues its job again. Queued rows nobody took within a lease (a message lost
with a filesystem-broker worker) are queued again too. Every step is a conditional UPDATE, so two
beats or a redelivered message never run a job twice at the same time.
"""
from __future__ import annotations

import logging
import os
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


def expired(field: str = "heartbeat_at") -> Q:
    """A lease stamp (`field`) older than a lease: its worker died."""
    return Q(**{f"{field}__lt": cutoff()})


class _Keeper:
    """The thread that renews every lease this process holds. Leases are grouped by (model, the
    field stamped, the filter that says the row is still held), so a beat is one UPDATE per group
    however many jobs run; the database connection is closed after each beat."""

    def __init__(self):
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.held: dict[tuple, dict[int, int]] = {}  # group -> pk -> holders in this process
        self.pid = None
        self.thread: threading.Thread | None = None
        self.every: float | None = None  # the interval the thread is waiting out

    def hold(self, group: tuple, pk: int) -> None:
        with self.lock:
            if self.pid != os.getpid():  # a forked pool process: the parent's thread is not here
                self.held, self.pid, self.thread = {}, os.getpid(), None
            pks = self.held.setdefault(group, {})
            pks[pk] = pks.get(pk, 0) + 1
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="facet-leases", daemon=True)
                self.thread.start()
        if self.every is not None and self.every != settings.FACET_JOB_HEARTBEAT_S:
            self.wake.set()  # the interval changed (tests): wait the new one instead

    def release(self, group: tuple, pk: int) -> None:
        with self.lock:
            pks = self.held.get(group, {})
            if pks.get(pk, 0) > 1:
                pks[pk] -= 1
            else:
                pks.pop(pk, None)

    def _run(self) -> None:
        while True:
            self.every = settings.FACET_JOB_HEARTBEAT_S
            if self.wake.wait(self.every):
                self.wake.clear()
                continue
            with self.lock:
                groups = [(g, list(pks)) for g, pks in self.held.items() if pks]
            if not groups:
                continue
            now = timezone.now()
            for (model, field, still), pks in groups:
                try:
                    model.objects.filter(pk__in=pks, **dict(still)).update(**{field: now})
                except Exception:  # a database hiccup: the next beat tries again
                    log.warning("could not renew the leases of %s %s", model.__name__, pks, exc_info=True)
            try:
                connection.close()
            except Exception:
                log.warning("could not close the lease keeper's connection", exc_info=True)


_keeper = _Keeper()


@contextmanager
def heartbeat(model, pk: int, *, running: str | None = None, field: str = "heartbeat_at",
              held: dict | None = None):
    """While the block runs, this process's lease keeper stamps the row's `field` every
    FACET_JOB_HEARTBEAT_S, as long as the row is still held: `held` (filter arguments, e.g.
    {"claimed_at__isnull": False}) or, by default, its status is `running`."""
    still = tuple(sorted((held if held is not None else {"status": running}).items()))
    group = (model, field, still)
    _keeper.hold(group, pk)
    try:
        yield
    finally:
        _keeper.release(group, pk)
