from datetime import datetime

from ninja import Schema


class CategoryRef(Schema):
    id: int
    slug: str
    name: str


class VerdictOut(Schema):
    kind: str
    reason: str
    evidence: dict
    duplicate_of: int | None = None


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
    content_hash: str
    ingested_at: datetime
    verdicts: list[str]


class SkillFileOut(Schema):
    path: str
    size: int
    sha256: str
    is_binary: bool
    has_text: bool


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


class CategoryOut(Schema):
    id: int
    slug: str
    name: str
    description: str
    parent: str | None
    skills: int
    global_share: float
    within_parent: float | None
    paper_count: int | None
    paper_global_share: float | None
    in_digest: bool


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
