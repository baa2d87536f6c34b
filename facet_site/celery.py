"""The Celery app. Jobs live in each app's `jobs.py`; their state lives in our own tables."""
import os

from celery import Celery
from celery.signals import worker_ready, worker_shutdown

from facet_site.lib import filesystem_broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "facet_site.settings")
filesystem_broker.register()  # settings name the serverless broker's transport "facet-filesystem"

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


@worker_ready.connect
def start_heartbeat(sender, **kwargs):
    """Pages tell whether any worker runs from the heartbeat rows (facet_site/workers.py)."""
    from facet_site import workers

    workers.start_for(sender)


@worker_shutdown.connect
def stop_heartbeat(**kwargs):
    from facet_site import workers

    workers.stop()


@worker_ready.connect
def remove_leftover_files(**kwargs):
    """Extraction areas and upload temp files of batches and requests whose process died, and the
    broker's partial message files of writers that died, go when a worker starts
    (facet_site/recovery.py); a running batch's area stays."""
    import logging

    from facet_site import recovery

    try:
        removed = recovery.remove_leftovers()
    except Exception:  # a database not migrated yet, a permission problem: the worker still starts
        logging.getLogger(__name__).warning("could not remove leftover ingest files", exc_info=True)
        return
    if removed:
        logging.getLogger(__name__).warning("removed %d leftover ingest areas, upload files and partial broker messages",
                                            len(removed))


@worker_ready.connect
def close_startup_connections(**kwargs):
    """The handlers above query the database from the worker's main thread, which runs no job
    afterwards: its connection would stay open for the worker's life, and in an llm worker hold one
    of the few its threads share (FACET_LLM_DB_CONNECTIONS). Connected last, so it runs after them."""
    from django.db import connections

    connections.close_all()
