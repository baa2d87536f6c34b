"""`facet validate`: validations run in this process (one version, the pending ones, or an imported directory)."""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from facet_site.lib import harbor
from tasks import construction, imports, validating
from tasks.models import Task, TaskVersion, ValidationStatus


class Command(BaseCommand):
    help = ("Validate task versions in Docker (nop, oracle and partial trials, static checks): one version by id, "
            "or every queued or waiting validation with --pending. Works for imported tasks too.")

    def add_arguments(self, parser):
        parser.add_argument("version_id", nargs="?", type=int, help="The task version to validate.")
        parser.add_argument("--pending", action="store_true", help="Run every queued or waiting validation.")
        parser.add_argument("--import", dest="import_dir", metavar="TASK_DIR",
                            help="Import a Harbor task directory as a task first, then validate it.")

    def handle(self, *args, version_id=None, pending=False, import_dir=None, **options):
        if sum(bool(x) for x in (version_id, pending, import_dir)) != 1:
            raise CommandError("give one of: VERSION_ID, --pending, --import TASK_DIR")
        if pending:
            construction.resume_waiting()
            done = construction.validate_pending()
            for validation in done:
                self._report(validation)
            if not done:
                self.stdout.write("No pending validation.")
            return
        if import_dir:
            version = self._import(import_dir)
        else:
            version = TaskVersion.objects.select_related("task").filter(pk=version_id).first()
            if version is None:
                raise CommandError(f"no task version with id {version_id}")
        validation = validating.request_validation(version, queue=False)  # run here, below
        result = validating.validate(validation.pk)
        if result is not None and version.task.imported and result.status != ValidationStatus.WAITING_FOR_DOCKER:
            validating.apply_outcome(Task.objects.get(pk=version.task_id), result)
        self._report(result or validation)
        if result is not None and result.status == ValidationStatus.WAITING_FOR_DOCKER:
            raise CommandError(result.reason)

    def _import(self, import_dir: str):
        """One task directory through the importer (tasks.imports); the version to validate is
        the new one, or the existing one with the same content."""
        if not Path(import_dir).is_dir():
            raise CommandError(f"{import_dir}: not a task directory")
        task_import = imports.import_path(import_dir)
        for p in task_import.problems:
            where = "/".join(x for x in (p.get("task"), p.get("file")) if x)
            raise CommandError(f"{import_dir}: {where}: {p['error']}")
        task = task_import.tasks.order_by("id").first()
        if task is not None:
            version = task.current_version
            self.stdout.write(f"Imported task #{task.pk} as version {version.pk} ({version.content_hash})")
            return version
        bundle = harbor.read_task_dir(Path(import_dir))
        imports.restore_local_base(bundle)  # as the import stored it (a facet export coming back)
        digest = harbor.content_hash(bundle)
        version = TaskVersion.objects.select_related("task").get(content_hash=digest)
        self.stdout.write(f"Already here as task #{version.task_id} version {version.pk} ({digest})")
        return version

    def _report(self, validation):
        v = validation.version
        head = f"Validation #{validation.pk} of {v.task} v{v.number} ({v.content_hash[:19]}): "
        if validation.status == ValidationStatus.WAITING_FOR_DOCKER:
            self.stdout.write(self.style.WARNING(head + f"waiting for Docker: {validation.reason}"))
            return
        if validation.accepted:
            self.stdout.write(self.style.SUCCESS(head + "accepted"))
        else:
            self.stdout.write(self.style.ERROR(head + f"{validation.failure or validation.status}: {validation.reason}"))
        for trial in validation.trials.all():
            self.stdout.write(f"  {trial.name:<10} reward {trial.reward if trial.reward is not None else '-':<5} "
                              f"{'ok' if trial.passed else 'FAILED ' + trial.failure}  {trial.seconds:.1f}s")
