"""Output schemas of the LLM stages (validated with pydantic; the JSON schema is sent to the server)."""
from typing import Literal

from pydantic import BaseModel, Field


class Hypothesis(BaseModel):
    application_context: str = Field(min_length=3)
    user_goal: str = Field(min_length=3)
    initial_state: str = Field(min_length=3)
    desired_final_state: str = Field(min_length=3)


class HypothesesOut(BaseModel):
    hypotheses: list[Hypothesis] = Field(min_length=1, max_length=8)


class Score(BaseModel):
    score: int = Field(ge=1, le=5)
    rationale: str


class JudgeOut(BaseModel):
    relevance: Score
    complementarity: Score
    non_redundancy: Score
    terminal_executability: Score
    verdict: Literal["accept", "reject"]
    summary: str


class SkillAnalysisItem(BaseModel):
    skill: str
    capabilities: list[str]
    preconditions: list[str]
    effects: list[str]


class SkillAnalysisOut(BaseModel):
    skills: list[SkillAnalysisItem] = Field(min_length=2)


class Setting(BaseModel):
    title: str
    description: str
    shared_objective: str
    skill_contributions: list[str]


class ScenarioExplorationOut(BaseModel):
    settings: list[Setting] = Field(min_length=1)


class Discarded(BaseModel):
    title: str
    reason: str


class AssociationFilteringOut(BaseModel):
    chosen_setting: str
    why: list[str]
    discarded: list[Discarded] = []


class WorkflowStep(BaseModel):
    step: int
    skill: str
    action: str
    produces: str


class EvolutionRecoveryOut(BaseModel):
    workflow: list[WorkflowStep] = Field(min_length=2)
    dependencies: list[str]
    intermediate_artifacts: list[str]
    state_transitions: list[str]


class Resource(BaseModel):
    path: str
    format: str
    description: str


class InformationExpansionOut(BaseModel):
    resources: list[Resource] = Field(min_length=1)
    constraints: list[str]
    success_conditions: list[str]
    tools: list[str]
    services: list[str] = []


class DimensionsOut(BaseModel):
    title: str
    goal: str
    context: str
    capability: str
    state: str
    io_tools: str
    integrated_scenario: str


class SolutionReference(BaseModel):
    setup_actions: list[str]
    workflow: list[str] = Field(min_length=1)
    state_transitions: list[str]


class InstructionReference(BaseModel):
    goal: str
    inputs: list[str]
    outputs: list[str] = Field(min_length=1)
    constraints: list[str]


class ReferencesOut(BaseModel):
    solution_reference: SolutionReference
    instruction_reference: InstructionReference


class ConsistencyOut(BaseModel):
    consistent: bool
    shared_initial_state: str
    shared_outcome: str
    issues: list[str] = []


# stage name -> (prompt stage, schema); reconstruction modules run in this order
RECONSTRUCTION_STEPS = [
    ("skill_analysis", SkillAnalysisOut),
    ("scenario_exploration", ScenarioExplorationOut),
    ("association_filtering", AssociationFilteringOut),
    ("evolution_recovery", EvolutionRecoveryOut),
    ("information_expansion", InformationExpansionOut),
    ("dimensions", DimensionsOut),
    ("references", ReferencesOut),
    ("consistency", ConsistencyOut),
]
