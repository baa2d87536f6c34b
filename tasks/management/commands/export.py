"""`facet export`: a task selection written as one reproducible dataset archive, in this process."""
import shutil
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from tasks import exports


class Command(BaseCommand):
    help = ("Export the tasks a task-list filter selects (default: the approved ones) as one reproducible .tar.gz: "
            "a Harbor dataset, provenance manifests (JSONL, Parquet), a Hugging Face layout and SFT trajectories. "
            "Runs in this process; the export is recorded like one started from the web page.")

    def add_arguments(self, parser):
        parser.add_argument("--query", default="",
                            help='The task list\'s query string, e.g. "review=approved&category=databases". '
                                 "Empty: the approved tasks.")
        parser.add_argument("--out", metavar="PATH",
                            help="Also copy the archive here (a file name, or a directory to put it in).")
        parser.add_argument("--parts", default=",".join(exports.PARTS),
                            help=f"Comma-separated parts to write (default all: {','.join(exports.PARTS)}).")
        parser.add_argument("--name", default="", help="A name for the export record.")

    def handle(self, *args, query="", out=None, parts="", name="", **options):
        try:
            export = exports.create_export(query=query, parts=parts, name=name, queue=False)
        except exports.ExportError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Export #{export.pk}: {export.name}")
        export = exports.run_export(export.pk)
        if export is None or export.status != "done":
            raise CommandError(f"export failed: {export.error if export else 'claimed by another worker'}")
        path = Path(export.archive_path)
        if out:
            target = Path(out)
            if target.is_dir():
                target = target / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            path = target
        s = export.summary
        self.stdout.write(f"  {s['tasks']} tasks ({s['approved']} approved, {s['imported']} imported), "
                          f"{s['sft_trajectories']} SFT trajectories; parts: {', '.join(s['parts'])}")
        for warning in s.get("warnings", []):
            self.stdout.write(self.style.WARNING(f"  warning: {warning}"))
        self.stdout.write(self.style.SUCCESS(f"{path}  ({export.archive_bytes:,} bytes, sha256 {export.archive_sha256})"))
