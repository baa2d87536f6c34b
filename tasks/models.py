"""Executable-state-grounded task construction (FACET stage 3): environments and their builds,
tasks and their immutable versions, validations with their trials and per-test results, and the
targeted repairs that link one version to the next.

Trials, test results, builds, validations and repair rounds are append-only. A task's `status`
and `current_version` are the one denormalised summary of them, written by tasks.services only.
"""
from django.conf import settings as django_settings
from django.db import models


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
    WAITING_FOR_DOCKER = "waiting_for_docker", "Waiting for Docker"


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
        ]

    def __str__(self):
        return self.name or f"Task #{self.pk}"

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES


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


class ValidationStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    ERROR = "error", "Infrastructure error"
    WAITING_FOR_DOCKER = "waiting_for_docker", "Waiting for Docker"


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
    claimed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["status"], name="validation_status_idx"),  # `facet validate --pending`, resume
        ]


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
    index = models.PositiveSmallIntegerField(default=0)  # which partial solution
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
        return f"partial {self.index}" if self.kind == TrialKind.PARTIAL else self.kind


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
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task_id", "number"]
        constraints = [models.UniqueConstraint(fields=["task", "number"], name="repair_unique_number")]
