from datetime import datetime

from ninja import Schema


class RunIn(Schema):
    name: str
    config: dict = {}  # merged over services.DEFAULT_CONFIG; see GET /api/runs/{id} for a full one


class RunOut(Schema):
    id: int
    name: str
    status: str
    stage: str
    strategy: str
    created_by: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    message: str
    tokens_in: int
    tokens_out: int
    cost_usd: float


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
    config: dict
    pairs: int
    scenarios: int
    progress: ProgressOut


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


class PairOut(Schema):
    id: int
    run: int
    skills: list[SkillRef]
    scenario_text: str
    score: float | None = None
    status: str
    verdict: str
    source: str
    external_id: str
    judgement: JudgementOut | None = None
    scenario: int | None = None


class HypothesisOut(Schema):
    id: int
    skill: int
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


class ScenarioOut(Schema):
    id: int
    run: int
    pair: int
    title: str
    status: str
    consistency: str
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


class ImportErrorOut(Schema):
    line: int
    message: str


class ImportResultOut(Schema):
    run: int
    created: int
    skipped: int
    errors: list[ImportErrorOut]
