import os

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run a Celery worker for facet's jobs (default, llm and docker queues unless --queues is given)."

    def add_arguments(self, parser):
        parser.add_argument("--queues", "-Q", default="default,llm,docker")
        parser.add_argument("--concurrency", "-c", type=int, default=None)
        parser.add_argument("--loglevel", "-l", default="INFO")
        parser.add_argument("--hostname", "-n", default=None)

    def handle(self, *args, queues, concurrency, loglevel, hostname, **options):
        from facet_site.celery import app

        argv = ["worker", "-Q", queues, "-l", loglevel]
        if concurrency:
            argv += ["-c", str(concurrency)]
        argv += ["-n", hostname or f"facet-{os.getpid()}@%h"]
        app.worker_main(argv)
