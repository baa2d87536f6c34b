"""Output schemas of the task-construction LLM steps (pydantic; the JSON schema goes to the server).

Class names are the schema names the server sees, so each step has its own class. Every field
carries a description: the server passes the schema to the model, and a strong model reads the
descriptions as part of the instructions (docs/prompts.md lists which validator rule each serves)."""
from typing import Literal

from pydantic import BaseModel, Field


class ManifestFile(BaseModel):
    path: str = Field(min_length=1, description="Absolute path inside the container, under the working directory "
                                                "unless the task is about another location.")
    purpose: str = Field(description="What the file is for in the task: an input, a distractor, a config the "
                                     "solution must honour, a file that must stay unchanged.")
    format: str = Field("", description="Its format (CSV with its columns, JSON, log line format, SQLite, ...).")


class ManifestOut(BaseModel):
    """The environment agent's plan: what the container must hold before the task starts."""

    workdir: str = Field("/app", description="The working directory the agent starts in (absolute).")
    directories: list[str] = Field([], description="Directories that must exist at the start (absolute paths).")
    files: list[ManifestFile] = Field(min_length=1, description="Every file the task starts with: inputs, "
                                      "configuration, distractors. Never an expected output or an answer.")
    services: list[str] = Field([], description="Services the task needs running, each with how it is started "
                                                 "(solve.sh and test.sh start them: sandboxes replace ENTRYPOINT).")
    dependencies: list[str] = Field([], description="Debian bookworm packages or pip packages the environment "
                                                    "installs at build time (nothing is installed at grade time).")
    distractors: list[str] = Field([], description="Records or files that look relevant but must not be used, "
                                                   "so pattern matching alone cannot solve the task.")
    cross_file_relations: list[str] = Field([], description="Relations between files that a solution has to follow "
                                                            "(ids joining two tables, a config naming an input).")


class FixtureFile(BaseModel):
    path: str = Field(min_length=1, description="Path relative to environment/ (the build context), e.g. "
                                                "data/orders.csv; never under solution/ or tests/.")
    content: str = Field(description="The whole file as UTF-8 text: realistic data with distractor records.")


class MaterializationOut(BaseModel):
    dockerfile: str = Field(min_length=10, description="environment/Dockerfile: starts with FROM the given base "
                            "image, sets WORKDIR, COPYs the fixture files, runs init.sh if there is one; no "
                            "solution, tests, expected outputs or secrets; no ADD of URLs.")
    files: list[FixtureFile] = Field([], description="The build context's fixture files.")
    init_script: str = Field("", description="environment/init.sh, for setup data files cannot express (a git "
                             "history, a database, permissions). It only runs if the Dockerfile COPYs it and RUNs "
                             "it; it runs at build time, so it cannot start a service for the task.")
    init_checks: list[str] = Field([], description="Shell commands that must exit 0 in a fresh container of the "
                                   "built image (inputs exist and parse, tools are installed); at most 20.")


class EnvironmentRepairOut(MaterializationOut):
    diagnosis: str = Field(description="One paragraph: what failed, why, and what this answer changes.")


class InstructionOut(BaseModel):
    instruction: str = Field(min_length=10, description="instruction.md: the goal, the inputs (absolute paths "
                             "that exist in e0), every output with its exact format, ordering and whitespace, the "
                             "files that must stay unchanged and the constraints. Never how to solve it.")


class PartialSolution(BaseModel):
    name: str = Field(min_length=1, description="A short slug for this partial solution, e.g. "
                                                "skips-cancelled-filter.")
    stops_before: str = Field(min_length=1, description="The requirement of the instruction this script "
                                                        "leaves undone (quote it).")
    solve_sh: str = Field(min_length=5, description="A complete bash script that does the work up to that "
                          "requirement and then stops (or does that requirement plausibly but wrongly). A "
                          "correct verifier gives it reward 0.")


class SolutionOut(BaseModel):
    solve_sh: str = Field(min_length=5, description="solution/solve.sh: #!/bin/bash, set -euo pipefail, runs "
                          "offline as root from the working directory, derives every output from the inputs, "
                          "starts any service it needs, and never touches /logs/verifier or tests/.")
    partial_solutions: list[PartialSolution] = Field([], max_length=3, description="Two or three meaningful "
                                                     "partial solutions, each stopping before a different "
                                                     "requirement; validation runs them and a verifier that "
                                                     "passes one is too weak.")


class VerifierOut(BaseModel):
    test_sh: str = Field(min_length=5, description="tests/test.sh: runs pytest offline on /tests/test_outputs.py "
                         "with --junitxml=/logs/verifier/junit.xml and always writes 1 or 0 to "
                         "/logs/verifier/reward.txt (no set -e that could skip it); starts any service the "
                         "tests need; installs and downloads nothing.")
    test_py: str = Field(min_length=5, description="tests/test_outputs.py: one test per stated requirement, each "
                         "failing on e0; expected values computed from the inputs at test time; no clock, no "
                         "randomness, no network.")


class ArtifactsOut(BaseModel):
    """The JOINT strategy: all three artifacts in one call."""

    instruction: str = Field(min_length=10, description=InstructionOut.model_fields["instruction"].description)
    solve_sh: str = Field(min_length=5, description=SolutionOut.model_fields["solve_sh"].description)
    test_sh: str = Field(min_length=5, description=VerifierOut.model_fields["test_sh"].description)
    test_py: str = Field(min_length=5, description=VerifierOut.model_fields["test_py"].description)
    partial_solutions: list[PartialSolution] = Field(
        [], max_length=3, description=SolutionOut.model_fields["partial_solutions"].description)


class RouterOut(BaseModel):
    artifact: Literal["environment", "instruction", "solution", "verifier"] = Field(
        description="The one artifact whose regeneration fixes the failure.")
    reason: str = Field(description="Why, citing the evidence (test names, messages, output lines).")


# --- targeted repair (tasks/repair.py): each answer also says what was wrong and what changed -----

class InstructionRepairOut(InstructionOut):
    diagnosis: str = Field(description="What in the instruction the evidence shows to be wrong or missing (a "
                           "path, format or requirement the tests check but the instruction does not state), and "
                           "what this version changes.")


class SolutionRepairOut(SolutionOut):
    diagnosis: str = Field(description="Why the reference solution failed, citing the evidence (the failing "
                           "command or test and its message), and what this version changes.")


class AssertionChange(BaseModel):
    test: str = Field(min_length=1, description="The test function this change is in.")
    change: Literal["added", "strengthened", "corrected", "relaxed", "removed"] = Field(
        description="What happened to its assertion: a new check, a stricter one, a wrong expected value "
                    "fixed, a looser one, or none any more.")
    justification: str = Field(min_length=1, description="For corrected, relaxed and removed: the sentence "
                               "of the instruction or the fact of e0 the old assertion contradicted. Making "
                               "the oracle pass is never a justification.")


class VerifierRepairOut(VerifierOut):
    blame: Literal["verifier", "solution"] = Field(
        description="verifier: the tests contradict the instruction or the environment, and test_sh/test_py "
                    "below fix them. solution: the tests are right and the reference solution is wrong; "
                    "test_sh/test_py are then returned unchanged and the solution is repaired instead.")
    diagnosis: str = Field(description="What the evidence shows is wrong, citing test names and messages.")
    assertion_changes: list[AssertionChange] = Field([], description="Every assertion added, strengthened, "
                                                     "corrected, relaxed or removed, each with its "
                                                     "justification; empty when blame is solution.")
