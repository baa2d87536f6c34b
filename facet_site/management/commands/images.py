"""`facet images load FILE.tar` / `facet images list`: images without a registry. A loaded archive
(`docker save`, .tar or .tar.gz) lets imported tasks FROM that image validate here; validations
that waited for it are queued again."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.template.defaultfilters import filesizeformat

from facet_site.lib import docker_engine as de
from facet_site.lib.docker_engine.image_archives import ImageArchiveError, list_images, load_image_archive


class Command(BaseCommand):
    help = "Load images from `docker save` archives (no registry needed) or list the engine's images."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        load = sub.add_parser("load", help="load FILE.tar or FILE.tar.gz made by `docker save IMAGE -o FILE.tar`")
        load.add_argument("files", nargs="+", metavar="FILE")
        sub.add_parser("list", help="the images on this machine, and the mapping FACET_IMAGE_MAP sets")

    def handle(self, *args, action, files=(), **options):
        try:
            client = de.connect(settings.DOCKER_HOST)
        except de.EngineUnavailable as exc:
            raise CommandError(str(exc)) from None
        try:
            if action == "load":
                self.load(client, files)
            else:
                self.list(client)
        finally:
            client.close()

    def load(self, client, files):
        from tasks.images import resume_waiting_for_images

        for name in files:
            try:
                tags = load_image_archive(client, name)
            except (ImageArchiveError, de.DockerEngineError) as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(self.style.SUCCESS(f"Loaded {name}: {', '.join(tags) or '(untagged image)'}"))
        resumed = resume_waiting_for_images(client)
        if resumed:
            self.stdout.write(f"{len(resumed)} validation(s) that waited for an image are queued again.")

    def list(self, client):
        rows = list_images(client)
        for row in rows:
            self.stdout.write(f"{row['name']:<60} {row['id']:<14} {filesizeformat(row['size'])}")
        if not rows:
            self.stdout.write("No images. Load one with `facet images load FILE.tar`.")
        for wanted, local in sorted(settings.FACET_IMAGE_MAP.items()):
            self.stdout.write(f"mapped: {wanted} -> {local} (FACET_IMAGE_MAP)")
