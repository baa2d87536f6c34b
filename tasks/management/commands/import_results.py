"""`facet import-results PATH`: Harbor job results imported as rollout batches."""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from tasks import rollout_imports


class Command(BaseCommand):
    help = ("Import Harbor run results: a job directory (jobs/<job>/<trial>/result.json, verifier output, agent "
            "logs) or a directory of jobs becomes one rollout batch per job, its trials matched to our task "
            "versions by task name and checksum. A job with malformed trials is refused whole, naming each "
            "trial, file and field.")

    def add_arguments(self, parser):
        parser.add_argument("path", help="A Harbor job directory, or a jobs/ directory holding several.")
        parser.add_argument("--partial", action="store_true",
                            help="Import the finished trials of a job that still runs (or was interrupted); the "
                                 "trials without result.json are listed in the batch report.")
        parser.add_argument("--name", default="", help="The batch's name (default: the job's name).")

    def handle(self, *args, path, partial=False, name="", **options):
        try:
            outcome = rollout_imports.import_results(Path(path), allow_partial=partial, name=name)
        except rollout_imports.ImportRefused as exc:
            self._refused(exc)
            raise CommandError(f"nothing imported from {path}") from exc
        for batch in outcome.batches:
            report = rollout_imports.job_report(batch)
            self.stdout.write(f"Batch #{batch.pk} {batch.name}: {report['matched']} of {report['trials']} trials "
                              f"matched ({batch.model or '-'} · {batch.agent}).")
            for u in report["unmatched"]:
                self.stdout.write(f"  unmatched {u['trial']} ({u['task_name']}): {u['reason']}")
            for t in report["incomplete"]:
                self.stdout.write(f"  left out {t}: no result.json")
            for w in report["warnings"]:
                self.stdout.write(f"  warning: {w}")
        for exc in outcome.refused:
            self._refused(exc)
        if outcome.refused:
            raise CommandError(f"{len(outcome.refused)} job(s) refused, {len(outcome.batches)} imported")

    def _refused(self, exc: rollout_imports.ImportRefused):
        self.stderr.write(f"Refused {exc.job}: nothing of it was imported.")
        for p in exc.problems:
            where = "/".join(x for x in (p["trial"], p["file"]) if x)
            field = f" [{p['field']}]" if p["field"] else ""
            self.stderr.write(f"  {where}{field}: {p['error']}")
