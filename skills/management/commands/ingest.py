"""`facet ingest PATH`: ingest skills from a directory, a ClawHub backup, a git checkout or an archive."""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from skills import services
from skills.models import IngestBatchStatus


class Command(BaseCommand):
    help = "Ingest agent skills from a directory, a ClawHub backup, a git checkout, or a .zip/.tar.gz archive."

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)
        parser.add_argument("--label", help="Source name to record (default: the directory or archive name).")
        parser.add_argument("--no-progress", action="store_true", help="Do not draw a progress bar.")

    def handle(self, *args, path: Path, label=None, no_progress=False, verbosity=1, **options):
        if not path.exists():
            raise CommandError(f"{path}: no such file or directory")
        bar = None

        def progress(done, total):
            nonlocal bar
            if no_progress or verbosity < 1:
                return
            if bar is None:
                bar = tqdm(total=total, unit="file", desc="ingest", file=self.stderr._out)
            bar.update(done - bar.n)

        batch = services.ingest_path(path, label=label, progress=progress)
        if bar is not None:
            bar.close()
        if batch.status == IngestBatchStatus.FAILED:
            raise CommandError(batch.message)
        s = batch.summary
        out = self.stdout
        out.write(self.style.SUCCESS(f"Ingest #{batch.pk} of {batch.source_label}: {batch.message}"))
        out.write(f"  skills found     {s.get('discovered', 0)}")
        out.write(f"  new              {s.get('ingested', 0)}")
        out.write(f"  updated          {s.get('updated', 0)}")
        out.write(f"  unchanged        {s.get('unchanged', 0)}")
        out.write(f"  accepted         {s.get('accepted', 0)}")
        out.write(f"  held for review  {s.get('held', 0)}")
        out.write(f"  duplicates       {s.get('duplicates', 0)}")
        out.write(f"  displaced        {s.get('displaced', 0)}")
        for reason, n in s.get("rejected_by_reason", {}).items():
            out.write(f"  rejected: {reason:<14} {n}")
        for severity, label, style in (("error", "errors  ", self.style.ERROR), ("warning", "warnings", self.style.WARNING)):
            problems = list(batch.problems.filter(severity=severity))
            out.write(f"  {label}         {len(problems)}")
            for p in problems[:200]:
                out.write(style(f"    {p.path}: {p.message}"))
            if len(problems) > 200:
                out.write(f"    … and {len(problems) - 200} more (see the batch page, /skills/ingest/{batch.pk}/)")
