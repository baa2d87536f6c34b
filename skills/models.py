"""The skill corpus: skills (one row per version), their files, filter verdicts and the taxonomy."""
import numpy as np
from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from facet_site import leases


class Category(models.Model):
    """A node of the paper's taxonomy: 5 top-level families, each with fine-grained categories."""

    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=120, unique=True)
    description = models.TextField(help_text="Used for zero-shot classification by embedding similarity.")
    position = models.PositiveIntegerField(default=0)
    paper_count = models.PositiveIntegerField(null=True, blank=True)
    paper_global_share = models.FloatField(null=True, blank=True)
    paper_within_parent = models.FloatField(null=True, blank=True)
    in_digest = models.BooleanField(
        default=True, help_text="False for categories the paper's digest omits, which we inferred."
    )

    class Meta:
        ordering = ["parent__position", "position"]
        verbose_name_plural = "categories"

    def __str__(self):
        return self.name

    @property
    def is_top_level(self) -> bool:
        return self.parent_id is None


class SkillStatus(models.TextChoices):
    ACCEPTED = "accepted", "Accepted"
    # Suspicious by the safety scan: kept out of synthesis until a reviewer clears or rejects it.
    HELD = "held", "Held for safety review"
    REJECTED = "rejected", "Rejected"


class CategorySource(models.TextChoices):
    EMBEDDING = "embedding", "Embedding similarity"
    CLASSIFIER = "classifier", "Trained classifier"
    OVERRIDE = "override", "Reviewer override"
    # the optional LLM stage of a synthesis run (scenarios/classifying.py); a later override wins
    LLM = "llm", "LLM"


class SafetyLevel(models.TextChoices):
    CLEAN = "clean", "Clean"
    SUSPICIOUS = "suspicious", "Suspicious"
    UNSAFE = "unsafe", "Unsafe"


class SafetyReview(models.TextChoices):
    NONE = "", "Not reviewed"
    CLEARED = "cleared", "Cleared by a reviewer"
    REJECTED = "rejected", "Rejected by a reviewer"


class SkillQuerySet(models.QuerySet):
    def current(self):
        return self.filter(is_current=True)

    def accepted(self):
        """Skills synthesis may use: no verdict, and clean (or cleared by a reviewer)."""
        return self.filter(status=SkillStatus.ACCEPTED)

    def held(self):
        """The safety review queue: suspicious skills no reviewer has decided on yet."""
        return self.filter(status=SkillStatus.HELD)


class Skill(models.Model):
    """One version of one skill. Re-ingesting a changed skill adds a version and keeps the old one."""

    key = models.CharField(max_length=400, help_text="Identity across versions, e.g. clawhub:owner/slug.")
    version_number = models.PositiveIntegerField(default=1)
    is_current = models.BooleanField(default=True)
    previous_version = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="next_version"
    )

    source = models.CharField(max_length=200, help_text="Where the batch came from: a corpus or archive name.")
    source_kind = models.CharField(max_length=20)  # clawhub | directory | git
    owner = models.CharField(max_length=200, blank=True)
    slug = models.CharField(max_length=200, blank=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    declared_version = models.CharField(max_length=100, blank=True)
    license = models.CharField(max_length=200, blank=True)
    homepage = models.URLField(max_length=500, blank=True)

    frontmatter = models.JSONField(default=dict, blank=True)
    body = models.TextField(blank=True)
    required_tools = models.JSONField(default=list, blank=True)
    required_bins = models.JSONField(default=list, blank=True)
    required_env = models.JSONField(default=list, blank=True)
    install = models.JSONField(default=list, blank=True)
    os_support = models.JSONField(default=list, blank=True)
    inputs = models.JSONField(default=list, blank=True)
    outputs = models.JSONField(default=list, blank=True)
    steps = models.JSONField(default=list, blank=True)
    provenance = models.JSONField(default=dict, blank=True)
    content_hash = models.CharField(max_length=64)

    status = models.CharField(
        max_length=10, choices=SkillStatus.choices, default=SkillStatus.ACCEPTED,
        help_text="Denormalised from the verdicts: rejected when any verdict exists.",
    )
    category = models.ForeignKey(Category, null=True, blank=True, on_delete=models.SET_NULL, related_name="skills")
    category_confidence = models.FloatField(null=True, blank=True)
    category_source = models.CharField(max_length=10, choices=CategorySource.choices, blank=True)
    category_overridden_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    category_overridden_at = models.DateTimeField(null=True, blank=True)
    category_runner_up = models.ForeignKey(Category, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    category_runner_up_confidence = models.FloatField(null=True, blank=True)

    # The safety scan (facet_site/lib/skill_safety.py) of every text file: level and report.
    safety_level = models.CharField(max_length=10, choices=SafetyLevel.choices, default=SafetyLevel.CLEAN)
    safety_report = models.JSONField(default=dict, blank=True)
    safety_review = models.CharField(max_length=10, choices=SafetyReview.choices, blank=True, default="")
    safety_reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    safety_reviewed_at = models.DateTimeField(null=True, blank=True)
    safety_review_note = models.TextField(blank=True)
    # Credentials the skill mentions, required or optional, and where (skill_filters.requirements).
    private_resources = models.JSONField(default=dict, blank=True)

    # float32 little-endian, L2-normalised; kept as bytes so both SQLite and PostgreSQL store it.
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    embedding_model = models.CharField(max_length=100, blank=True)
    # Name, description, tools and steps in one column: the full-text index is built over it.
    search_document = models.TextField(blank=True, editable=False)

    batch = models.ForeignKey("IngestBatch", null=True, blank=True, on_delete=models.SET_NULL, related_name="skills")
    ingested_at = models.DateTimeField(auto_now_add=True)

    objects = SkillQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["key", "version_number"], name="skill_unique_version"),
            models.UniqueConstraint(fields=["key"], condition=Q(is_current=True), name="skill_one_current_version"),
        ]
        indexes = [
            # the skills list: current skills filtered by status and category, sorted by name
            models.Index(fields=["is_current", "status", "category", "name"], name="skill_list_idx"),
            # the taxonomy page's data stamp (facet_site/stamps.py) reads the newest override
            models.Index(fields=["category_overridden_at"], name="skill_override_time_idx"),
            # the low-confidence queue on the Taxonomy page: current accepted skills by confidence
            models.Index(fields=["is_current", "status", "category_confidence"], name="skill_confidence_idx"),
            # publisher taint: other current skills of an owner with an unsafe skill
            models.Index(fields=["owner", "safety_level"], name="skill_owner_safety_idx"),
            # exact-duplicate detection during ingest
            models.Index(fields=["content_hash"], name="skill_content_hash_idx"),
            # filter by owner and source on the list page
            models.Index(fields=["owner"], name="skill_owner_idx"),
            models.Index(fields=["source"], name="skill_source_idx"),
        ]

    def __str__(self):
        return f"{self.name} (v{self.version_number})"

    @property
    def vector(self) -> np.ndarray | None:
        if not self.embedding:
            return None
        return np.frombuffer(bytes(self.embedding), dtype=np.float32)

    @property
    def display_owner(self) -> str:
        return self.owner or "—"

    def clear_safety(self, *, user, note: str = "") -> bool:
        """A reviewer clears a held skill; it goes back to accepted. False when it is no longer held."""
        done = Skill.objects.filter(pk=self.pk, status=SkillStatus.HELD).update(
            status=SkillStatus.ACCEPTED, safety_review=SafetyReview.CLEARED, safety_reviewed_by=user,
            safety_reviewed_at=timezone.now(), safety_review_note=note[:2000],
        )
        self.refresh_from_db()
        return bool(done)


class SkillFile(models.Model):
    """A supporting file of a skill (references/, scripts/, assets). Text kept only when small."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=500)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    text = models.TextField(null=True, blank=True)
    is_binary = models.BooleanField(default=False)

    class Meta:
        ordering = ["path"]
        constraints = [models.UniqueConstraint(fields=["skill", "path"], name="skillfile_unique_path")]

    def __str__(self):
        return self.path


class VerdictKind(models.TextChoices):
    UNSAFE = "unsafe", "Unsafe instructions"
    SAFETY_REVIEW = "safety_review", "Rejected in safety review"
    PRIVATE = "private", "Depends on private resources"
    NON_ACTIONABLE = "non_actionable", "Not actionable in a terminal"
    UNREADABLE = "unreadable", "Unreadable"
    DUPLICATE = "duplicate", "Exact duplicate"
    NEAR_DUPLICATE = "near_duplicate", "Near-duplicate"


class Verdict(models.Model):
    """Why a filter rejected a skill. The pipeline adds verdicts; it never deletes skills."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="verdicts")
    kind = models.CharField(max_length=20, choices=VerdictKind.choices)
    reason = models.TextField()
    evidence = models.JSONField(default=dict, blank=True)
    duplicate_of = models.ForeignKey(Skill, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["kind", "id"]
        indexes = [
            # the skills list filtered by verdict kind
            models.Index(fields=["kind", "skill"], name="verdict_kind_idx"),
        ]

    def __str__(self):
        return f"{self.get_kind_display()}: {self.reason[:60]}"


class IngestBatchStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Finished"
    FAILED = "failed", "Failed"


class IngestBatch(models.Model):
    """One ingest of a source (CLI path, upload or API). Its progress is read by the page that polls it."""

    source_label = models.CharField(max_length=200)
    source_path = models.CharField(max_length=1000)
    origin = models.CharField(max_length=10, default="cli")  # cli | upload | api
    status = models.CharField(max_length=10, choices=IngestBatchStatus.choices, default=IngestBatchStatus.QUEUED)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # stamped by the running worker (facet_site/leases.py); silent for a lease: its worker died
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    total = models.PositiveIntegerField(default=0)
    processed = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "ingest batches"

    def __str__(self):
        return f"Ingest #{self.pk} of {self.source_label}"

    @classmethod
    def claim(cls, batch_id: int) -> bool:
        """Take a queued batch, or a running one whose worker died (its lease ran out)."""
        return leases.claim(cls, batch_id, queued=IngestBatchStatus.QUEUED, running=IngestBatchStatus.RUNNING,
                            started_at=timezone.now())

    @classmethod
    def retry(cls, batch_id: int) -> bool:
        """A failed batch, or a running one whose worker died, goes back to the queue (the Retry
        button). Ingest is idempotent, so skills stored by the earlier attempt are not stored twice."""
        return leases.retry(cls, batch_id, retryable=IngestBatchStatus.FAILED, queued=IngestBatchStatus.QUEUED,
                            running=IngestBatchStatus.RUNNING, finished_at=None, message="")

    @property
    def is_stalled(self) -> bool:
        return leases.is_stalled(self, IngestBatchStatus.RUNNING)

    @property
    def is_finished(self) -> bool:
        return self.status in {IngestBatchStatus.SUCCEEDED, IngestBatchStatus.FAILED}

    @property
    def percent(self) -> int:
        if self.is_finished:
            return 100
        return int(100 * self.processed / self.total) if self.total else 0


class ProblemSeverity(models.TextChoices):
    ERROR = "error", "Error: not ingested"
    WARNING = "warning", "Warning: ingested with a fallback"


class IngestProblem(models.Model):
    """A file of a batch that could not become a skill (error), or became one only with a
    fallback such as a name taken from the first heading (warning), with a clear message."""

    batch = models.ForeignKey(IngestBatch, on_delete=models.CASCADE, related_name="problems")
    severity = models.CharField(max_length=10, choices=ProblemSeverity.choices, default=ProblemSeverity.ERROR)
    path = models.CharField(max_length=1000)
    field = models.CharField(max_length=100, blank=True)
    message = models.TextField()

    class Meta:
        ordering = ["path", "id"]

    def __str__(self):
        return f"{self.path}: {self.message}"
