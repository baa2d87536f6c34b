"""Output schemas of the task-construction LLM steps (pydantic; the JSON schema goes to the server).

Class names are the schema names the server sees, so each step has its own class."""
from typing import Literal

from pydantic import BaseModel, Field


class ManifestFile(BaseModel):
    path: str = Field(min_length=1)  # absolute path inside the container
    purpose: str
    format: str = ""


class ManifestOut(BaseModel):
    """The environment agent's plan: what the container must hold before the task starts."""

    workdir: str = "/app"
    directories: list[str] = []
    files: list[ManifestFile] = Field(min_length=1)
    services: list[str] = []
    dependencies: list[str] = []
    distractors: list[str] = []  # records that look relevant but must not be used
    cross_file_relations: list[str] = []


class FixtureFile(BaseModel):
    path: str = Field(min_length=1)  # relative to environment/, e.g. "data/orders.csv"
    content: str


class MaterializationOut(BaseModel):
    dockerfile: str = Field(min_length=10)
    files: list[FixtureFile] = []
    init_script: str = ""  # environment/init.sh, run by the Dockerfile
    init_checks: list[str] = []  # shell commands that must exit 0 in the built environment


class EnvironmentRepairOut(MaterializationOut):
    diagnosis: str


class InstructionOut(BaseModel):
    instruction: str = Field(min_length=10)


class SolutionOut(BaseModel):
    solve_sh: str = Field(min_length=5)


class VerifierOut(BaseModel):
    test_sh: str = Field(min_length=5)
    test_py: str = Field(min_length=5)  # tests/test_outputs.py


class ArtifactsOut(BaseModel):
    """The JOINT strategy: all three artifacts in one call."""

    instruction: str = Field(min_length=10)
    solve_sh: str = Field(min_length=5)
    test_sh: str = Field(min_length=5)
    test_py: str = Field(min_length=5)


class RouterOut(BaseModel):
    artifact: Literal["environment", "instruction", "solution", "verifier"]
    reason: str
