"""`facet construct RUN_ID`: task construction of a run, queued for the workers or run here."""
from django.core.management.base import BaseCommand, CommandError

from scenarios.models import SynthesisRun
from tasks import construction, funnel


class Command(BaseCommand):
    help = ("Construct tasks from a run's consistent scenarios (FACET stage 3): environment, build, artifacts, "
            "validation and targeted repair. Queues the work for the workers, or runs it here with --wait.")

    def add_arguments(self, parser):
        parser.add_argument("run_id", nargs="?", type=int)
        parser.add_argument("--wait", action="store_true", help="Run every step in this process and print the funnel.")
        parser.add_argument("--resume", action="store_true",
                            help="Put tasks that waited for Docker back to work (all runs when no RUN_ID).")

    def handle(self, *args, run_id=None, wait=False, resume=False, **options):
        if resume:
            n = construction.resume_waiting()
            self.stdout.write(f"Resumed {n} task{'s' if n != 1 else ''} that waited for Docker.")
            if run_id is None:
                return
        if run_id is None:
            raise CommandError("give a RUN_ID (or --resume)")
        run = SynthesisRun.objects.filter(pk=run_id).first()
        if run is None:
            raise CommandError(f"no run with id {run_id}")
        if wait:
            construction.construct_run(run.pk)
        else:
            construction.start_construction(run)
            self.stdout.write(f"Construction of run #{run.pk} queued.")
        self._summary(run)

    def _summary(self, run):
        from tasks.models import Task

        for task in Task.objects.filter(run=run).order_by("id"):
            line = f"  task #{task.pk} {task.status:<18} {task.name[:60]}"
            if task.status in ("discarded", "failed", "waiting_for_docker"):
                line += f"  ({task.discard_reason or task.message})"[:300]
            self.stdout.write(line)
        self.stdout.write(f"  {'stage':<32} {'count':>7} {'retention':>10}")
        for row in funnel.funnel(run):
            retention = f"{row['retention']:.2f}%" if row["retention"] is not None else "—"
            self.stdout.write(f"  {row['label']:<32} {row['count']:>7} {retention:>10}")
