"""`facet resume`: queue again every job whose worker died (what beat does), or retry one record."""
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

KINDS = ("ingest", "export", "import", "validation", "run", "task")


class Command(BaseCommand):
    help = ("Queue again every stalled job now (ingest batches, synthesis runs, construction, validations, "
            "re-checks, rollouts, exports, imports: what the worker's beat does every FACET_RESUME_WAITING_S), "
            "or retry one failed or stalled record: `facet resume ingest 12`. See docs/operations.md.")

    def add_arguments(self, parser):
        parser.add_argument("kind", nargs="?", choices=KINDS, help="Retry one record of this kind.")
        parser.add_argument("id", nargs="?", type=int)

    def handle(self, *args, kind, id, **options):
        from facet_site import recovery

        if kind is None:
            queued = recovery.resume_stalled()
            for name, ids in queued.items():
                if ids and name != "rechecks":
                    self.stdout.write(f"{name}: queued again {', '.join(f'#{i}' for i in ids)}")
            self.stdout.write("Stalled jobs were queued again; a worker runs them.")
            return
        if id is None:
            raise CommandError(f"{kind}: give the id of the {kind} to retry, e.g. `facet resume {kind} 12`")
        with transaction.atomic():
            done = self._retry(kind, id)
        if not done:
            raise CommandError(f"{kind} #{id}: only a failed one, or one whose worker stopped answering, can be retried")
        self.stdout.write(f"{kind} #{id} is queued again.")

    def _retry(self, kind: str, pk: int) -> bool:
        from scenarios import run_recovery
        from scenarios.models import SynthesisRun
        from skills import services as ingest
        from skills.models import IngestBatch
        from tasks import exports, imports, task_recovery, validating
        from tasks.models import Export, Task, TaskImport, Validation

        model, retry = {"ingest": (IngestBatch, ingest.retry_batch), "export": (Export, exports.retry_export),
                        "import": (TaskImport, imports.retry_import),
                        "validation": (Validation, validating.retry_validation),
                        # a run's failed items, or a stalled run; a task's failed or stalled construction
                        "run": (SynthesisRun, lambda run: run_recovery.retry_run(run=run).action),
                        "task": (Task, lambda task: task_recovery.retry_construction(task=task))}[kind]
        row = model.objects.filter(pk=pk).first()
        if row is None:
            raise CommandError(f"{kind} #{pk}: no such {kind}")
        return bool(retry(row))
