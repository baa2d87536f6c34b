"""Response schemas of the tasks API (tasks.api); they read the ORM objects the routes return."""
from datetime import datetime

from ninja import Field, Schema


class TaskOut(Schema):
    id: int
    name: str
    status: str
    step: str
    strategy: str
    run_id: int | None = None
    scenario_id: int | None = None
    imported: bool
    current_version_id: int | None = None
    current_hash: str | None = Field(None, alias="current_version.content_hash")
    discard_reason: str
    message: str
    created_at: datetime
    updated_at: datetime


class TestResultOut(Schema):
    name: str
    outcome: str
    message: str


class TrialOut(Schema):
    id: int
    kind: str
    index: int
    reward: float | None = None
    passed: bool
    failure: str
    reason: str
    solution_exit_code: int | None = None
    seconds: float
    solution_seconds: float | None = None
    verifier_seconds: float
    peak_memory_bytes: int | None = None
    fs_diff: dict | None = None
    tests: list[TestResultOut]


class ValidationOut(Schema):
    id: int
    version_id: int
    status: str
    accepted: bool | None = None
    failure: str
    reason: str
    image_tag: str
    build_cached: bool | None = None
    build_seconds: float
    total_seconds: float
    static_findings: list[dict]
    created_at: datetime
    finished_at: datetime | None = None
    trials: list[TrialOut] = []


class VersionOut(Schema):
    id: int
    number: int
    content_hash: str
    parent_id: int | None = None
    created_by_repair_id: int | None = None
    prompt_versions: dict
    created_at: datetime
    files: list[str]
    validations: list[ValidationOut]

    @staticmethod
    def resolve_files(version) -> list[str]:
        return sorted({*version.files, *(version.binary_files or {})})  # binary files too (issue 17)

    @staticmethod
    def resolve_validations(version):
        return version.validations.order_by("id").prefetch_related("trials__tests")


class RepairOut(Schema):
    id: int
    number: int
    artifact: str
    routed_by: str
    router_reason: str
    failure: str
    failure_reason: str
    from_version_id: int
    to_version_id: int | None = None
    outcome: str


class BuildOut(Schema):
    attempt: int
    outcome: str
    reason: str
    image_tag: str
    cached: bool
    seconds: float


class EnvironmentOut(Schema):
    id: int
    status: str
    repair_count: int
    image_tag: str
    manifest: dict
    builds: list[BuildOut]


class TaskDetailOut(TaskOut):
    environment: EnvironmentOut | None = None
    versions: list[VersionOut]
    repairs: list[RepairOut]

    @staticmethod
    def resolve_versions(task):
        return task.versions.order_by("number")

    @staticmethod
    def resolve_repairs(task):
        return task.repairs.order_by("number")


class FunnelRowOut(Schema):
    stage: str
    label: str
    count: int
    retention: float | None = None
