"""The site's own records: per-user API tokens (stored as hashes)."""
import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiTokenQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True)


class ApiToken(models.Model):
    """A per-user bearer token for the JSON API. Only a hash is stored; the secret is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, help_text="First characters of the token, to tell tokens apart.")
    token_hash = models.CharField(max_length=64, unique=True)  # serves the lookup on every API request
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def hash(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    @classmethod
    def issue(cls, *, user, name: str) -> tuple["ApiToken", str]:
        secret = "facet_" + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name.strip() or "token", prefix=secret[:12], token_hash=cls.hash(secret))
        return token, secret

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def revoke(self):
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])


class WorkerHeartbeat(models.Model):
    """The last time a Celery worker said it was alive (facet_site/workers.py writes it every few
    seconds from inside each worker). The filesystem broker has no remote control, so the database
    is the one place every web process can learn whether anyone will run the jobs it queues."""

    hostname = models.CharField(max_length=255, unique=True)  # serves the worker's own update
    queues = models.CharField(max_length=255, default="")
    beat = models.BooleanField(default=False, help_text="Celery beat (the periodic jobs) runs inside this worker.")
    pid = models.IntegerField(default=0)
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(db_index=True)  # serves "workers seen in the last N seconds" on every page

    class Meta:
        ordering = ["-seen_at"]

    def __str__(self):
        return self.hostname

    @property
    def queue_list(self) -> list[str]:
        return [q for q in self.queues.split(",") if q]
