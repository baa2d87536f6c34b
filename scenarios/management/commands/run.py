"""`facet run`: start, follow, cancel and list synthesis runs."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from scenarios import selectors, services
from scenarios.forms import build_config
from scenarios.models import Strategy, SynthesisRun
from scenarios.run_config import RunConfigError


class Command(BaseCommand):
    help = "Start, follow, cancel and list synthesis runs (skills → hypotheses → pairs → judge → scenarios)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="{start,status,cancel,list}")

        start = sub.add_parser("start", help="Start a run; prints its id.")
        start.add_argument("--name", required=True)
        start.add_argument("--strategy", choices=Strategy.values, default=None)
        start.add_argument("--category", action="append", dest="categories", metavar="SLUG",
                           help="Only skills in this category or family; repeat for several.")
        start.add_argument("--source", help="Only skills from this source (corpus or archive name).")
        start.add_argument("--max-skills", type=int)
        start.add_argument("--max-pairs", type=int)
        start.add_argument("--max-tokens", type=int, help="Token budget for the whole run; 0 means none.")
        start.add_argument("--model")
        start.add_argument("--llm-classification", action="store_true", default=None,
                           help="First classify each skill with the run's model (one call per skill); "
                                "reviewer overrides are kept.")
        start.add_argument("--provider", choices=["openai", "replay"])
        start.add_argument("--cassette", help="Recorded responses to replay (with --provider replay).")
        start.add_argument("--user", help="Username to record as the run's creator.")
        start.add_argument("--wait", action="store_true", help="Run every stage in this process and print a summary.")
        start.add_argument("--dry-run", action="store_true",
                           help="Start nothing: print the estimate of calls, tokens, cost and time.")
        start.add_argument("--workers", type=int, default=1,
                           help="llm workers the estimate assumes (each keeps FACET_LLM_CONCURRENCY calls in flight).")

        status = sub.add_parser("status", help="Progress, token use and recent errors of one run.")
        status.add_argument("run_id", type=int)

        cancel = sub.add_parser("cancel", help="Cancel a queued or running run.")
        cancel.add_argument("run_id", type=int)

        listing = sub.add_parser("list", help="The most recent runs.")
        listing.add_argument("--limit", type=int, default=20)

    def handle(self, *args, action, **options):
        return getattr(self, f"_{action}")(**options)

    def _start(self, *, name, strategy=None, categories=None, source=None, max_skills=None, max_pairs=None,
               max_tokens=None, model=None, llm_classification=None, provider=None, cassette=None, user=None, wait=False, dry_run=False,
               workers=1, **_):
        if cassette and provider != "replay":
            raise CommandError("--cassette: only used with --provider replay")
        creator = None
        if user:
            creator = get_user_model().objects.filter(username=user).first()
            if creator is None:
                raise CommandError(f"--user: no user named {user!r}")
        config = build_config({
            "strategy": strategy,
            "skills": {"categories": categories, "source": source, "max_skills": max_skills,
                       "llm_classification": llm_classification},
            "limits": {"max_pairs": max_pairs, "max_tokens": max_tokens},
            "llm": {"model": model, "provider": provider, "cassette": cassette},
        })
        if dry_run:
            from scenarios.estimate import describe, estimate_config

            if workers < 1:
                raise CommandError("--workers: at least 1")
            try:
                estimate = estimate_config(config, trusted=True, workers=workers)
            except RunConfigError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write("\n".join(describe(estimate)))
            return
        try:
            # --wait runs the stages here, so no job is queued for a worker to race with; the CLI is the
            # operator's, so --provider/--cassette may set what a run started on the web may not
            run = services.start_run(name=name, user=creator, config=config, enqueue=not wait, trusted=True)
        except RunConfigError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(run.pk))
        if wait:
            run = services.execute_run_inline(run.pk)
            self._summary(run)
            if run.status == "failed":
                raise CommandError(f"run {run.pk} failed: {run.message}")

    def _get(self, run_id: int) -> SynthesisRun:
        run = SynthesisRun.objects.filter(pk=run_id).first()
        if run is None:
            raise CommandError(f"no run with id {run_id}")
        return run

    def _status(self, *, run_id, **_):
        self._summary(self._get(run_id))

    def _cancel(self, *, run_id, **_):
        run = self._get(run_id)
        if run.is_finished:
            raise CommandError(f"run {run.pk} has already finished ({run.get_status_display().lower()})")
        run = services.cancel_run(run=run)
        self.stdout.write(self.style.SUCCESS(f"Run #{run.pk} {run.get_status_display().lower()}: {run.message}"))

    def _list(self, *, limit=20, **_):
        runs = list(selectors.runs_with_usage()[:limit])
        if not runs:
            self.stdout.write("No run yet. Start one with: facet run start --name NAME")
            return
        self.stdout.write(f"{'id':>5}  {'status':<10} {'stage':<15} {'tokens':>10} {'cost':>9}  {'created':<16}  name")
        for run in runs:
            tokens = (run.total_tokens_in or 0) + (run.total_tokens_out or 0)
            self.stdout.write(f"{run.pk:>5}  {run.status:<10} {run.stage:<15} {tokens:>10,} {run.total_cost or 0:>9.4f}  "
                              f"{run.created_at:%Y-%m-%d %H:%M}  {run.name}")

    def _summary(self, run: SynthesisRun):
        progress = services.run_progress(run)
        style = {"succeeded": self.style.SUCCESS, "failed": self.style.ERROR}.get(run.status, str)
        out = self.stdout
        out.write(style(f"Run #{run.pk} {run.name}: {run.get_status_display()} (stage: {run.get_stage_display()})"))
        if run.message:
            out.write(f"  {run.message}")
        out.write(f"  {'stage':<28} {'total':>7} {'done':>7} {'failed':>7} {'open':>7}")
        for s in progress["stages"]:
            out.write(f"  {s['label']:<28} {s['total']:>7} {s['done']:>7} {s['failed']:>7} {s['open']:>7}")
        out.write(f"  LLM calls {progress['calls']}, tokens in {progress['tokens_in']:,}, out {progress['tokens_out']:,}, "
                  f"cost ${progress['cost_usd']:.4f}")
        for stage, usage in sorted(progress["calls_by_stage"].items()):
            out.write(f"    {stage:<36} {usage['calls']:>5} calls {usage['tokens_in'] + usage['tokens_out']:>10,} tokens "
                      f"${usage['cost_usd']:.4f}")
        if "accepted_pairs" in progress:
            out.write(f"  accepted pairs {progress['accepted_pairs']}, consistent scenarios {progress.get('consistent_scenarios', 0)}")
        for e in progress["errors"][:10]:
            out.write(self.style.ERROR(f"  error {e['subject']} ({e['stage']}): {e['error'][:200]}"))
        out.write(f"  pairs: /repository/?run={run.pk}   run page: /runs/{run.pk}/")
