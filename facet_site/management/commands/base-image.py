from django.core.management.base import BaseCommand, CommandError

from facet_site.lib import docker_engine as de


class Command(BaseCommand):
    help = "Build the restricted base image every task environment starts FROM (debootstrap + docker import), if missing."

    def add_arguments(self, parser):
        parser.add_argument("--tag", default=de.BASE_IMAGE_TAG)
        parser.add_argument("--force", action="store_true", help="Rebuild even if the image exists.")

    def handle(self, *args, tag, force, **options):
        try:
            client = de.connect()
        except de.EngineUnavailable as exc:
            raise CommandError(str(exc)) from None
        try:
            image = de.ensure_base_image(client, tag, force=force)
        except de.PermanentEngineError as exc:
            raise CommandError(f"base image {tag}: {exc}") from None
        self.stdout.write(self.style.SUCCESS(f"Base image ready: {tag} ({getattr(image, 'short_id', image)})"))
