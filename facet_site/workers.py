"""Whether anyone runs the queued jobs: worker heartbeats, queue depths and the banner that says so.

Every `facet worker` writes a WorkerHeartbeat row every few seconds from a thread in its main
process (the filesystem broker has no remote control or inspect, so a row in the database is the
portable way for a web process to see workers). A page shows "no worker is running" when jobs
wait on a queue that no worker seen recently consumes, instead of letting them read "Queued"
forever.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from .models import WorkerHeartbeat

log = logging.getLogger(__name__)

QUEUES = ("default", "llm", "docker")
START_WORKER = ".venv/bin/facet worker"
SERVE = "make serve"


# --- inside a worker ---------------------------------------------------------------------------

def beat(*, hostname: str, queues: list[str], with_beat: bool, started_at) -> None:
    """Record that this worker is alive now."""
    WorkerHeartbeat.objects.update_or_create(hostname=hostname, defaults={
        "queues": ",".join(queues), "beat": with_beat, "pid": os.getpid(), "started_at": started_at,
        "seen_at": timezone.now()})


def forget(hostname: str) -> None:
    """A worker that stops on purpose says so, so pages need not wait for its heartbeat to age."""
    WorkerHeartbeat.objects.filter(hostname=hostname).delete()


class Heartbeat:
    """The thread that writes this worker's heartbeat until the worker shuts down."""

    def __init__(self, *, hostname: str, queues: list[str], with_beat: bool, every_s: float):
        self.hostname, self.queues, self.with_beat, self.every_s = hostname, queues, with_beat, every_s
        self.started_at = timezone.now()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="facet-heartbeat", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                close_old_connections()
                beat(hostname=self.hostname, queues=self.queues, with_beat=self.with_beat,
                     started_at=self.started_at)
            except Exception:  # a database hiccup must not kill the worker; the next beat retries
                log.warning("could not record the worker heartbeat", exc_info=True)
            # not held between beats: in an llm worker it would keep one of the few connections its
            # threads share (FACET_LLM_DB_CONNECTIONS) for nothing
            connection.close()
            self.stopped.wait(self.every_s)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        try:
            forget(self.hostname)
        except Exception:
            log.warning("could not remove the worker heartbeat", exc_info=True)


# --- starting one ----------------------------------------------------------------------------

def logs_dir() -> Path:
    path = Path(settings.DATA_DIR) / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


class WorkerProcess:
    """A `facet worker` in its own session (a Ctrl-C in the terminal reaches only us, and we stop it
    in order), its output appended to a log file."""

    def __init__(self, *, queues: str, name: str, log_path: Path, beat: bool = True, concurrency: int = 2,
                 env: dict | None = None):
        self.queues, self.name, self.log_path, self.beat = queues, name, log_path, beat
        self.concurrency, self.env = concurrency, env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        if self.running():
            return
        argv = [sys.executable, "-m", "facet_site.cli", "worker", "-Q", self.queues, "-c", str(self.concurrency),
                "-l", "INFO", "-n", self.name]
        if not self.beat:
            argv.append("--no-beat")
        env = dict(self.env or os.environ)
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(argv, cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def stop(self, *, patience_s: float = 20) -> None:
        """A warm shutdown (the jobs in hand finish) for `patience_s`, then a cold one: unfinished jobs
        go back to the broker (acks late) and run again later. Only the worker's main process is
        signalled; it stops its own pool, which keeps Celery from reporting its children killed."""
        worker, self.proc = self.proc, None
        if worker is None or worker.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, patience_s), (signal.SIGQUIT, 10)):
            try:
                worker.send_signal(sig)
                worker.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                return
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        worker.wait(timeout=10)


# --- in the web process ------------------------------------------------------------------------

def seen(within_s: float | None = None):
    """Workers whose heartbeat is at most `within_s` seconds old (the setting by default)."""
    within_s = settings.FACET_WORKER_SEEN_S if within_s is None else within_s
    return WorkerHeartbeat.objects.filter(seen_at__gte=timezone.now() - timedelta(seconds=within_s))


def queue_depths(queues=QUEUES) -> dict[str, int | None]:
    """Jobs waiting in each broker queue (None where the broker did not answer)."""
    from facet_site.celery import app

    depths: dict[str, int | None] = {}
    try:
        with app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1)
            channel = conn.default_channel
            for name in queues:
                try:
                    depths[name] = channel.queue_declare(queue=name, passive=True).message_count
                except Exception:  # a queue nobody declared yet holds nothing
                    depths[name] = 0
                    channel = conn.channel()  # a failed passive declare closes the channel on AMQP brokers
    except Exception:
        log.warning("the broker did not answer for queue depths", exc_info=True)
        return {name: None for name in queues}
    return depths


def missing_workers() -> dict[str, int]:
    """Queues that hold jobs while no worker seen recently consumes them: queue -> jobs waiting."""
    covered = set()
    for queues in seen().values_list("queues", flat=True):
        covered.update(q for q in queues.split(",") if q)
    uncovered = [q for q in QUEUES if q not in covered]
    if not uncovered:
        return {}
    return {q: n for q, n in queue_depths(uncovered).items() if n}


def notice(missing: dict[str, int], *, no_worker_at_all: bool) -> str:
    """The banner's words."""
    jobs = sum(missing.values())
    queues = " and ".join(f"{q} ({n})" if len(missing) > 1 else q for q, n in missing.items())
    waiting = (f"{jobs} job{'s wait' if jobs != 1 else ' waits'} on the {queues} queue{'s' if len(missing) > 1 else ''}"
               f" and will stay queued until one starts")
    who = "No worker is running" if no_worker_at_all else f"No worker runs the {' and '.join(missing)} queue" + (
        "s" if len(missing) > 1 else "")
    return f"{who}: {waiting}. Start one with `{START_WORKER}` (beat included), or serve the site with a worker: `{SERVE}`."


def context_processor(request):
    """`worker_notice` for base.html: set on full pages when queued jobs have nobody to run them."""
    if settings.CELERY_TASK_ALWAYS_EAGER or getattr(request, "htmx", False):
        return {}
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    try:
        missing = missing_workers()
    except Exception:  # the banner is advice: a page must render without it
        log.warning("could not tell whether a worker runs", exc_info=True)
        return {}
    if not missing:
        return {}
    return {"worker_notice": notice(missing, no_worker_at_all=not seen().exists())}


_heartbeat: Heartbeat | None = None


def start_for(consumer) -> None:
    """Called when a worker is ready (facet_site/celery.py): its heartbeat starts."""
    global _heartbeat
    controller = getattr(consumer, "controller", None)
    task_consumer = getattr(consumer, "task_consumer", None)
    queues = sorted(q.name for q in task_consumer.queues) if task_consumer is not None else list(QUEUES)
    _heartbeat = Heartbeat(hostname=consumer.hostname, queues=queues, with_beat=bool(getattr(controller, "beat", False)),
                           every_s=settings.FACET_WORKER_HEARTBEAT_S)
    _heartbeat.start()


def stop() -> None:
    """Called when the worker shuts down: the heartbeat stops and its row goes."""
    global _heartbeat
    if _heartbeat is not None:
        _heartbeat.stop()
        _heartbeat = None
