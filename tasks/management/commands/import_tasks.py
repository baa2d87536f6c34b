"""`facet import-tasks PATH`: Harbor or Terminal-Bench tasks made elsewhere, imported for review."""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from tasks import imports


class Command(BaseCommand):
    help = ("Import Harbor tasks (task.toml, version 1.0 or schema_version 1.x), datasets of them, facet exports "
            "or Terminal-Bench 1.x tasks, from a directory or a .tar.gz/.tgz/.tar/.zip archive, as imported tasks "
            "that enter review. Content already here is skipped. Exits 1 when any task was refused.")

    def add_arguments(self, parser):
        parser.add_argument("path", help="A task directory, a dataset directory, or an archive of either.")
        parser.add_argument("--validate", action="store_true",
                            help="Queue a Docker validation of every imported task (a worker on the docker queue runs it).")
        parser.add_argument("--image-map", action="append", default=[], metavar="IMAGE=LOCAL",
                            help="Validate tasks FROM IMAGE on the local image LOCAL (e.g. python:3.11-slim="
                                 "facet-base:bookworm); repeatable, over FACET_IMAGE_MAP.")

    def handle(self, *args, path, validate=False, image_map=(), **options):
        if not Path(path).exists():
            raise CommandError(f"{path}: no such file or directory")
        try:
            mapping = imports.parse_image_map(image_map)
        except imports.ImportRefused as exc:
            raise CommandError(f"--image-map: {exc}") from None
        task_import = imports.import_path(path, validate=validate, image_map=mapping)
        for p in task_import.problems:
            where = "/".join(x for x in (p.get("task"), p.get("file")) if x) or "-"
            extra = "".join(f" [{k} {p[k]}]" for k in ("field", "line") if p.get(k) not in (None, ""))
            self.stdout.write(self.style.ERROR(f"  {where}{extra}: {p['error']}"))
        for task in task_import.tasks.order_by("id"):
            self.stdout.write(f"  imported #{task.pk} {task.name} ({task.current_version.content_hash[:19]})")
            for f in task.current_version.import_findings:  # static checks and warnings, no Docker needed
                self.stdout.write(self.style.WARNING(f"    {f.get('severity')}: {f.get('check')}: {f.get('message')}"))
        line = (f"Import #{task_import.pk}: {task_import.imported} imported, {task_import.skipped} skipped "
                f"(already here), {len(task_import.problems)} problem(s)")
        if task_import.status != "done" or task_import.problems:
            self.stdout.write(self.style.WARNING(line))
            raise CommandError(f"import #{task_import.pk} had problems (listed above)", returncode=1)
        self.stdout.write(self.style.SUCCESS(line))
