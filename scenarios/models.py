"""The scenario–skill repository: synthesis runs, scenario hypotheses, candidate pairs, the judge's
verdicts, five-dimension scenarios, and every LLM call behind them.

Each stage's work items carry their own status, so the database, not the broker, says where a
run stands; jobs claim items with a conditional UPDATE.
"""
import numpy as np
from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from facet_site import leases


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Finished"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Stage(models.TextChoices):
    # optional, when the run's config enables skills.llm_classification (scenarios/classifying.py)
    CLASSIFICATION = "classification", "0. Skill categories (LLM)"
    HYPOTHESES = "hypotheses", "1. Scenario hypotheses"
    RETRIEVAL = "retrieval", "2. Retrieval"
    JUDGE = "judge", "3. Judge"
    RECONSTRUCTION = "reconstruction", "4. Reconstruction"
    DONE = "done", "Done"


STAGE_ORDER = [Stage.CLASSIFICATION, Stage.HYPOTHESES, Stage.RETRIEVAL, Stage.JUDGE, Stage.RECONSTRUCTION, Stage.DONE]


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
    # set by the one retrieval job that took the run, so a duplicated message builds no pairs twice;
    # renewed by that job while it runs (its lease, facet_site/leases.py)
    retrieval_claimed_at = models.DateTimeField(null=True, blank=True)
    # set when a user retried or resumed the run (scenarios/run_recovery.py): a second click within
    # the run's stale window finds it fresh and does nothing
    resumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"Run #{self.pk} {self.name}"

    @property
    def is_finished(self) -> bool:
        return self.status in {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}

    def limit(self, name: str, default=None):
        return (self.config.get("limits") or {}).get(name, default)

    @classmethod
    def free_stalled_retrieval(cls, run_id: int) -> bool:
        """A retrieval whose worker died (its lease ran out) is given up, so the next advance hands
        it out again (pairs are made in one transaction: the dead job made none or all)."""
        return bool(cls.objects.filter(leases.expired("retrieval_claimed_at"), pk=run_id, stage=Stage.RETRIEVAL)
                    .update(retrieval_claimed_at=None))

    @classmethod
    def mark_resumed(cls, run_id: int, *, cutoff) -> bool:
        """Stamp a queued or running run that showed no sign of life since `cutoff` (no item claimed
        or finished, not started, retrieved or resumed since): a conditional UPDATE, so of two
        clicks on Resume one wins. The row's own columns are tested again under PostgreSQL's row
        lock, so the loser sees the winner's `resumed_at`."""
        recent = Q(claimed_at__gte=cutoff) | Q(finished_at__gte=cutoff)
        live = [models.Exists(m.objects.filter(recent, run_id=models.OuterRef("pk")))
                for m in (SkillClassification, RunSkill, CandidatePair, Scenario)]
        quiet = (cls.objects.filter(pk=run_id, status__in=[RunStatus.QUEUED, RunStatus.RUNNING])
                 .exclude(created_at__gte=cutoff).exclude(started_at__gte=cutoff)
                 .exclude(resumed_at__gte=cutoff).exclude(retrieval_claimed_at__gte=cutoff))
        for exists in live:
            quiet = quiet.exclude(exists)
        return bool(quiet.update(resumed_at=timezone.now()))

    @classmethod
    def reopen(cls, run_id: int, *, stage: str, message: str) -> bool:
        """A finished run (succeeded with failed items) back to running at `stage`, where its first
        failed items are; from a stage before retrieval, retrieval is taken again. Of two clicks one wins."""
        before_retrieval = STAGE_ORDER.index(stage) < STAGE_ORDER.index(Stage.RETRIEVAL)
        fields = {"retrieval_claimed_at": None} if before_retrieval else {}
        return bool(cls.objects.filter(pk=run_id, status=RunStatus.SUCCEEDED).update(
            status=RunStatus.RUNNING, stage=stage, finished_at=None, resumed_at=timezone.now(),
            message=message, **fields))


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
    # the item's lease (facet_site/leases.py): set when it is handed out or claimed, renewed by its
    # worker while it runs (scenarios/jobs.py); older than FACET_JOB_LEASE_S: its worker died
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @classmethod
    def requeue_stalled(cls, run_id: int, *, lost_messages: bool = False) -> int:
        """Items of the run whose worker died (running, lease run out) go back to pending, for the
        next advance to hand out again; with `lost_messages` (the caller saw the broker's queue
        empty), queued items nobody took within a lease too. One conditional UPDATE: of two beats,
        one moves each item. Returns how many went back."""
        stalled = Q(status=WorkStatus.RUNNING)
        if lost_messages:
            stalled |= Q(status=WorkStatus.QUEUED)
        return cls.objects.filter(stalled, leases.expired("claimed_at"), run_id=run_id).update(
            status=WorkStatus.PENDING, error="Its worker stopped answering; queued again.")


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


class ClassificationOutcome(models.TextChoices):
    LLM = "llm", "The LLM's category stored"
    FALLBACK = "fallback", "The classifier's category kept (the LLM's answer was not usable)"
    OVERRIDE = "override", "A reviewer's override kept (no call made)"


class SkillClassification(WorkItem):
    """The optional LLM classification stage's work item, before the hypotheses: one run skill's
    category from the model, stored on the skill by skills.llm_categories; what was decided and
    why is kept here, per run."""

    run = models.ForeignKey(SynthesisRun, on_delete=models.CASCADE, related_name="classifications")
    skill = models.ForeignKey("skills.Skill", on_delete=models.PROTECT, related_name="+")
    outcome = models.CharField(max_length=10, choices=ClassificationOutcome.choices, blank=True)
    category = models.ForeignKey("skills.Category", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    confidence = models.FloatField(null=True, blank=True)
    note = models.TextField(blank=True)  # why the LLM's answer was not used
    prompt_version = models.CharField(max_length=40, blank=True)
    llm_call = models.ForeignKey("LLMCall", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "skill"], name="skillclassification_unique")]
        indexes = [
            # advance_run's progress counts and the claim of pending items
            models.Index(fields=["run", "status"], name="skillclass_status_idx"),
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


class Difficulty(models.TextChoices):
    """The intended difficulty the dimensions stage gives a scenario (the paper reports the shares)."""

    EASY = "easy", "Easy"
    MEDIUM = "medium", "Medium"
    HARD = "hard", "Hard"


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
    # blank: reconstructed before the dimensions stage named a difficulty, or the model gave none
    difficulty = models.CharField(max_length=6, choices=Difficulty.choices, blank=True)
    difficulty_rationale = models.TextField(blank=True)  # the model's reason for that difficulty

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


class NamedEndpoint(models.Model):
    """An LLM endpoint an admin defined (the Django admin), beside the operator's in settings
    (FACET_LLM_ENDPOINTS, which win on a name both use). A run or rollout batch picks it by name
    (scenarios/endpoints.py). Its key is chosen by name among the keys the operator set
    (settings.FACET_LLM_KEYS, files of FACET_LLM_KEY_DIR): the key itself is never stored here."""

    name = models.SlugField(max_length=100, unique=True)
    base_url = models.URLField(max_length=500, help_text="The OpenAI-compatible server, e.g. https://llm.internal/v1.")
    model = models.CharField(max_length=200, help_text="The model a run gets when it names none.")
    offered_models = models.CharField(max_length=1000, blank=True,
                              help_text="Comma-separated models a run may choose here; empty: only the model above.")
    key_name = models.CharField(max_length=100, blank=True,
                                help_text="Which operator-set key to send (FACET_LLM_KEY_<NAME> or a file of "
                                          "FACET_LLM_KEY_DIR); empty: none.")
    max_tokens_cap = models.PositiveIntegerField(null=True, blank=True, help_text="The most tokens a run may ask for per answer.")
    timeout_s = models.FloatField(default=120.0)
    enabled = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def model_names(self) -> tuple[str, ...]:
        listed = tuple(m.strip() for m in self.offered_models.split(",") if m.strip())
        return listed or (self.model,)
