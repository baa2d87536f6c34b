"""`facet worker`: a Celery worker for facet's jobs, with Celery beat inside it unless --no-beat."""
import os
import re

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = ("Run a Celery worker for facet's jobs (default, llm and docker queues unless --queues is given), "
            "with Celery beat inside it for the periodic jobs (resuming work that waited for Docker) "
            "unless --no-beat.")

    def add_arguments(self, parser):
        parser.add_argument("--queues", "-Q", default="default,llm,docker")
        parser.add_argument("--concurrency", "-c", type=int, default=None)
        parser.add_argument("--loglevel", "-l", default="INFO")
        parser.add_argument("--hostname", "-n", default=None)
        parser.add_argument("--no-beat", action="store_true",
                            help="Do not run the periodic jobs in this worker (another worker or `celery beat` does).")

    def handle(self, *args, queues, concurrency, loglevel, hostname, no_beat, **options):
        from facet_site.celery import app

        hostname = hostname or f"facet-{os.getpid()}@%h"
        argv = ["worker", "-Q", queues, "-l", loglevel, "-n", hostname]
        if concurrency:
            argv += ["-c", str(concurrency)]
        if not no_beat:
            # Beat embedded in the worker: no extra process to run. Each worker keeps its own
            # schedule file (two beats must not share one); several beats only mean the
            # idempotent resume job runs a little more often.
            name = re.sub(r"[^\w.-]+", "_", hostname.replace("%h", "")).strip("_") or "worker"
            schedule = settings.DATA_DIR / "beat" / f"schedule-{name}"
            schedule.parent.mkdir(parents=True, exist_ok=True)
            argv += ["-B", "-s", str(schedule)]
        app.worker_main(argv)
