"""`facet worker`: Celery workers for facet's jobs, with Celery beat inside unless --no-beat.

LLM-bound and CPU/Docker-bound work want opposite pools, so one `facet worker` over both kinds of
queue starts one Celery worker process for each (README "Workers, Redis and several machines"):

- the llm queue: a thread pool of FACET_LLM_CONCURRENCY threads (64 by default; --llm-concurrency).
  An LLM job spends nearly all its time waiting on the endpoint, so threads keep that many calls in
  flight in one process for a few MB each, where a prefork pool would need a process per call.
- the default and docker queues: a prefork pool sized to the CPUs (--concurrency): run advancement,
  ingest and exports use the CPU, and Docker steps run trials whose count the machine must bound.

Given queues of one kind only (`-Q llm`, `-Q docker`), it runs that one worker in this process.
"""
import os
import re
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

LLM_QUEUE = "llm"


class Command(BaseCommand):
    help = ("Run Celery workers for facet's jobs (default, llm and docker queues unless --queues is given): "
            "the llm queue on a thread pool (FACET_LLM_CONCURRENCY calls in flight), the others on a CPU-sized "
            "process pool, with Celery beat for the periodic jobs unless --no-beat.")

    def add_arguments(self, parser):
        parser.add_argument("--queues", "-Q", default="default,llm,docker")
        parser.add_argument("--concurrency", "-c", type=int, default=None,
                            help="Processes for the default and docker queues (default: one per CPU).")
        parser.add_argument("--llm-concurrency", type=int, default=None,
                            help="Threads, i.e. LLM calls in flight, for the llm queue "
                                 f"(default: FACET_LLM_CONCURRENCY, now {settings.FACET_LLM_CONCURRENCY}).")
        parser.add_argument("--loglevel", "-l", default="INFO")
        parser.add_argument("--hostname", "-n", default=None)
        parser.add_argument("--no-beat", action="store_true",
                            help="Do not run the periodic jobs in this worker (another worker or `celery beat` does): "
                                 "resume_stalled, which queues again jobs whose worker died (docs/operations.md).")

    def handle(self, *args, queues, concurrency, llm_concurrency, loglevel, hostname, no_beat, **options):
        names = [q.strip() for q in queues.split(",") if q.strip()]
        if not names:
            raise CommandError("--queues: name at least one queue")
        llm_threads = llm_concurrency or settings.FACET_LLM_CONCURRENCY
        if llm_threads < 1 or (concurrency is not None and concurrency < 1):
            raise CommandError("--concurrency and --llm-concurrency must be at least 1")
        hostname = hostname or f"facet-{os.getpid()}@%h"
        others = [q for q in names if q != LLM_QUEUE]
        if LLM_QUEUE in names and others:
            return self._both(others, llm_threads, concurrency, loglevel, hostname, no_beat)
        if others:
            argv = ["-Q", ",".join(others), "-P", "prefork", "-c", str(concurrency or os.cpu_count() or 1)]
        else:
            argv = ["-Q", LLM_QUEUE, "-P", "threads", "-c", str(llm_threads)]
            self._short_lived_connections()
        self._worker(argv, loglevel, hostname, beat=not no_beat)

    def _worker(self, argv: list[str], loglevel: str, hostname: str, *, beat: bool) -> None:
        from facet_site.celery import app

        argv = ["worker", *argv, "-l", loglevel, "-n", hostname]
        if beat:
            # Beat embedded in the worker: no extra process to run. Each worker keeps its own
            # schedule file (two beats must not share one); several beats only mean the
            # idempotent resume job runs a little more often.
            name = re.sub(r"[^\w.-]+", "_", hostname.replace("%h", "")).strip("_") or "worker"
            schedule = settings.DATA_DIR / "beat" / f"schedule-{name}"
            schedule.parent.mkdir(parents=True, exist_ok=True)
            argv += ["-B", "-s", str(schedule)]
        app.worker_main(argv)

    @staticmethod
    def _short_lived_connections() -> None:
        """Each thread opens its own database connection; kept between jobs (CONN_MAX_AGE) they
        would add up to one per thread per worker even when idle. Closed after every job instead
        (Celery's Django fixup closes obsolete connections), and given back while a call waits
        (scenarios.throughput.release_connection), a worker holds only the connections of the
        threads that are reading or writing at that moment. On PostgreSQL the threads also share
        at most FACET_LLM_DB_CONNECTIONS connections (facet_site/postgresql), which bounds the burst
        when every thread claims an item at once; the connections are named for the process in
        pg_stat_activity."""
        from django.db import connections

        for alias in connections:
            connections.settings[alias]["CONN_MAX_AGE"] = 0
            if "CONNECTIONS_PER_PROCESS" in connections.settings[alias]:
                connections.settings[alias]["CONNECTIONS_PER_PROCESS"] = settings.FACET_LLM_DB_CONNECTIONS
                connections.settings[alias].setdefault("OPTIONS", {}).setdefault(
                    "application_name", f"facet llm worker {os.getpid()}")

    def _both(self, others, llm_threads, concurrency, loglevel, hostname, no_beat) -> None:
        """Two child workers, stopped together: a signal to this process (or its process group)
        reaches both, and when one exits the other is stopped too."""
        node, _, host = hostname.partition("@")
        base = [sys.executable, "-m", "facet_site.cli", "worker", "-l", loglevel]
        children = [
            subprocess.Popen(base + ["-Q", ",".join(others), "-n", hostname,
                                     *(["-c", str(concurrency)] if concurrency else []),
                                     *(["--no-beat"] if no_beat else [])]),
            # beat runs in the first child only
            subprocess.Popen(base + ["-Q", LLM_QUEUE, "--llm-concurrency", str(llm_threads), "--no-beat",
                                     "-n", f"{node}-llm@{host or '%h'}"]),
        ]

        def forward(signum, _frame):
            for child in children:
                if child.poll() is None:
                    child.send_signal(signum)

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(signum, forward)
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
        forward(signal.SIGTERM, None)
        for child in children:
            child.wait()
        codes = [child.returncode for child in children]
        if any(codes):
            raise CommandError(f"a worker exited with status {next(c for c in codes if c)}")
