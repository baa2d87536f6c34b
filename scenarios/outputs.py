"""Output schemas of the scenario stages (validated with pydantic; the JSON schema, with a
description on every field, is sent to the server as the answer's contract).

Fields added after the first recordings (`difficulty`, `tools`, `structure`, ...) have defaults, so
answers recorded before them (the demo cassette) still parse; a strong model is asked for them by
the v2 prompts and the schema's descriptions.
"""
from typing import Literal

from pydantic import BaseModel, Field

Difficulty = Literal["easy", "medium", "hard"]


class Hypothesis(BaseModel):
    application_context: str = Field(min_length=3, description=(
        "Who works where, on what project, data or system: a concrete setting, not a category."))
    user_goal: str = Field(min_length=3, description=(
        "What the user wants done, in one sentence, naming the artifact or state to change."))
    initial_state: str = Field(min_length=3, description=(
        "What exists before the work starts, as files, directories, formats or local services a "
        "container can hold (e.g. '/app/logs/*.log in nginx combined format, 3 days')."))
    desired_final_state: str = Field(min_length=3, description=(
        "What must be true afterwards that a test can check from files, exit codes or a local "
        "service's state (files written, values changed, reports produced)."))


class HypothesesOut(BaseModel):
    # as many as a run may ask for (run_config's hypotheses_per_skill goes up to 50)
    hypotheses: list[Hypothesis] = Field(min_length=1, max_length=50, description=(
        "Distinct scenario hypotheses for the one skill, as many as asked, each in a different setting."))


class Score(BaseModel):
    score: int = Field(ge=1, le=5, description="1 (poor) to 5 (excellent), by the rubric in the prompt.")
    rationale: str = Field(description="One sentence naming the evidence for the score.")


class JudgeOut(BaseModel):
    relevance: Score = Field(description="Every skill matters to the candidate scenario's goal.")
    complementarity: Score = Field(description="The skills bring different capabilities, and one needs another's result.")
    non_redundancy: Score = Field(description="No skill merely repeats what another does.")
    terminal_executability: Score = Field(description=(
        "The whole scenario runs and is checked in an offline Linux container, with no GUI, account or outside service."))
    verdict: Literal["accept", "reject"] = Field(description="accept only when every criterion scores 3 or more.")
    summary: str = Field(description="One sentence: the combined task the skills make, or why they make none.")


class SkillAnalysisItem(BaseModel):
    skill: str = Field(description="The skill's name exactly as given in the input.")
    capabilities: list[str] = Field(description=(
        "Concrete operations the skill performs, in terminal terms (commands, scripts, file transformations)."))
    preconditions: list[str] = Field(description=(
        "What must exist before it can act: files and their formats, tools, configuration, running services."))
    effects: list[str] = Field(description="What it changes or produces: files written, state changed, output printed.")
    tools: list[str] = Field(default=[], description=(
        "Command-line tools, interpreters and libraries the skill relies on (e.g. 'jq', 'python3 + pandas', 'sqlite3')."))
    offline_substitutes: list[str] = Field(default=[], description=(
        "For each thing the skill normally reaches over the network (an API, a website, a cloud service), "
        "the local stand-in a container can hold (a fixture file, a local stub server, a SQLite database). "
        "Empty when it needs no network."))


class SkillAnalysisOut(BaseModel):
    skills: list[SkillAnalysisItem] = Field(min_length=2, description="One entry per input skill, in the input order.")


class Setting(BaseModel):
    title: str = Field(description="A short, unique name for the setting; the next step chooses by it.")
    description: str = Field(description="Who, where, which system or data, and what situation prompts the work.")
    shared_objective: str = Field(description="The one outcome every skill contributes to.")
    skill_contributions: list[str] = Field(description=(
        "One line per skill: '<skill>: what it does here and which earlier result it consumes or which later step it feeds'."))


class ScenarioExplorationOut(BaseModel):
    settings: list[Setting] = Field(min_length=1, description="Two or three candidate settings, best first.")


class Discarded(BaseModel):
    title: str = Field(description="The discarded setting's title, exactly as given.")
    reason: str = Field(description="Why it was discarded (e.g. the skills only sit side by side).")


class AssociationFilteringOut(BaseModel):
    chosen_setting: str = Field(description="The title of the kept setting, exactly as given in the input.")
    why: list[str] = Field(description=(
        "The dependencies that make the kept setting coherent: which skill's output another consumes, and why."))
    discarded: list[Discarded] = Field(default=[], description="Every other setting, with the reason it was dropped.")


class WorkflowStep(BaseModel):
    step: int = Field(description="1-based position in the workflow.")
    skill: str = Field(description="The skill (by its input name) that carries out this step.")
    action: str = Field(description="What is done, concretely enough to script it.")
    produces: str = Field(description="The artifact or state change this step leaves (a path, a table, a service state).")


class EvolutionRecoveryOut(BaseModel):
    workflow: list[WorkflowStep] = Field(min_length=2, description="The ordered workflow through every skill.")
    dependencies: list[str] = Field(description="Cross-skill dependencies: 'step N needs X from step M'.")
    intermediate_artifacts: list[str] = Field(description="Files or states that exist only between steps, with their paths.")
    state_transitions: list[str] = Field(description="The states the environment passes through, initial to final.")


class Resource(BaseModel):
    path: str = Field(description="Absolute path inside the container (under the working directory, e.g. /app/...).")
    format: str = Field(description="File format or kind (CSV, JSON, YAML, SQLite, log, source file, directory).")
    description: str = Field(description="What it holds and its role in the workflow (input, configuration, output).")
    structure: str = Field(default="", description=(
        "The shape a generator must reproduce: CSV columns, JSON keys, log line format, table schema, sizes."))
    distractors: str = Field(default="", description=(
        "Records or files that look relevant but must be ignored or handled specially (cancelled rows, "
        "malformed lines, duplicates, stale files); empty when none."))


class InformationExpansionOut(BaseModel):
    resources: list[Resource] = Field(min_length=1, description=(
        "Every file and directory the environment must contain at the start, and every output the work must create."))
    constraints: list[str] = Field(description=(
        "Rules the work must respect (offline, inputs left unchanged, formats, ordering, precision, permissions)."))
    success_conditions: list[str] = Field(description=(
        "Checks a test can run on the final state, each one observable and derived from the inputs."))
    tools: list[str] = Field(description="Command-line tools and libraries needed, installable in the image at build time.")
    services: list[str] = Field(default=[], description=(
        "Local services (a database, a web server on localhost) and how they are started; empty when none."))
    cross_file_relations: list[str] = Field(default=[], description=(
        "Relations between inputs the work must follow (keys that join files, references from config to data)."))


class DimensionsOut(BaseModel):
    title: str = Field(description="A short title of the scenario (under 120 characters).")
    goal: str = Field(description="The user objective: what must be achieved, and how success shows.")
    context: str = Field(description="The application setting: who, where, which system and data.")
    capability: str = Field(description="The role of each skill and how the skills depend on each other.")
    state: str = Field(description="The initial, intermediate and final states, with concrete paths and values.")
    io_tools: str = Field(description="Every input and output file with its format, every tool and local service.")
    integrated_scenario: str = Field(description=(
        "The complete scenario C in Markdown, integrating the five dimensions: the shared reference every "
        "later stage (environment, instruction, solution, verifier) builds from."))
    difficulty: Difficulty | None = Field(default=None, description=(
        "How hard the task will be for a capable terminal agent, by the scale in the prompt."))
    difficulty_rationale: str = Field(default="", description=(
        "One or two sentences: which steps, relations or edge cases make it that hard."))


class SolutionReference(BaseModel):
    setup_actions: list[str] = Field(description="What to inspect or prepare before the work (reading inputs, starting services).")
    workflow: list[str] = Field(min_length=1, description="The ordered steps that reach the final state, concrete enough to script.")
    state_transitions: list[str] = Field(description="The state after each significant step, ending in the final state.")


class InstructionReference(BaseModel):
    goal: str = Field(description="What the user asks for, stated as an outcome, not as steps.")
    inputs: list[str] = Field(description="The input files and services the user points to, with their paths.")
    outputs: list[str] = Field(min_length=1, description=(
        "Every output the user expects, with path, format and every detail a test will check (columns, "
        "ordering, rounding, whitespace)."))
    constraints: list[str] = Field(description="Rules the user states (leave inputs unchanged, offline, tool limits).")


class ReferencesOut(BaseModel):
    solution_reference: SolutionReference = Field(description="R_S: how the task is solved, from the initial state.")
    instruction_reference: InstructionReference = Field(description="R_I: what the user asks, from the same initial state.")


class ConsistencyOut(BaseModel):
    consistent: bool = Field(description="True only when both references share the initial state and the target outcome.")
    shared_initial_state: str = Field(description="The initial state both references assume (or the disagreement).")
    shared_outcome: str = Field(description="The outcome both references reach (or the disagreement).")
    issues: list[str] = Field(default=[], description=(
        "Each mismatch: an output the instruction asks that the solution never produces, a detail only one side "
        "states, a path or format that differs. Empty when consistent."))


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
