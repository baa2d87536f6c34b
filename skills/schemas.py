"""Request and response schemas of the skills API (skills.api); they read the ORM objects the
routes return."""
from datetime import datetime

from ninja import Field, Schema


class CategoryRef(Schema):
    id: int
    slug: str
    name: str


class VerdictOut(Schema):
    kind: str
    reason: str
    evidence: dict
    duplicate_of: int | None = Field(None, alias="duplicate_of_id")


class SkillOut(Schema):
    id: int
    key: str
    version_number: int
    name: str
    description: str
    owner: str
    slug: str
    source: str
    source_kind: str
    status: str
    category: CategoryRef | None = None
    category_confidence: float | None = None
    category_source: str
    category_runner_up: CategoryRef | None = None
    category_runner_up_confidence: float | None = None
    safety_level: str  # clean | suspicious | unsafe (docs/skills.md)
    content_hash: str
    ingested_at: datetime
    verdicts: list[str]

    @staticmethod
    def resolve_verdicts(skill) -> list[str]:
        return sorted({v.kind for v in skill.verdicts.all()})


class SkillFileOut(Schema):
    path: str
    size: int
    sha256: str
    is_binary: bool
    has_text: bool

    @staticmethod
    def resolve_has_text(file) -> bool:
        return file.text is not None


class NeighbourOut(Schema):
    id: int
    name: str
    cosine: float


class SkillDetailOut(SkillOut):
    declared_version: str
    license: str
    homepage: str
    frontmatter: dict
    body: str
    safety_report: dict
    private_resources: dict
    required_tools: list
    required_bins: list
    required_env: list
    install: list
    os_support: list
    inputs: list
    outputs: list
    steps: list
    provenance: dict
    files: list[SkillFileOut]
    verdict_details: list[VerdictOut]
    neighbours: list[NeighbourOut]
    versions: list[int]

    @staticmethod
    def resolve_verdict_details(skill):
        return skill.verdicts.all()

    @staticmethod
    def resolve_neighbours(skill) -> list[dict]:
        from .queries import nearest_skills

        return [{"id": n.id, "name": n.name, "cosine": round(c, 4)} for n, c in nearest_skills(skill)]

    @staticmethod
    def resolve_versions(skill) -> list[int]:
        return list(type(skill).objects.filter(key=skill.key).order_by("version_number").values_list("id", flat=True))


class CategoryOut(Schema):
    """A category with the live counts skills.api sets on it (n_skills, share, share_in_parent)."""

    id: int
    slug: str
    name: str
    description: str
    parent: str | None = Field(None, alias="parent.slug")
    skills: int = Field(alias="n_skills")
    global_share: float
    within_parent: float | None
    paper_count: int | None
    paper_global_share: float | None
    in_digest: bool

    @staticmethod
    def resolve_global_share(category) -> float:
        return round(category.share, 6)

    @staticmethod
    def resolve_within_parent(category) -> float | None:
        return None if category.share_in_parent is None else round(category.share_in_parent, 6)


class CategoryOverrideIn(Schema):
    category: str  # slug of a fine-grained category


class ProblemOut(Schema):
    severity: str
    path: str
    field: str
    message: str


class IngestBatchOut(Schema):
    id: int
    source_label: str
    origin: str
    status: str
    total: int
    processed: int
    summary: dict
    message: str
    created_at: datetime
    finished_at: datetime | None
    problems: list[ProblemOut]

    @staticmethod
    def resolve_problems(batch):
        return batch.problems.order_by("severity", "path", "id")[:1000]
