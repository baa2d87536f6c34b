"""`facet rollout start|status|cancel|resume`: rollout batches from the command line."""
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from tasks import rollouts
from tasks.models import RolloutBatch


class Command(BaseCommand):
    help = ("Rollout batches: k attempts per task by one model with the built-in Terminus-2-style runner, "
            "graded by each task's verifier. `start` queues them for the Docker workers (or runs them here with "
            "--wait); `status`, `cancel` and `resume` manage them.")

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        start = sub.add_parser("start", help="Start a batch on the tasks a task-list filter selects.")
        start.add_argument("--query", default=rollouts.DEFAULT_QUERY,
                           help='A task-list filter as a query string (default "%(default)s"), e.g. "tag=csv&run=3".')
        start.add_argument("--model", default="", help="The model (default: FACET_LLM_MODEL).")
        start.add_argument("-k", "--attempts", type=int, default=3, help="Attempts per task (default 3).")
        start.add_argument("--max-turns", type=int, default=30)
        start.add_argument("--timeout", type=int, default=900, help="Seconds per attempt for the agent phase.")
        start.add_argument("--name", default="")
        start.add_argument("--provider", default="", help="LLM provider: openai or replay.")
        start.add_argument("--base-url", default="")
        start.add_argument("--cassette", default="", help="Replay the model's turns from this cassette.")
        start.add_argument("--record", default="", help="Record the model's turns into this cassette.")
        start.add_argument("--temperature", type=float, default=None)
        start.add_argument("--wait", action="store_true", help="Run every attempt in this process.")
        status = sub.add_parser("status", help="Batches, or one batch's progress.")
        status.add_argument("batch_id", nargs="?", type=int)
        cancel = sub.add_parser("cancel", help="Cancel a batch; running attempts stop at their next turn.")
        cancel.add_argument("batch_id", type=int)
        resume = sub.add_parser("resume", help="Re-queue trajectories that waited for Docker or whose worker died.")
        resume.add_argument("batch_id", nargs="?", type=int)
        resume.add_argument("--wait", action="store_true", help="Run them in this process instead.")

    def handle(self, *args, action, **opts):
        getattr(self, f"do_{action}")(**opts)

    def _batch(self, batch_id):
        batch = RolloutBatch.objects.filter(pk=batch_id).first()
        if batch is None:
            raise CommandError(f"no rollout batch with id {batch_id}")
        return batch

    def do_start(self, *, query, model, attempts, max_turns, timeout, name, provider, base_url, cassette, record,
                 temperature, wait, **_):
        llm = {k: v for k, v in {"provider": provider, "base_url": base_url, "cassette": cassette, "record": record,
                                 "temperature": temperature}.items() if v not in ("", None)}
        try:
            with transaction.atomic():
                batch = rollouts.create_batch(query=query, model=model, attempts=attempts, max_turns=max_turns,
                                              timeout_s=timeout, name=name, llm=llm, trusted=True)
                if not wait:
                    rollouts.start_batch(batch)
        except rollouts.RolloutError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Batch #{batch.pk} {batch.name}: {batch.trajectories.count()} trajectories "
                          f"on {batch.selection['tasks']} tasks" + ("." if wait else ", queued for the Docker workers."))
        if wait:
            batch = rollouts.run_batch(batch.pk)
        self._progress(batch)

    def do_status(self, *, batch_id=None, **_):
        if batch_id is None:
            for b in RolloutBatch.objects.order_by("-id")[:50]:
                p = rollouts.progress(b)
                self.stdout.write(f"  #{b.pk:<5} {b.status:<9} {b.source:<7} {p['finished']:>6}/{p['total']:<6} "
                                  f"{(b.model or '-')[:30]:<30} {b.name[:60]}")
            return
        self._progress(self._batch(batch_id))

    def do_cancel(self, *, batch_id, **_):
        batch = self._batch(batch_id)
        if not rollouts.cancel_batch(batch):
            raise CommandError(f"batch #{batch.pk} had already finished ({batch.status})")
        self.stdout.write(f"Batch #{batch.pk} cancelled.")

    def do_resume(self, *, batch_id=None, wait=False, **_):
        batch = self._batch(batch_id) if batch_id is not None else None
        if wait:
            ids = rollouts.reclaim(batch, all_pending=True)
            for tid in ids:
                rollouts.run_trajectory(tid)
            for bid in {b for b in RolloutBatch.objects.filter(trajectories__in=ids).values_list("id", flat=True)}:
                rollouts.finish_if_done(bid)
            self.stdout.write(f"Ran {len(ids)} trajectories.")
            return
        n = rollouts.resume(batch, all_pending=True)
        self.stdout.write(f"Queued {n} trajectories again.")

    def _progress(self, batch):
        p = rollouts.progress(batch)
        rate = f"{100 * p['pass_rate']:.1f}%" if p["pass_rate"] is not None else "-"
        self.stdout.write(f"  batch #{batch.pk} {batch.status}: {p['finished']}/{p['total']} finished, "
                          f"{p['passed']} passed ({rate}), {p['running']} running, {p['pending']} pending, "
                          f"{p['waiting']} waiting for Docker, {p['error']} errors")
        if batch.message:
            self.stdout.write(f"  {batch.message}")
