"""`facet prompts`: list every prompt with its versions, render one (the template, or a stored
example's messages as sent), and show the tokens per stage of an example (facet_site/prompt_catalogue.py)."""
from django.core.management.base import BaseCommand, CommandError

from facet_site import prompt_catalogue as catalogue
from facet_site.lib.llm.prompts import PromptError


class Command(BaseCommand):
    help = "List the prompts and their versions, render one with a stored example, count tokens per stage."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="{list,render,tokens}")
        sub.add_parser("list", help="Every prompt: family, stage, versions, current version, calls stored.")

        render = sub.add_parser("render", help="One prompt: its template, or a stored call's messages as sent.")
        render.add_argument("stage", help="e.g. reconstruct.dimensions, task.instruction, task.router")
        render.add_argument("--example", metavar="latest|CALL_ID",
                            help="Render the messages of a stored call of this stage (the newest: latest).")
        render.add_argument("--version", help="The template version to show (default: the current one).")

        tokens = sub.add_parser("tokens", help="Estimated and reported tokens per stage, of one example's chain.")
        tokens.add_argument("--example", metavar="latest|CALL_ID", default="latest",
                            help="The call whose subject's chain (pair, scenario, task, repairs) is counted.")
        tokens.add_argument("--stage", help="The stage the example is taken from (default: the newest call of any stage).")
        tokens.add_argument("--all", action="store_true", help="The newest call of every stage, whatever its subject.")

    def handle(self, *args, action, **options):
        return getattr(self, f"_{action}")(**options)

    def _list(self, **_):
        rows = catalogue.catalogue()
        self.stdout.write(f"{'family':<22} {'stage':<38} {'versions':<20} {'current':<20} {'calls':>6}  last used")
        for info in rows:
            self.stdout.write(f"{info.family:<22} {info.stage:<38} {','.join(info.versions):<20} {info.current:<20} "
                              f"{info.calls:>6}  {info.last_version_used or '-'}")
        self.stdout.write(f"{len(rows)} prompts")

    def _render(self, *, stage, example=None, version=None, **_):
        if example:
            try:
                call = catalogue.example_call(stage, example)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            if call is None:
                raise CommandError(f"no stored call of stage {stage!r} matches --example {example}")
            self.stdout.write(f"# {stage}, call #{call.pk} for {call.subject}: prompt {call.prompt_version}, "
                              f"model {call.model}, {call.get_status_display().lower()}, {call.created_at:%Y-%m-%d %H:%M}")
            for message in catalogue.rendered_messages(call):
                self.stdout.write(f"\n=== {message['role']} (~{message['tokens']} tokens) ===\n{message['content']}")
            self.stdout.write(f"\n=== response (~{catalogue.approx_tokens(call.response_text or '')} tokens) ===\n"
                              f"{call.response_text}")
            return
        try:
            prompt = catalogue.template(stage, version)
        except PromptError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"# {stage} {prompt.version} ({catalogue.relative(prompt.path)}); placeholders: "
                          f"{', '.join(sorted(prompt.placeholders)) or 'none'}")
        if prompt.meta.get("description"):
            self.stdout.write(f"# {prompt.meta['description']}")
        if prompt.system:
            self.stdout.write(f"\n=== system ===\n{prompt.system}")
        self.stdout.write(f"\n=== user ===\n{prompt.user_template}")

    def _tokens(self, *, example="latest", stage=None, all=False, **_):
        subject = None
        if not all:
            try:
                call = catalogue.example_call(stage, example) if stage else catalogue.latest_any(example)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            if call is None:
                raise CommandError("no stored call to take an example from" + (f" for stage {stage!r}" if stage else ""))
            subject = call.subject
            self.stdout.write(f"Example: call #{call.pk} ({call.stage}) for {call.subject}")
        rows = catalogue.tokens_per_stage(subject=subject)
        self.stdout.write(f"Token counts are {catalogue.TOKEN_METHOD}; 'reported' is what the server said.")
        self.stdout.write("'chars/4' is the four-characters-a-token count the limiter and the prompt budgets use.")
        self.stdout.write(f"{'stage':<38} {'version':<8} {'prompt≈':>8} {'answer≈':>8} {'reported in':>12} {'out':>6} "
                          f"{'chars/4':>8}")
        for r in rows:
            self.stdout.write(f"{r['stage']:<38} {r['prompt_version']:<8} {r['approx_in']:>8} {r['approx_out']:>8} "
                              f"{_n(r['reported_in']):>12} {_n(r['reported_out']):>6} {r['chars_in']:>8}")
        self.stdout.write(f"{'total':<38} {'':<8} {sum(r['approx_in'] for r in rows):>8} "
                          f"{sum(r['approx_out'] for r in rows):>8}")


def _n(value) -> str:
    return "-" if value is None else str(value)
