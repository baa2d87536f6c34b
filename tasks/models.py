"""Executable-state-grounded task construction (FACET stage 3): environments and their builds,
tasks and their immutable versions, validations with their trials and per-test results, and the
targeted repairs that link one version to the next.

Trials, test results, builds, validations and repair rounds are append-only. A task's `status`
and `current_version` are the one denormalised summary of them, moved only by the single-row
transitions below (Task.claim, Task.move_to, Task.release).

Rollouts are in rollout_models.py, dataset jobs in dataset_models.py and team review in
team_models.py, each imported here so Django sees one app.
"""
from django.conf import settings as django_settings
from django.db import models
from django.utils import timezone

from facet_site import leases


class EnvironmentStatus(models.TextChoices):
    PLANNED = "planned", "Planned"  # no files yet
    MATERIALIZED = "materialized", "Materialized"  # files written, not built
    BUILT = "built", "Built"  # image built, init checks passed, e0 captured
    FAILED = "failed", "Failed"  # out of environment repairs


class Environment(models.Model):
    """The environment spec E of one task: the manifest (plan) and the files materialized from it
    (Dockerfile, fixtures, init script), the image they built and the realized initial state e0."""

    scenario = models.ForeignKey("scenarios.Scenario", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="environments")
    manifest = models.JSONField(default=dict, blank=True)  # directories, files, services, dependencies
    files = models.JSONField(default=dict, blank=True)  # environment/ as path -> text (Dockerfile, ...)
    init_checks = models.JSONField(default=list, blank=True)  # shell commands that must exit 0 in e0
    status = models.CharField(max_length=15, choices=EnvironmentStatus.choices, default=EnvironmentStatus.PLANNED)
    repair_count = models.PositiveSmallIntegerField(default=0)
    image_tag = models.CharField(max_length=200, blank=True)
    initial_state = models.JSONField(null=True, blank=True)  # e0, validation.capture_initial_state
    prompt_versions = models.JSONField(default=dict, blank=True)  # stage -> prompt version
    llm_calls = models.JSONField(default=dict, blank=True)  # stage -> LLMCall id (scenarios.LLMCall)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"Environment #{self.pk}"


class BuildOutcome(models.TextChoices):
    SUCCEEDED = "succeeded", "Built"
    LINT_FAILED = "lint_failed", "Rejected before building"
    BUILD_FAILED = "build_failed", "Build failed"
    TIMEOUT = "timeout", "Build timed out"
    INIT_FAILED = "init_failed", "Initialization checks failed"


class EnvironmentBuild(models.Model):
    """One build attempt of an environment (append-only). The first attempt's row is the
    funnel's "first-build log"; the files it built are kept so a repair's diff can be read."""

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="builds")
    attempt = models.PositiveSmallIntegerField()
    files = models.JSONField(default=dict)  # the environment/ files this attempt built
    outcome = models.CharField(max_length=15, choices=BuildOutcome.choices)
    reason = models.TextField(blank=True)
    log = models.TextField(blank=True)  # capped; the full log is in log_path
    log_path = models.CharField(max_length=500, blank=True)
    image_tag = models.CharField(max_length=200, blank=True)
    cached = models.BooleanField(default=False)
    seconds = models.FloatField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["environment_id", "attempt"]
        constraints = [models.UniqueConstraint(fields=["environment", "attempt"], name="envbuild_unique_attempt")]


class TaskStatus(models.TextChoices):
    CONSTRUCTING = "constructing", "Constructing"
    VALIDATING = "validating", "Validating"
    REPAIRING = "repairing", "Repairing"
    VALIDATED = "validated", "Validated"
    DISCARDED = "discarded", "Discarded"
    FAILED = "failed", "Failed"
    WAITING_FOR_DOCKER = "waiting_for_docker", "Waiting for a Docker Engine"
    # an imported task whose base image is not on this machine (tasks/images.py): not its fault
    WAITING_FOR_IMAGE = "waiting_for_image", "Waiting for its image"


FINAL_STATUSES = [TaskStatus.VALIDATED, TaskStatus.DISCARDED, TaskStatus.FAILED]


class Step(models.TextChoices):
    """Where construction stands; each step is one job on the LLM or the Docker queue."""

    ENVIRONMENT = "environment", "Manifest and materialization"  # llm
    ENVIRONMENT_REPAIR = "environment_repair", "Environment repair"  # llm
    BUILD = "build", "Build, init checks, e0"  # docker
    ARTIFACTS = "artifacts", "Instruction, solution, verifier"  # llm
    VALIDATE = "validate", "Validation"  # docker
    REPAIR = "repair", "Targeted repair"  # llm
    DONE = "done", "Done"


LLM_STEPS = {Step.ENVIRONMENT, Step.ENVIRONMENT_REPAIR, Step.ARTIFACTS, Step.REPAIR}
DOCKER_STEPS = {Step.BUILD, Step.VALIDATE}
# statuses in which a task still has a construction step to do
OPEN_STATUSES = [TaskStatus.CONSTRUCTING, TaskStatus.VALIDATING, TaskStatus.REPAIRING]
# the status a task shows while it is at a step
STATUS_FOR_STEP = {
    Step.ENVIRONMENT: TaskStatus.CONSTRUCTING, Step.ENVIRONMENT_REPAIR: TaskStatus.CONSTRUCTING,
    Step.BUILD: TaskStatus.CONSTRUCTING, Step.ARTIFACTS: TaskStatus.CONSTRUCTING,
    Step.VALIDATE: TaskStatus.VALIDATING, Step.REPAIR: TaskStatus.REPAIRING,
}


class ReviewState(models.TextChoices):
    """Where human review of the task's current version stands (from the decisions on its hash)."""

    UNREVIEWED = "unreviewed", "Not reviewed"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    NEEDS_FIX = "needs_fix", "Needs fix"
    # tasks that need several reviews (tasks.consensus): some but not all given; or they disagree
    IN_REVIEW = "in_review", "Awaiting reviews"
    DISPUTED = "disputed", "In adjudication"


class Task(models.Model):
    """A task bundle T = (I, E, S, V, M) under construction, or an imported one."""

    scenario = models.ForeignKey("scenarios.Scenario", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="tasks")
    run = models.ForeignKey("scenarios.SynthesisRun", null=True, blank=True, on_delete=models.SET_NULL,
                            related_name="tasks")
    environment = models.OneToOneField(Environment, null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="task")
    strategy = models.CharField(max_length=10, default="forward")  # scenarios.models.Strategy
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=20, choices=TaskStatus.choices, default=TaskStatus.CONSTRUCTING)
    step = models.CharField(max_length=20, choices=Step.choices, default=Step.ENVIRONMENT)
    current_version = models.ForeignKey("TaskVersion", null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="+")
    discard_reason = models.TextField(blank=True)
    message = models.TextField(blank=True)  # the last thing worth telling a reviewer (errors, waiting)
    # set while one worker holds the task's current step; cleared when the step is recorded
    claimed_at = models.DateTimeField(null=True, blank=True)
    imported = models.BooleanField(default=False)
    source = models.CharField(max_length=300, blank=True)  # imported: the dataset, archive or directory it came from

    # The review summary, denormalised in one place (tasks.summary.refresh_summary) from the
    # decisions, the current version's trials, the repairs and the rollouts, so that the task list
    # filters and sorts 10,000+ tasks on indexed columns. A test checks it against the records.
    review_state = models.CharField(max_length=12, choices=ReviewState.choices, default=ReviewState.UNREVIEWED)
    n_tests = models.PositiveSmallIntegerField(null=True, blank=True)  # tests in the current version's oracle trial
    repair_rounds = models.PositiveSmallIntegerField(default=0)
    pass_rate = models.FloatField(null=True, blank=True)  # rollouts of the current version: passed / finished
    n_rollouts = models.PositiveIntegerField(default=0)
    search_document = models.TextField(blank=True, editable=False)  # name + current instruction, for search
    # Over every finished validation of the current version (a later lucky pass does not hide an
    # earlier flaky fail): the check ids of its error-level findings, comma-delimited on both ends
    # so the list's "by kind" filter is one LIKE, and its failure type (empty: none failed).
    finding_kinds = models.CharField(max_length=500, blank=True)
    validation_failure = models.CharField(max_length=40, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # one constructed task per scenario; imported tasks have none
            models.UniqueConstraint(fields=["scenario"], condition=models.Q(scenario__isnull=False),
                                    name="task_unique_scenario"),
        ]
        indexes = [
            models.Index(fields=["run", "status"], name="task_run_status_idx"),  # funnel and run progress
            models.Index(fields=["status", "step"], name="task_status_step_idx"),  # task list filter, resume
            models.Index(fields=["review_state", "status"], name="task_review_state_idx"),  # review queue, list
        ]

    def __str__(self):
        return self.name or f"Task #{self.pk}"

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    @classmethod
    def claim(cls, task_id: int, step: str) -> bool:
        """Take the task for `step` with a conditional UPDATE: of two workers, one wins."""
        return bool(cls.objects.filter(pk=task_id, step=step, claimed_at__isnull=True,
                                       status__in=OPEN_STATUSES).update(claimed_at=timezone.now()))

    def move_to(self, step: str, *, status: str | None = None, **fields) -> None:
        """Record a step's outcome (the next step, its status, other columns) and release the claim."""
        status = status or STATUS_FOR_STEP.get(step, TaskStatus.CONSTRUCTING)
        # update() skips auto_now, hence updated_at by hand
        Task.objects.filter(pk=self.pk).update(step=step, status=status, claimed_at=None, updated_at=timezone.now(),
                                               **fields)
        if "current_version" in fields or status in FINAL_STATUSES:
            # The task list's summary columns are this row's own, derived from the new version or
            # final status; tasks.summary imports this module, hence the import here.
            from .summary import refresh_summary

            refresh_summary(self.pk)

    def release(self, message: str, *, status: str | None = None) -> None:
        """Give the claim back without moving on (waiting for Docker, a transient error)."""
        fields = {"claimed_at": None, "message": message[:5000], "updated_at": timezone.now()}
        if status:
            fields["status"] = status
        Task.objects.filter(pk=self.pk).update(**fields)

    @classmethod
    def free_stalled(cls, task_id: int | None = None, *,
                     message: str = "Its worker stopped answering; queued again.") -> list[int]:
        """Tasks whose step's worker died (the claim, renewed while the step runs by tasks/jobs.py,
        is older than a lease) are given back for the next advance to queue their step again: by
        beat for every task, by the task page's Resume for one (`task_id`). A construction
        validation that worker was running goes back to the queue with its task, so the step takes
        it up again instead of validating anew; a task whose validation still beats is left alone.
        Each is a conditional UPDATE: of two beats (or a beat and a click), one frees a task.
        Returns the tasks freed."""
        live = Validation.objects.filter(version__task=models.OuterRef("pk"), status=ValidationStatus.RUNNING,
                                         heartbeat_at__gte=leases.cutoff())
        stalled = models.Q(status__in=OPEN_STATUSES) & leases.expired("claimed_at")
        candidates = cls.objects.filter(stalled).exclude(models.Exists(live))
        if task_id is not None:
            candidates = candidates.filter(pk=task_id)
        freed = [pk for pk in candidates.values_list("pk", flat=True)
                 if cls.objects.filter(stalled, pk=pk).update(claimed_at=None, updated_at=timezone.now(), message=message)]
        Validation.objects.filter(version__task_id__in=freed, status=ValidationStatus.RUNNING,
                                  recheck__isnull=True).update(status=ValidationStatus.QUEUED)
        return freed

    @classmethod
    def resume(cls, task_id: int, step: str) -> int:
        """A task that waited for Docker goes back to its step's status (a conditional UPDATE)."""
        return cls.objects.filter(pk=task_id, status=TaskStatus.WAITING_FOR_DOCKER).update(
            status=STATUS_FOR_STEP.get(step, TaskStatus.CONSTRUCTING), claimed_at=None, message="")

    @classmethod
    def retry_construction(cls, task_id: int, *, step: str, message: str) -> bool:
        """A constructed task whose step failed goes back to that step (the task page's Retry,
        tasks/task_recovery.py). A conditional UPDATE on its failed status: of two clicks, one wins."""
        return bool(cls.objects.filter(pk=task_id, status=TaskStatus.FAILED, imported=False, run__isnull=False).update(
            step=step, status=STATUS_FOR_STEP.get(step, TaskStatus.CONSTRUCTING), claimed_at=None,
            message=message[:5000], updated_at=timezone.now()))


class ArtifactKind(models.TextChoices):
    ENVIRONMENT = "environment", "Environment"
    INSTRUCTION = "instruction", "Instruction"
    SOLUTION = "solution", "Solution"
    VERIFIER = "verifier", "Verifier"


class TaskVersion(models.Model):
    """An immutable task version, identified by harbor.content_hash over all of its files.
    `files` holds the whole task directory as path -> text, instruction.md and task.toml included."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveSmallIntegerField()
    content_hash = models.CharField(max_length=80, unique=True)
    files = models.JSONField()
    # Binary files (not UTF-8 text) as path -> TaskBlob sha256; the bytes live in TaskBlob.
    binary_files = models.JSONField(default=dict, blank=True)
    # An imported task's layout, kept so its export is byte-faithful: modes that differ from facet's
    # default (0755 *.sh, else 0644) and its empty directories (null: a facet-made task).
    file_modes = models.JSONField(default=dict, blank=True)
    empty_dirs = models.JSONField(null=True, blank=True, default=None)
    # What import found without Docker (static checks, conversion warnings such as a missing
    # solve.sh): [{"check", "severity", "message"}], shown on the task page before any validation.
    import_findings = models.JSONField(default=list, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    created_by_repair = models.ForeignKey("RepairRound", null=True, blank=True, on_delete=models.SET_NULL,
                                          related_name="+")
    prompt_versions = models.JSONField(default=dict, blank=True)  # artifact -> prompt version
    llm_calls = models.JSONField(default=dict, blank=True)  # artifact -> LLMCall id
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task_id", "number"]
        constraints = [models.UniqueConstraint(fields=["task", "number"], name="taskversion_unique_number")]

    def __str__(self):
        return f"{self.task} v{self.number} ({self.content_hash[7:19]})"


class TaskBlob(models.Model):
    """The bytes of one binary task file, stored once however many versions and tasks hold it
    (content-addressed). Small ones sit in the row; larger ones under DATA_DIR/blobs/ (tasks.blobs)."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.BigIntegerField()
    media_type = models.CharField(max_length=100)
    data = models.BinaryField(null=True, blank=True)  # null: the bytes are on disk
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"{self.sha256[:12]} ({self.size} bytes, {self.media_type})"


class ValidationStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    ERROR = "error", "Infrastructure error"
    WAITING_FOR_DOCKER = "waiting_for_docker", "Waiting for a Docker Engine"
    WAITING_FOR_IMAGE = "waiting_for_image", "Waiting for its image"


class Validation(models.Model):
    """One validation of one version: the build, the trials, static findings and the verdict."""

    version = models.ForeignKey(TaskVersion, on_delete=models.CASCADE, related_name="validations")
    status = models.CharField(max_length=20, choices=ValidationStatus.choices, default=ValidationStatus.QUEUED)
    accepted = models.BooleanField(null=True)
    failure = models.CharField(max_length=40, blank=True)  # validation.FAILURE_TYPES
    reason = models.TextField(blank=True)
    static_findings = models.JSONField(default=list, blank=True)
    image_tag = models.CharField(max_length=200, blank=True)
    build_cached = models.BooleanField(null=True)  # True: the image existed, nothing was built
    build_seconds = models.FloatField(default=0)
    build_log = models.TextField(blank=True)
    total_seconds = models.FloatField(default=0)
    initial_state = models.JSONField(null=True, blank=True)
    settings = models.JSONField(default=dict, blank=True)
    logs_dir = models.CharField(max_length=500, blank=True)
    requested_by = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    recheck = models.ForeignKey("Recheck", null=True, blank=True, on_delete=models.SET_NULL, related_name="validations")
    claimed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)  # the running worker's (facet_site/leases.py)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["status"], name="validation_status_idx"),  # `facet validate --pending`, resume
        ]

    @classmethod
    def claim(cls, validation_id: int) -> bool:
        """Take a queued or waiting validation, or a running one whose worker died (lease run out)."""
        return leases.claim(cls, validation_id, queued=[ValidationStatus.QUEUED, ValidationStatus.WAITING_FOR_DOCKER],
                            running=ValidationStatus.RUNNING, claimed_at=timezone.now())

    @property
    def is_stalled(self) -> bool:
        return leases.is_stalled(self, ValidationStatus.RUNNING)


class TrialKind(models.TextChoices):
    NOP = "nop", "nop"
    ORACLE = "oracle", "oracle"
    PARTIAL = "partial", "partial"
    ROLLOUT = "rollout", "rollout"


class Trial(models.Model):
    """One run of the verifier in a fresh sandbox (append-only)."""

    validation = models.ForeignKey(Validation, null=True, blank=True, on_delete=models.CASCADE, related_name="trials")
    version = models.ForeignKey(TaskVersion, on_delete=models.CASCADE, related_name="trials")
    kind = models.CharField(max_length=10, choices=TrialKind.choices)
    index = models.PositiveSmallIntegerField(default=0)  # which partial solution; which run of a repeated nop/oracle
    reward = models.FloatField(null=True, blank=True)
    passed = models.BooleanField()
    failure = models.CharField(max_length=40, blank=True)
    reason = models.TextField(blank=True)
    solution_exit_code = models.IntegerField(null=True, blank=True)
    solution_output = models.TextField(blank=True)  # capped; the full logs are under logs_path
    verifier_output = models.TextField(blank=True)
    fs_diff = models.JSONField(null=True, blank=True)
    solution_seconds = models.FloatField(null=True, blank=True)
    verifier_seconds = models.FloatField(default=0)
    seconds = models.FloatField(default=0)
    peak_memory_bytes = models.BigIntegerField(null=True, blank=True)
    logs_path = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["version", "kind"], name="trial_version_kind_idx")]  # a version's trials by kind

    @property
    def name(self) -> str:
        if self.kind == TrialKind.PARTIAL:
            return f"partial {self.index}"
        return f"{self.kind} #{self.index + 1}" if self.index else self.kind


class TestResult(models.Model):
    __test__ = False  # a model, not a pytest class

    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="tests")
    name = models.CharField(max_length=500)
    outcome = models.CharField(max_length=10)  # passed | failed | error | skipped
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["id"]


class RepairOutcome(models.TextChoices):
    PENDING = "pending", "Not validated yet"
    FIXED = "fixed", "Validated"
    STILL_FAILING = "still_failing", "Still failing"


class RepairRound(models.Model):
    """One targeted repair: the failure that triggered it, the artifact the router blamed, and
    the version it turned `from_version` into."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="repairs")
    number = models.PositiveSmallIntegerField()
    artifact = models.CharField(max_length=15, choices=ArtifactKind.choices)
    routed_by = models.CharField(max_length=15, default="rule")  # rule | llm
    router_reason = models.TextField(blank=True)
    failure = models.CharField(max_length=40)
    failure_reason = models.TextField(blank=True)
    triggered_by = models.ForeignKey(Validation, null=True, on_delete=models.SET_NULL, related_name="+")
    from_version = models.ForeignKey(TaskVersion, on_delete=models.CASCADE, related_name="repairs_from")
    to_version = models.ForeignKey(TaskVersion, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="repairs_to")
    outcome = models.CharField(max_length=15, choices=RepairOutcome.choices, default=RepairOutcome.PENDING)
    prompt_version = models.CharField(max_length=40, blank=True)
    llm_calls = models.JSONField(default=dict, blank=True)  # "router" and the artifact -> LLMCall id
    # What the round's prompts were given (tasks.repair_evidence.gather), their sizes in tokens,
    # and the repair's own diagnosis: the task page's repair timeline shows it.
    evidence = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task_id", "number"]
        constraints = [models.UniqueConstraint(fields=["task", "number"], name="repair_unique_number")]


class LabelKind(models.TextChoices):
    TAG = "tag", "Skill tag"  # the skills' slugs, as task.toml's tags
    CATEGORY = "category", "Category"  # fine-grained taxonomy slug
    DOMAIN = "domain", "Top-level category"
    FAMILY = "family", "Task family"  # derived from categories by a configurable mapping
    DIFFICULTY = "difficulty", "Difficulty"  # easy | medium | hard: the scenario's target, or task.toml's


class TaskLabel(models.Model):
    """One tag, category, top-level category or family of a task (from its skills, or from an
    imported task.toml). A table rather than a JSON list so per-tag aggregates are GROUP BYs."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="labels")
    kind = models.CharField(max_length=10, choices=LabelKind.choices)
    value = models.CharField(max_length=200)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "kind", "value"], name="tasklabel_unique")]
        indexes = [models.Index(fields=["kind", "value"], name="tasklabel_kind_value_idx")]


# --- review (decisions, audit, locks, saved views, executable re-checks) -----------------------


class ReviewVerdict(models.TextChoices):
    """What a reviewer decided about a version (skills.models.Verdict is a filter's verdict on a skill)."""

    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    NEEDS_FIX = "needs_fix", "Needs fix"


class RejectReason(models.TextChoices):
    UNDER_SPECIFIED = "under_specified", "Under-specified instruction"
    PASSES_WITHOUT_SOLUTION = "passes_without_solution", "Verifier passes without the solution"
    TOO_STRICT = "too_strict", "Verifier too strict"
    FLAKY = "flaky", "Flaky"
    LEAKS_ANSWER = "leaks_answer", "Leaks the answer"
    INFEASIBLE = "infeasible", "Infeasible"
    DUPLICATE = "duplicate", "Duplicate"
    UNSAFE = "unsafe", "Unsafe"
    OTHER = "other", "Other"


class Decision(models.Model):
    """A reviewer's decision on one task version (append-only). It is bound to the version's
    content hash: a new version has no decision until someone decides again."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="decisions")
    version = models.ForeignKey(TaskVersion, on_delete=models.CASCADE, related_name="decisions")
    content_hash = models.CharField(max_length=80)
    verdict = models.CharField(max_length=10, choices=ReviewVerdict.choices)
    reason = models.CharField(max_length=30, choices=RejectReason.choices, blank=True)
    comment = models.TextField(blank=True)
    # an admin's approval of a version with error-level findings: why (mandatory), and which findings
    override_reason = models.TextField(blank=True)
    overridden_findings = models.JSONField(default=list, blank=True)
    author = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    bulk = models.BooleanField(default=False)  # made by a bulk action on a filtered selection
    # set on a compensating entry written by undo: it withdraws that decision
    withdraws = models.OneToOneField("self", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="withdrawn_by")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["task", "content_hash"], name="decision_task_hash_idx"),
            models.Index(fields=["created_at"], name="decision_created_idx"),  # throughput
        ]


class AuditEvent(models.Model):
    """Every change a person makes (decisions, overrides, bulk actions, locks taken over,
    exports, imports), with before and after values. Append-only; undo writes a compensating
    event that names the one it undoes."""

    actor = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=40)
    object_type = models.CharField(max_length=40)  # "task", "decision", "export", ...
    object_id = models.CharField(max_length=40)
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events")
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    undoes = models.OneToOneField("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="undone_by")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["object_type", "object_id"], name="audit_object_idx")]


class ReviewLock(models.Model):
    """Who is reviewing a task right now. Taken with a conditional write, reclaimed after
    FACET_REVIEW_LOCK_MINUTES, so two reviewers never get the same task from the queue."""

    task = models.OneToOneField(Task, on_delete=models.CASCADE, related_name="review_lock")
    holder = models.ForeignKey(django_settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    acquired_at = models.DateTimeField()


class SavedView(models.Model):
    """A named task-list view: its query string (filters, sort, columns). Shared views are
    visible to everyone; the URL itself is always shareable."""

    name = models.CharField(max_length=120)
    owner = models.ForeignKey(django_settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views")
    query = models.TextField(blank=True)
    shared = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="savedview_unique_name")]


class CheckKind(models.TextChoices):
    REVALIDATE = "revalidate", "Re-validation"
    FLAKINESS = "flakiness", "Flakiness check"


class RecheckStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    ERROR = "error", "Error"


class Recheck(models.Model):
    """A reviewer's executable re-check of one version: one re-validation, or N for flakiness.
    Its validations (Validation.recheck) hold the trials; the result is derived from them."""

    version = models.ForeignKey(TaskVersion, on_delete=models.CASCADE, related_name="rechecks")
    kind = models.CharField(max_length=12, choices=CheckKind.choices)
    runs = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(max_length=10, choices=RecheckStatus.choices, default=RecheckStatus.QUEUED)
    requested_by = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                     related_name="+")
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]


from .dataset_models import ExportStatus, Export, TaskImport  # noqa: E402,F401
from .rollout_models import (  # noqa: E402,F401
    CLAIMABLE_TRAJECTORY_STATUSES, RolloutBatch, RolloutBatchStatus, Trajectory, TrajectoryStatus, Turn,
)
from .team_models import (  # noqa: E402,F401
    Assignment,
    DecisionNote,
    GoldTask,
    Guideline,
    ReviewPolicy,
    TeamLock,
)
