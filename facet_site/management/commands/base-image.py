"""`facet base-image`: build the restricted base image every task environment starts FROM."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from facet_site.lib import docker_engine as de


class Command(BaseCommand):
    help = "Build the restricted base image every task environment starts FROM (debootstrap + docker import), if missing."

    def add_arguments(self, parser):
        parser.add_argument("--tag", default=de.BASE_IMAGE_TAG)
        parser.add_argument("--force", action="store_true", help="Rebuild even if the image exists.")
        parser.add_argument(
            "--pull", metavar="IMAGE",
            help="Where a registry is reachable: pull IMAGE (it must have bash, python3 and pytest) and tag it as the base image.",
        )

    def handle(self, *args, tag, force, pull=None, **options):
        try:
            client = de.connect(settings.DOCKER_HOST)
        except de.EngineUnavailable as exc:
            raise CommandError(str(exc)) from None
        if pull:
            return self.pull(client, pull, tag)
        try:
            image = de.ensure_base_image(client, tag, data_dir=settings.DATA_DIR, force=force)
        except de.PermanentEngineError as exc:
            raise CommandError(f"base image {tag}: {exc}") from None
        self.stdout.write(self.style.SUCCESS(f"Base image ready: {tag} ({getattr(image, 'short_id', image)})"))

    def pull(self, client, reference: str, tag: str):
        import docker

        try:
            image = client.images.pull(reference)
        except docker.errors.APIError as exc:
            raise CommandError(f"--pull {reference}: the registry did not answer or has no such image ({exc.explanation or exc})") from None
        # Grading never installs anything, so the verifier's tools must already be in the image.
        with de.Sandbox(client, image.id, owner="facet-base-image-check") as sandbox:
            check = sandbox.exec(["bash", "-c", "python3 -m pytest --version"], timeout_s=60)
        if check.exit_code != 0:
            raise CommandError(f"--pull {reference}: the image has no python3 with pytest, which every verifier needs")
        repository, _, version = tag.rpartition(":")
        image.tag(repository or tag, version if repository else None)
        self.stdout.write(self.style.SUCCESS(f"Base image ready: {tag} (pulled from {reference})"))
