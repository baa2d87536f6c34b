"""Request and response schemas of the scenarios API (scenarios.api)."""
from datetime import datetime

from ninja import Field, Schema


class RunIn(Schema):
    name: str
    config: dict = {}  # merged over run_config.DEFAULT_CONFIG; see GET /api/runs/{id} for a full one


class RunOut(Schema):
    """A run as selectors.runs_with_usage() annotates it (total_tokens_in, total_tokens_out,
    total_cost); a run without those annotations reads as no usage yet."""

    id: int
    name: str
    status: str
    stage: str
    strategy: str
    created_by: str | None = Field(None, alias="created_by.username")
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    message: str
    tokens_in: int
    tokens_out: int
    cost_usd: float

    @staticmethod
    def resolve_tokens_in(run) -> int:
        return getattr(run, "total_tokens_in", None) or 0

    @staticmethod
    def resolve_tokens_out(run) -> int:
        return getattr(run, "total_tokens_out", None) or 0

    @staticmethod
    def resolve_cost_usd(run) -> float:
        return round(getattr(run, "total_cost", None) or 0.0, 6)


class StageProgressOut(Schema):
    stage: str
    label: str
    total: int
    done: int
    failed: int
    open: int
    skipped: int = 0


class StageUsageOut(Schema):
    stage: str
    calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float


class RunErrorOut(Schema):
    subject: str
    stage: str
    error: str


class ProgressOut(Schema):
    stages: list[StageProgressOut]
    tokens_in: int
    tokens_out: int
    cost_usd: float
    calls: int
    calls_by_stage: list[StageUsageOut]
    errors: list[RunErrorOut]


class RunDetailOut(RunOut):
    """A run with `live_progress` (services.run_progress) set by the route: usage comes from it."""

    config: dict
    pairs: int
    scenarios: int
    progress: ProgressOut

    @staticmethod
    def resolve_tokens_in(run) -> int:
        return run.live_progress["tokens_in"]

    @staticmethod
    def resolve_tokens_out(run) -> int:
        return run.live_progress["tokens_out"]

    @staticmethod
    def resolve_cost_usd(run) -> float:
        return run.live_progress["cost_usd"]

    @staticmethod
    def resolve_pairs(run) -> int:
        return run.pairs.count()

    @staticmethod
    def resolve_scenarios(run) -> int:
        return run.scenarios.count()

    @staticmethod
    def resolve_progress(run) -> dict:
        p = run.live_progress
        return {**p, "calls_by_stage": [{"stage": stage, **usage} for stage, usage in sorted(p["calls_by_stage"].items())]}


class SkillRef(Schema):
    id: int
    key: str
    name: str
    category: str | None = None  # slug


class JudgementOut(Schema):
    relevance: float
    complementarity: float
    non_redundancy: float
    executability: float
    average: float
    verdict: str


class JudgementDetailOut(JudgementOut):
    rationales: dict
    summary: str
    prompt_version: str


def _judgement(pair, *, detail: bool) -> dict | None:
    from .selectors import judge_average

    try:
        j = pair.judgement
    except pair.__class__.judgement.RelatedObjectDoesNotExist:
        return None
    out = {**j.scores, "average": judge_average(j), "verdict": j.verdict}
    if detail:
        out.update({"rationales": j.rationales, "summary": j.summary, "prompt_version": j.prompt_version})
    return out


class PairOut(Schema):
    id: int
    run: int = Field(alias="run_id")
    skills: list[SkillRef]
    scenario_text: str
    score: float | None = None
    status: str
    verdict: str
    source: str
    external_id: str
    judgement: JudgementOut | None = None
    scenario: int | None = None

    @staticmethod
    def resolve_skills(pair) -> list[dict]:
        return [{"id": ps.skill.id, "key": ps.skill.key, "name": ps.skill.name,
                 "category": ps.skill.category.slug if ps.skill.category else None} for ps in pair.pair_skills.all()]

    @staticmethod
    def resolve_judgement(pair) -> dict | None:
        return _judgement(pair, detail=False)

    @staticmethod
    def resolve_scenario(pair) -> int | None:
        try:
            return pair.scenario.pk
        except pair.__class__.scenario.RelatedObjectDoesNotExist:
            return None


class HypothesisOut(Schema):
    id: int
    skill: int = Field(alias="skill_id")
    position: int
    application_context: str
    user_goal: str
    initial_state: str
    desired_final_state: str
    prompt_version: str


class PairDetailOut(PairOut):
    judgement: JudgementDetailOut | None = None
    evidence: list
    skill_summaries: list
    hypotheses: list[HypothesisOut]
    error: str

    @staticmethod
    def resolve_judgement(pair) -> dict | None:
        return _judgement(pair, detail=True)

    @staticmethod
    def resolve_evidence(pair) -> list:
        return pair.evidence or []

    @staticmethod
    def resolve_skill_summaries(pair) -> list:
        return pair.skill_summaries or []

    @staticmethod
    def resolve_hypotheses(pair):
        return pair.hypotheses.order_by("skill_id", "position")


class ScenarioOut(Schema):
    id: int
    run: int = Field(alias="run_id")
    pair: int = Field(alias="pair_id")
    title: str
    status: str
    consistency: str
    difficulty: str  # easy, medium, hard; blank when none was given
    difficulty_rationale: str
    goal: str
    context: str
    capability: str
    state: str
    io_tools: str


class LLMCallRef(Schema):
    id: int
    stage: str
    subject: str
    model: str
    prompt_version: str
    status: str
    tokens_in: int | None = None
    tokens_out: int | None = None
    latency_ms: int
    cost_usd: float | None = None
    created_at: datetime


class ScenarioDetailOut(ScenarioOut):
    integrated: str
    solution_reference: dict
    instruction_reference: dict
    consistency_notes: str
    modules: dict
    prompt_versions: dict
    error: str
    llm_calls: list[LLMCallRef]

    @staticmethod
    def resolve_llm_calls(scenario):
        from .selectors import calls_behind

        return list(calls_behind(pair=scenario.pair, scenario=scenario))


class ImportErrorOut(Schema):
    line: int
    message: str


class ImportResultOut(Schema):
    run: int
    created: int
    skipped: int
    errors: list[ImportErrorOut]
