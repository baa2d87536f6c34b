"""The scenario–skill repository: synthesis runs, scenario hypotheses, candidate pairs, the judge's
verdicts, five-dimension scenarios, and every LLM call behind them.

Each stage's work items carry their own status, so the database, not the broker, says where a
run stands; jobs claim items with a conditional UPDATE.
"""
import numpy as np
from django.conf import settings
from django.db import models
from django.db.models import Q


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Finished"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Stage(models.TextChoices):
    HYPOTHESES = "hypotheses", "1. Scenario hypotheses"
    RETRIEVAL = "retrieval", "2. Retrieval"
    JUDGE = "judge", "3. Judge"
    RECONSTRUCTION = "reconstruction", "4. Reconstruction"
    DONE = "done", "Done"


STAGE_ORDER = [Stage.HYPOTHESES, Stage.RETRIEVAL, Stage.JUDGE, Stage.RECONSTRUCTION, Stage.DONE]


class Strategy(models.TextChoices):
    FORWARD = "forward", "Forward (instruction → solution → verifier)"
    REVERSE = "reverse", "Reverse (verifier before solution)"
    JOINT = "joint", "Joint (one call)"


class SynthesisRun(models.Model):
    """One run of the pipeline with its configuration, budgets and progress."""

    name = models.CharField(max_length=200)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.QUEUED)
    stage = models.CharField(max_length=20, choices=Stage.choices, default=Stage.HYPOTHESES)
    strategy = models.CharField(max_length=10, choices=Strategy.choices, default=Strategy.FORWARD)
    # models, limits and budgets as given when the run was started; see run_config.DEFAULT_CONFIG
    config = models.JSONField(default=dict)
    message = models.TextField(blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # set by the one retrieval job that took the run, so a duplicated message builds no pairs twice
    retrieval_claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"Run #{self.pk} {self.name}"

    @property
    def is_finished(self) -> bool:
        return self.status in {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}

    def limit(self, name: str, default=None):
        return (self.config.get("limits") or {}).get(name, default)


class WorkStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"


OPEN_WORK = [WorkStatus.PENDING, WorkStatus.QUEUED, WorkStatus.RUNNING]


class WorkItem(models.Model):
    """Claimable state shared by every stage's work items."""

    status = models.CharField(max_length=10, choices=WorkStatus.choices, default=WorkStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class RunSkill(WorkItem):
    """Stage 1's work item: one accepted skill whose scenario hypotheses a run extracts."""

    run = models.ForeignKey(SynthesisRun, on_delete=models.CASCADE, related_name="run_skills")
    skill = models.ForeignKey("skills.Skill", on_delete=models.PROTECT, related_name="run_items")
    prompt_version = models.CharField(max_length=40, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "skill"], name="runskill_unique")]
        indexes = [
            # advance_run's progress counts and the claim of pending items
            models.Index(fields=["run", "status"], name="runskill_status_idx"),
        ]


class ScenarioHypothesis(models.Model):
    """A possible use of one skill: application context, user goal, initial and desired final state."""

    run = models.ForeignKey(SynthesisRun, on_delete=models.CASCADE, related_name="hypotheses")
    skill = models.ForeignKey("skills.Skill", on_delete=models.PROTECT, related_name="hypotheses")
    position = models.PositiveSmallIntegerField()
    application_context = models.TextField()
    user_goal = models.TextField()
    initial_state = models.TextField()
    desired_final_state = models.TextField()
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    prompt_version = models.CharField(max_length=40)
    llm_call = models.ForeignKey("LLMCall", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["skill_id", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "skill", "position"], name="hypothesis_unique")]

    def __str__(self):
        return self.user_goal[:80]

    @property
    def text(self) -> str:
        """What is embedded for retrieval."""
        return (f"{self.user_goal} Context: {self.application_context} "
                f"From: {self.initial_state} To: {self.desired_final_state}")

    @property
    def vector(self):
        return None if not self.embedding else np.frombuffer(bytes(self.embedding), dtype=np.float32)


class PairSource(models.TextChoices):
    RETRIEVAL = "retrieval", "Retrieval"
    IMPORTED = "imported", "Imported JSONL"


class PairVerdict(models.TextChoices):
    ACCEPTED = "accepted", "Accepted"
    REJECTED = "rejected", "Rejected"


class CandidatePair(WorkItem):
    """A candidate scenario–skill pair p_c = (c, X_c): two or three skills and the scenario that links them.
    Its work-item status is the judge stage's; `verdict` is the judge's decision."""

    run = models.ForeignKey(SynthesisRun, on_delete=models.CASCADE, related_name="pairs")
    skills = models.ManyToManyField("skills.Skill", through="PairSkill", related_name="pairs")
    skill_set = models.CharField(max_length=200, help_text="Sorted skill ids, e.g. '12,40': one pair per skill set per run.")
    scenario_text = models.TextField(help_text="The scenario hypotheses that linked the skills.")
    hypotheses = models.ManyToManyField(ScenarioHypothesis, blank=True, related_name="pairs")
    score = models.FloatField(null=True, blank=True)
    evidence = models.JSONField(default=list, blank=True)
    source = models.CharField(max_length=10, choices=PairSource.choices, default=PairSource.RETRIEVAL)
    external_id = models.CharField(max_length=200, blank=True)
    skill_summaries = models.JSONField(default=list, blank=True)  # kept for imported pairs and export
    verdict = models.CharField(max_length=10, choices=PairVerdict.choices, blank=True)

    class Meta:
        ordering = ["-score", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "skill_set"], name="pair_unique_skill_set")]
        indexes = [
            models.Index(fields=["run", "status"], name="pair_status_idx"),  # judge claims and progress
            models.Index(fields=["run", "verdict"], name="pair_verdict_idx"),  # repository browser filter
        ]

    def __str__(self):
        return f"Pair #{self.pk} ({self.skill_set})"

    def ordered_skills(self):
        return [ps.skill for ps in self.pair_skills.select_related("skill__category").order_by("position")]


class PairSkill(models.Model):
    pair = models.ForeignKey(CandidatePair, on_delete=models.CASCADE, related_name="pair_skills")
    skill = models.ForeignKey("skills.Skill", on_delete=models.PROTECT, related_name="+")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["pair", "skill"], name="pairskill_unique")]


class Judgement(models.Model):
    """The LLM judge's scores (1–5) with rationales for one candidate pair, and its verdict."""

    pair = models.OneToOneField(CandidatePair, on_delete=models.CASCADE, related_name="judgement")
    relevance = models.FloatField()
    complementarity = models.FloatField()
    non_redundancy = models.FloatField()
    executability = models.FloatField()
    rationales = models.JSONField(default=dict)
    verdict = models.CharField(max_length=10, choices=PairVerdict.choices)
    summary = models.TextField(blank=True)
    prompt_version = models.CharField(max_length=40)
    llm_call = models.ForeignKey("LLMCall", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    @property
    def scores(self) -> dict:
        return {"relevance": self.relevance, "complementarity": self.complementarity,
                "non_redundancy": self.non_redundancy, "executability": self.executability}


class Consistency(models.TextChoices):
    CONSISTENT = "consistent", "Consistent"
    INCONSISTENT = "inconsistent", "Inconsistent"


RECONSTRUCTION_MODULES = [
    ("skill_analysis", "Skill analysis"),
    ("scenario_exploration", "Scenario exploration"),
    ("association_filtering", "Association and filtering"),
    ("evolution_recovery", "Evolution and recovery"),
    ("information_expansion", "Information expansion"),
]


class Scenario(WorkItem):
    """An accepted pair reconstructed through the five modules into the five dimensions, the
    integrated scenario C, the solution reference R_S and the instruction reference R_I."""

    pair = models.OneToOneField(CandidatePair, on_delete=models.CASCADE, related_name="scenario")
    run = models.ForeignKey(SynthesisRun, on_delete=models.CASCADE, related_name="scenarios")
    title = models.CharField(max_length=300, blank=True)
    modules = models.JSONField(default=dict, blank=True)  # each module's output, by module name
    goal = models.TextField(blank=True)
    context = models.TextField(blank=True)
    capability = models.TextField(blank=True)
    state = models.TextField(blank=True)
    io_tools = models.TextField(blank=True)
    integrated = models.TextField(blank=True)
    solution_reference = models.JSONField(default=dict, blank=True)  # setup_actions, workflow, state_transitions
    instruction_reference = models.JSONField(default=dict, blank=True)  # goal, inputs, outputs, constraints
    consistency = models.CharField(max_length=12, choices=Consistency.choices, blank=True)
    consistency_notes = models.TextField(blank=True)
    prompt_versions = models.JSONField(default=dict, blank=True)  # stage -> prompt version

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["run", "status"], name="scenario_status_idx")]  # claims and progress

    def __str__(self):
        return self.title or f"Scenario #{self.pk}"

    @property
    def dimensions(self) -> list[tuple[str, str]]:
        return [("Goal", self.goal), ("Context", self.context), ("Capability", self.capability),
                ("State", self.state), ("Inputs/outputs and tools", self.io_tools)]


class LLMCallStatus(models.TextChoices):
    OK = "ok", "OK"
    INVALID = "invalid_output", "Invalid output"
    ERROR = "error", "Error"
    CACHED = "cached", "Answered from cache"
    REPLAYED = "replayed", "Replayed from cassette"


class LLMCall(models.Model):
    """Every LLM call: what it served, with which prompt, what came back, and what it cost."""

    run = models.ForeignKey(SynthesisRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="llm_calls")
    stage = models.CharField(max_length=60)
    subject = models.CharField(
        max_length=500, help_text="The record it served, by a stable name: skill:<key> or pair:<key>+<key>."
    )
    model = models.CharField(max_length=200)
    prompt_version = models.CharField(max_length=40)
    messages = models.JSONField(default=list)
    response_text = models.TextField(blank=True)
    parsed = models.JSONField(null=True, blank=True)
    tokens_in = models.PositiveIntegerField(null=True, blank=True)
    tokens_out = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    cost_usd = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=20, choices=LLMCallStatus.choices)
    error = models.TextField(blank=True)
    request_hash = models.CharField(max_length=64, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["subject"], name="llmcall_subject_idx"),  # the calls behind a record
            models.Index(fields=["run", "stage"], name="llmcall_run_stage_idx"),  # run totals per stage
        ]

    def __str__(self):
        return f"{self.stage} for {self.subject} ({self.status})"


class LLMCacheEntry(models.Model):
    """A successful response by request hash, so resuming a run never pays for the same call twice."""

    request_hash = models.CharField(max_length=64, unique=True)
    record = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
