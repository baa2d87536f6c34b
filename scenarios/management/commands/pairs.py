"""`facet pairs`: import and export scenario–skill pairs as the reference implementation's JSONL."""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from scenarios import pairs_jsonl
from scenarios.models import SynthesisRun


class Command(BaseCommand):
    help = "Import and export scenario–skill pairs as JSONL in the reference implementation's format."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="{import,export}")

        imp = sub.add_parser("import", help="Add the pairs of a JSONL file to a run (they enter at the judge stage).")
        imp.add_argument("file", type=Path)
        imp.add_argument("--run", type=int, required=True, dest="run_id")

        exp = sub.add_parser("export", help="Write pairs as JSONL, to stdout unless -o is given.")
        exp.add_argument("--run", type=int, dest="run_id")
        exp.add_argument("--verdict", choices=["accepted", "rejected", "all"], default="accepted")
        exp.add_argument("-o", "--output", type=Path)

    def handle(self, *args, action, **options):
        return getattr(self, f"_{action}")(**options)

    def _run(self, run_id):
        if run_id is None:
            return None
        run = SynthesisRun.objects.filter(pk=run_id).first()
        if run is None:
            raise CommandError(f"--run: no run with id {run_id}")
        return run

    def _import(self, *, file: Path, run_id: int, **_):
        run = self._run(run_id)
        if not file.is_file():
            raise CommandError(f"{file}: no such file")
        with file.open("rb") as stream:  # bytes: the service decodes line by line, so one bad byte spoils one line
            result = pairs_jsonl.import_pairs_jsonl(run=run, stream=stream)
        self.stdout.write(self.style.SUCCESS(f"Run #{run.pk}: {result.created} created, {result.skipped} skipped, "
                                             f"{len(result.errors)} lines with errors."))
        for line, message in result.errors:
            self.stdout.write(self.style.ERROR(f"  {file}:{line}: {message}"))

    def _export(self, *, run_id=None, verdict="accepted", output: Path | None = None, **_):
        run = self._run(run_id)
        lines = pairs_jsonl.export_pairs_jsonl(run=run, verdict=None if verdict == "all" else verdict)
        count = 0
        with (output.open("w", encoding="utf-8") if output else _Unclosed(self.stdout)) as target:
            for line in lines:
                target.write(line.rstrip("\n") + "\n")
                count += 1
        if output:
            self.stderr.write(f"Wrote {count} pair{'s' if count != 1 else ''} to {output}.")


class _Unclosed:
    """stdout as a context manager that leaves it open; OutputWrapper adds no newline of its own here."""

    def __init__(self, out):
        self.out = out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, text: str):
        self.out.write(text, ending="")
