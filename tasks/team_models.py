"""Review at team scale: required reviews (ReviewPolicy), what each decision was made under
(DecisionNote: guideline version, adjudication, time spent, gold outcome), per-reviewer locks of
multi-review queues (TeamLock), assignments, versioned guidelines and gold tasks.

Imported by tasks/models.py so Django sees them as models of the tasks app; the workflows are in
tasks/consensus.py, assignment.py, guidelines.py and gold.py.
"""
from django.conf import settings as django_settings
from django.db import models


class ReviewPolicy(models.Model):
    """How many independent reviews the tasks of a selection need, and how often the queue mixes
    in gold tasks. The selection is a synthesis run, a saved view or a task-list query (a named
    queue): exactly one of the three."""

    name = models.CharField(max_length=120)
    run = models.ForeignKey("scenarios.SynthesisRun", null=True, blank=True, on_delete=models.CASCADE,
                            related_name="review_policies")
    saved_view = models.ForeignKey("tasks.SavedView", null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="review_policies")
    query = models.TextField(blank=True)  # task-list query string when neither run nor saved view is set
    required_reviews = models.PositiveSmallIntegerField(default=1)
    gold_rate = models.FloatField(default=0.0)  # share of the queue's hand-outs that are gold tasks, 0..0.5
    created_by = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["name"], name="reviewpolicy_unique_name")]

    def __str__(self):
        return self.name


class DecisionNote(models.Model):
    """What one decision was made under; written in the same transaction as the decision."""

    decision = models.OneToOneField("tasks.Decision", on_delete=models.CASCADE, related_name="note")
    adjudication = models.BooleanField(default=False)  # a lead's decision that settles a disagreement
    guideline = models.ForeignKey("tasks.Guideline", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    seconds = models.FloatField(null=True, blank=True)  # time spent on the task, when known
    gold_verdict = models.CharField(max_length=10, blank=True)  # the known verdict, when the task is gold
    gold_correct = models.BooleanField(null=True)  # None: not a gold task


class TeamLock(models.Model):
    """A reviewer's lock on a task of a multi-review queue: one per (task, reviewer), so up to the
    number of reviews still missing can review a task at once."""

    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="team_locks")
    holder = models.ForeignKey(django_settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    policy = models.ForeignKey(ReviewPolicy, null=True, on_delete=models.CASCADE, related_name="+")
    taken_at = models.DateTimeField()  # when the reviewer opened the task: time spent is measured from here
    renewed_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "holder"], name="teamlock_unique_holder")]


class Assignment(models.Model):
    """A lead handed a task to a named reviewer; it comes first in that reviewer's queue until
    they have decided on the task's current version."""

    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="assignments")
    reviewer = models.ForeignKey(django_settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    priority = models.SmallIntegerField(default=0)  # higher first
    assigned_by = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                    related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "reviewer"], name="assignment_unique_reviewer")]
        # a reviewer's queue: their assignments by priority
        indexes = [models.Index(fields=["reviewer", "-priority"], name="assignment_queue")]


class Guideline(models.Model):
    """One version of the review guidelines (Markdown). The newest is in force."""

    number = models.PositiveIntegerField(unique=True)
    text = models.TextField()
    note = models.CharField(max_length=200, blank=True)  # what changed
    author = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-number"]


class GoldTask(models.Model):
    """A task whose correct verdict is known, bound to the version hash it was judged on."""

    task = models.OneToOneField("tasks.Task", on_delete=models.CASCADE, related_name="gold")
    content_hash = models.CharField(max_length=80)
    verdict = models.CharField(max_length=10)  # ReviewVerdict
    reason = models.CharField(max_length=30, blank=True)
    note = models.TextField(blank=True)
    marked_by = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                  related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
