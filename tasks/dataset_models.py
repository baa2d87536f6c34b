"""Datasets in and out: export and import jobs (tasks/exports.py, tasks/imports.py), sharing one
claim and lease through facet_site/leases.py.

Imported by tasks/models.py so Django sees them as models of the tasks app.
"""
from django.conf import settings as django_settings
from django.db import models
from django.utils import timezone

from facet_site import leases


class ExportStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class _DatasetJob:
    """The claim export and import jobs share (facet_site/leases.py): queued -> running with a
    conditional UPDATE, so two workers never take the same job. A job whose worker died (running,
    no heartbeat for a lease) is taken over: exports start again from scratch, imports skip the
    tasks already stored (same content hash, one transaction each)."""

    @classmethod
    def claim(cls, pk: int) -> bool:
        return leases.claim(cls, pk, queued=ExportStatus.QUEUED, running=ExportStatus.RUNNING,
                            claimed_at=timezone.now())

    @classmethod
    def retry(cls, pk: int) -> bool:
        """A failed job, or one whose worker died, goes back to the queue (Retry / Resume)."""
        return leases.retry(cls, pk, retryable=ExportStatus.FAILED, queued=ExportStatus.QUEUED,
                            running=ExportStatus.RUNNING, finished_at=None)

    @property
    def is_stalled(self) -> bool:
        return leases.is_stalled(self, ExportStatus.RUNNING)


class Export(_DatasetJob, models.Model):
    """One dataset export job: the task-list filter it honours, its progress and its archive."""

    name = models.CharField(max_length=200)
    query = models.TextField(blank=True)  # the task-list query string; empty = approved versions
    options = models.JSONField(default=dict, blank=True)  # formats: harbor, manifest, hf, sft
    status = models.CharField(max_length=10, choices=ExportStatus.choices, default=ExportStatus.QUEUED)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    archive_path = models.CharField(max_length=500, blank=True)
    archive_sha256 = models.CharField(max_length=64, blank=True)
    archive_bytes = models.BigIntegerField(default=0)
    error = models.TextField(blank=True)
    summary = models.JSONField(default=dict, blank=True)  # counts, categories
    created_by = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    claimed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)  # the running worker's (facet_site/leases.py)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]


class TaskImport(_DatasetJob, models.Model):
    """One import of Harbor task directories, datasets or archives (also Terminal-Bench 1.x):
    what was imported and, per task, what was refused and why."""

    source = models.CharField(max_length=500)
    status = models.CharField(max_length=10, choices=ExportStatus.choices, default=ExportStatus.QUEUED)
    upload_path = models.CharField(max_length=500, blank=True)
    validate = models.BooleanField(default=False)  # validate each imported task (kept for a resumed job)
    imported = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)  # already present (same content hash)
    problems = models.JSONField(default=list, blank=True)  # [{"task": ..., "file": ..., "field": ..., "error": ...}]
    # this import's own base image -> local image mapping, over settings.FACET_IMAGE_MAP (tasks/images.py)
    image_map = models.JSONField(default=dict, blank=True)
    tasks = models.ManyToManyField("tasks.Task", blank=True, related_name="imports")
    created_by = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    claimed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)  # the running worker's (facet_site/leases.py)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]


# review at team scale: required reviews, decision notes, team locks, assignments, guidelines, gold
