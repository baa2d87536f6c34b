"""The catalogue of every versioned prompt (scenario, construction, repair, skills classification,
and the rollout turn defined in code) and the stored LLM calls that show one in use: what `facet
prompts` and the admins' prompts page show.

A stored call keeps the messages exactly as sent (scenarios.LLMCall.messages), so an example is
rendered from them: the inputs are not kept apart from the text they were rendered into. Token
figures are the offline approximation of facet_site.lib.llm.tokens, beside what the server reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db.models import Count, Max, Q

from facet_site.lib.llm import load_prompt
from facet_site.lib.llm.prompts import Prompt, PromptError, available_versions
from facet_site.lib.llm.tokens import METHOD, approx_message_tokens, approx_tokens
from scenarios.models import LLMCall

ROOT = Path(settings.BASE_DIR)
# where each app keeps its prompt files; the family of a tasks prompt follows from its stage name
DIRECTORIES = [("scenario", ROOT / "scenarios" / "prompts"), ("tasks", ROOT / "tasks" / "prompts"),
               ("skills classification", ROOT / "skills" / "prompts")]
REPAIR_STAGES = ("task.repair.", "task.router", "task.environment_repair")
ROLLOUT_STAGE = "rollout.turn"
FAMILY_ORDER = ["scenario", "construction", "repair", "skills classification", "rollout"]
# a call whose answer was used; failed or invalid ones are examples only when nothing else exists
USED = ("ok", "cached", "replayed")
TOKEN_METHOD = METHOD


@dataclass
class PromptInfo:
    stage: str
    family: str
    versions: list[str]  # "v1", "v2", ... oldest first
    current: str  # what the code loads (the highest version)
    description: str  # the current file's front matter
    path: str  # the current file, relative to the project
    in_code: bool = False  # defined in Python, not in a prompt file (the rollout turn)
    calls: int = 0
    last_version_used: str = ""
    placeholders: list[str] = field(default_factory=list)


def relative(path: str) -> str:
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return path


def family_of(directory: str, stage: str) -> str:
    if directory != "tasks":
        return directory
    return "repair" if stage.startswith(REPAIR_STAGES) else "construction"


def _stages(directory: Path) -> set[str]:
    return {p.name.rsplit(".v", 1)[0] for p in directory.glob("*.v*.md")} if directory.is_dir() else set()


def catalogue(*, with_usage: bool = True) -> list[PromptInfo]:
    """Every prompt with its versions, family order then stage name."""
    out = []
    for directory_key, directory in DIRECTORIES:
        for stage in sorted(_stages(directory)):
            versions = available_versions(directory, stage)
            if not versions:
                continue
            current = load_prompt(directory, stage)
            out.append(PromptInfo(
                stage=stage, family=family_of(directory_key, stage), versions=[f"v{n}" for n in sorted(versions)],
                current=current.version, description=current.meta.get("description", ""),
                path=relative(current.path), placeholders=sorted(current.placeholders)))
    from facet_site.lib import rollout

    out.append(PromptInfo(stage=ROLLOUT_STAGE, family="rollout", versions=[rollout.PROMPT_VERSION],
                          current=rollout.PROMPT_VERSION, in_code=True, path="facet_site/lib/rollout_turns.py",
                          description="the agent's turn in a rollout (system prompt and turn format in code)"))
    if with_usage:  # two queries whatever the number of stages
        usage = {r["stage"]: r for r in LLMCall.objects.values("stage").annotate(n=Count("id"), last=Max("id")).order_by()}
        versions_used = dict(LLMCall.objects.filter(pk__in=[r["last"] for r in usage.values()])
                             .values_list("stage", "prompt_version"))
        for info in out:
            info.calls = usage.get(info.stage, {}).get("n", 0)
            info.last_version_used = versions_used.get(info.stage, "")
    out.sort(key=lambda i: (FAMILY_ORDER.index(i.family), i.stage))
    return out


def find(stage: str) -> PromptInfo | None:
    return next((i for i in catalogue(with_usage=True) if i.stage == stage), None)


def template(stage: str, version: str | None = None) -> Prompt:
    """The prompt file of `stage` (its current version unless one is named); PromptError when none."""
    for directory_key, directory in DIRECTORIES:
        if stage in _stages(directory):
            return load_prompt(directory, stage, version)
    raise PromptError(f"no prompt file for stage {stage!r}")


def example_call(stage: str, example: str = "latest") -> LLMCall | None:
    """The stored call that shows `stage` in use: "latest" (the newest whose answer was used, else the
    newest at all) or a call id."""
    calls = LLMCall.objects.filter(stage=stage).exclude(messages=[])
    if example != "latest":
        if not str(example).isdigit():
            raise ValueError(f"--example: 'latest' or a call id, not {example!r}")
        return calls.filter(pk=int(example)).first()
    return calls.filter(status__in=USED).order_by("-id").first() or calls.order_by("-id").first()


def latest_any(example: str = "latest") -> LLMCall | None:
    """A call of any stage: the newest whose answer was used, or the one with the given id."""
    calls = LLMCall.objects.exclude(messages=[])
    if example != "latest":
        if not str(example).isdigit():
            raise ValueError(f"--example: 'latest' or a call id, not {example!r}")
        return calls.filter(pk=int(example)).first()
    return calls.filter(status__in=USED).order_by("-id").first() or calls.order_by("-id").first()


def rendered_messages(call: LLMCall) -> list[dict]:
    """The call's messages as sent, each with its estimated tokens (text only; callers escape it)."""
    out = []
    for message in call.messages or []:
        if isinstance(message, dict):
            role, content = str(message.get("role", "")), message.get("content")
        else:
            role, content = "", message
        text = content if isinstance(content, str) else str(content or "")
        out.append({"role": role, "content": text, "tokens": approx_tokens(text)})
    return out


def related_subjects(subject: str) -> list[str]:
    """The subjects of one pair's chain: a scenario is reconstructed under "pair:<keys>" and its task
    built under "scenario:<keys>" (repairs add "#repairN"), so either names the other."""
    base = subject.split("#", 1)[0]
    for prefix, twin in (("pair:", "scenario:"), ("scenario:", "pair:")):
        if base.startswith(prefix):
            return [base, twin + base[len(prefix):]]
    return [base]


def _row(call: LLMCall) -> dict:
    return {"stage": call.stage, "call": call.pk, "subject": call.subject, "prompt_version": call.prompt_version,
            "model": call.model, "status": call.status, "approx_in": approx_message_tokens(call.messages or []),
            "approx_out": approx_tokens(call.response_text or ""),
            # what the endpoint limiter and the construction and repair budgets count (four characters a token)
            "chars_in": sum(len(str(m.get("content") or "")) if isinstance(m, dict) else len(str(m))
                            for m in call.messages or []) // 4,
            "reported_in": call.tokens_in,
            "reported_out": call.tokens_out}


def tokens_per_stage(*, subject: str | None = None) -> list[dict]:
    """Per stage, the latest call's estimated and reported tokens: of one example's chain when a
    subject is given (the calls of that pair, its scenario and its task), else across the database."""
    calls = LLMCall.objects.exclude(messages=[])
    if subject:
        query = Q()
        for s in related_subjects(subject):
            query |= Q(subject=s) | Q(subject__startswith=s + "#")
        calls = calls.filter(query)
    # one query for the newest call id per stage, one for those calls: no scan of every call
    newest = [row["last"] for row in calls.values("stage").annotate(last=Max("id")).order_by()]
    order = {info.stage: n for n, info in enumerate(catalogue(with_usage=False))}
    chosen = LLMCall.objects.filter(pk__in=newest)
    return [_row(c) for c in sorted(chosen, key=lambda c: (order.get(c.stage, len(order)), c.stage))]
