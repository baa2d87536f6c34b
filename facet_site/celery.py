"""The Celery app. Jobs live in each app's `jobs.py`; their state lives in our own tables."""
import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "facet_site.settings")

app = Celery("facet")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(related_name="jobs")


@worker_ready.connect
def remove_sandboxes_of_dead_workers(**kwargs):
    """A worker that died mid-trial leaves its sandbox behind; the next worker to start removes
    sandboxes older than any trial can run (settings.FACET_SANDBOX_MAX_AGE_S), and stopped ones a
    minute old."""
    import logging

    from django.conf import settings

    from facet_site.lib import docker_engine as de

    try:
        client = de.connect(settings.DOCKER_HOST)
    except de.TransientEngineError:
        return  # no engine here: nothing to clean, and Docker jobs will wait for one
    try:
        removed = de.cleanup_leftovers(client, older_than_s=settings.FACET_SANDBOX_MAX_AGE_S)
        # A daemon restart stops every container; a stopped sandbox is nobody's (docs/docker.md).
        removed += de.cleanup_leftovers(client, older_than_s=60, stopped_only=True)
        if removed:
            logging.getLogger(__name__).warning("removed %d sandbox containers left by dead workers", removed)
    finally:
        client.close()
