"""Agent rollouts: batches of attempts of one model at a selection of task versions, each attempt
(Trajectory) with its transcript of turns and the trial that graded it.

Imported by tasks/models.py so Django sees them as models of the tasks app; the workflow is in
tasks/rollouts.py, Harbor job imports in tasks/rollout_imports.py.
"""
from django.conf import settings as django_settings
from django.db import models
from django.utils import timezone

from facet_site import leases


class RolloutBatchStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


class RolloutBatch(models.Model):
    """k attempts per task by one model (built-in Terminus-2-style runner), or the trials of an
    imported Harbor job (any agent)."""

    name = models.CharField(max_length=200)
    source = models.CharField(max_length=10, default="builtin")  # builtin | harbor
    run = models.ForeignKey("scenarios.SynthesisRun", null=True, blank=True, on_delete=models.SET_NULL,
                            related_name="rollout_batches")
    model = models.CharField(max_length=200, blank=True)
    agent = models.CharField(max_length=100, default="terminus-2")
    attempts = models.PositiveSmallIntegerField(default=3)  # k
    max_turns = models.PositiveSmallIntegerField(default=30)
    timeout_s = models.PositiveIntegerField(default=900)
    selection = models.JSONField(default=dict, blank=True)  # the task filter or ids it was started on
    config = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=RolloutBatchStatus.choices, default=RolloutBatchStatus.QUEUED)
    message = models.TextField(blank=True)
    report = models.JSONField(default=dict, blank=True)  # harbor import: matched, unmatched, errors
    created_by = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # when a user last resumed it by hand (tasks/task_recovery.py): a second click within a lease
    # finds it stamped and queues nothing twice
    resumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    @classmethod
    def mark_resumed(cls, batch_id: int) -> bool:
        """Stamp an open batch not resumed by hand within a lease: a conditional UPDATE, so of two
        clicks on Resume one queues the trajectories."""
        return bool(cls.objects.filter(pk=batch_id, status__in=[RolloutBatchStatus.QUEUED, RolloutBatchStatus.RUNNING])
                    .exclude(resumed_at__gte=leases.cutoff()).update(resumed_at=timezone.now()))


class TrajectoryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    ERROR = "error", "Error"
    WAITING_FOR_DOCKER = "waiting_for_docker", "Waiting for a Docker Engine"


# a worker may take these up (a running one only once its claim is stale)
CLAIMABLE_TRAJECTORY_STATUSES = [TrajectoryStatus.PENDING, TrajectoryStatus.WAITING_FOR_DOCKER]


class Trajectory(models.Model):
    """One attempt of one agent at one task version; graded by the version's verifier (trial)."""

    batch = models.ForeignKey(RolloutBatch, on_delete=models.CASCADE, related_name="trajectories")
    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="trajectories")
    version = models.ForeignKey("tasks.TaskVersion", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="trajectories")
    attempt = models.PositiveSmallIntegerField(default=0)
    model = models.CharField(max_length=200, blank=True)
    agent = models.CharField(max_length=100, blank=True)
    status = models.CharField(max_length=20, choices=TrajectoryStatus.choices, default=TrajectoryStatus.PENDING)
    reward = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(null=True)  # strict: reward == 1
    failure = models.CharField(max_length=40, blank=True)  # why it did not pass (agent timeout, tests failed, ...)
    message = models.TextField(blank=True)
    trial = models.OneToOneField("tasks.Trial", null=True, blank=True, on_delete=models.SET_NULL, related_name="trajectory")
    n_turns = models.PositiveSmallIntegerField(default=0)
    seconds = models.FloatField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    source_path = models.CharField(max_length=500, blank=True)  # harbor import: the trial directory
    claimed_at = models.DateTimeField(null=True, blank=True)  # the claim's token: every write checks it
    heartbeat_at = models.DateTimeField(null=True, blank=True)  # the running worker's (facet_site/leases.py)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["batch", "task", "attempt"], name="trajectory_unique_attempt")]
        indexes = [
            models.Index(fields=["task", "status"], name="trajectory_task_status_idx"),
            models.Index(fields=["batch", "status"], name="trajectory_batch_status_idx"),
        ]

    @classmethod
    def claim(cls, trajectory_id: int, *, stale_before):
        """Take the trajectory with a conditional UPDATE (claimable, or running with a claim older
        than `stale_before`: its worker died). Returns the claim time, the claim's token that every
        later write checks, or None when another worker has it."""
        now = timezone.now()
        took = cls.objects.filter(pk=trajectory_id).filter(
            models.Q(status__in=CLAIMABLE_TRAJECTORY_STATUSES)
            | models.Q(status=TrajectoryStatus.RUNNING, claimed_at__lt=stale_before)).update(
            status=TrajectoryStatus.RUNNING, claimed_at=now, heartbeat_at=now, message="")
        return now if took else None

    @classmethod
    def requeue_stalled(cls) -> list[int]:
        """Running trajectories of open batches whose worker died (no heartbeat for a lease) go
        back to pending, their dead holder's token cleared; returns those whose job must be queued
        again. Each is a conditional UPDATE: of two beats, one requeues a trajectory."""
        cutoff = leases.cutoff()
        stalled = models.Q(status=TrajectoryStatus.RUNNING, batch__status__in=[
            RolloutBatchStatus.QUEUED, RolloutBatchStatus.RUNNING]) & (
            models.Q(heartbeat_at__lt=cutoff) | models.Q(heartbeat_at__isnull=True, claimed_at__lt=cutoff))
        return [pk for pk in cls.objects.filter(stalled).values_list("pk", flat=True)
                if cls.objects.filter(pk=pk, status=TrajectoryStatus.RUNNING).filter(
                    models.Q(heartbeat_at__lt=cutoff) | models.Q(heartbeat_at__isnull=True, claimed_at__lt=cutoff)
                ).update(status=TrajectoryStatus.PENDING, claimed_at=None, heartbeat_at=None,
                         message="its worker stopped answering; queued again")]

    def release(self, token, status: str, message: str) -> None:
        """Give the claim back (e.g. waiting for Docker), if it is still ours."""
        Trajectory.objects.filter(pk=self.pk, status=TrajectoryStatus.RUNNING, claimed_at=token).update(
            status=status, claimed_at=None, message=message[:5000])

    def finish_error(self, token, failure: str, message: str) -> None:
        """End the attempt as an error (never counted in a pass rate), if the claim is still ours."""
        Trajectory.objects.filter(pk=self.pk, status=TrajectoryStatus.RUNNING, claimed_at=token).update(
            status=TrajectoryStatus.ERROR, failure=failure[:40], message=message[:5000], claimed_at=None,
            finished_at=timezone.now())


class Turn(models.Model):
    """One turn of a trajectory: the model's analysis and commands, their capped outputs."""

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="turns")
    index = models.PositiveSmallIntegerField()
    analysis = models.TextField(blank=True)
    plan = models.TextField(blank=True)
    commands = models.JSONField(default=list, blank=True)  # [{"keystrokes": ..., "duration": ...}]
    output = models.TextField(blank=True)  # terminal output the model saw next (capped)
    state = models.CharField(max_length=20, blank=True)  # lib.rollout turn_state: observation | action | ...
    task_complete = models.BooleanField(default=False)
    seconds = models.FloatField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    llm_call = models.ForeignKey("scenarios.LLMCall", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")

    class Meta:
        ordering = ["trajectory_id", "index"]
        constraints = [models.UniqueConstraint(fields=["trajectory", "index"], name="turn_unique_index")]
