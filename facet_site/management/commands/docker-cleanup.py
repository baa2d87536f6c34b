"""`facet docker-cleanup`: remove the sandbox containers facet left behind."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from facet_site.lib import docker_engine as de


class Command(BaseCommand):
    help = "Remove sandbox containers that facet left behind (found by label), e.g. after a worker died."

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=int, default=0, help="Only containers older than this many seconds.")

    def handle(self, *args, older_than, **options):
        try:
            client = de.connect(settings.DOCKER_HOST)
        except de.EngineUnavailable as exc:
            raise CommandError(str(exc)) from None
        removed = de.cleanup_leftovers(client, older_than_s=older_than)
        self.stdout.write(f"Removed {removed} leftover sandbox container{'s' if removed != 1 else ''}.")
