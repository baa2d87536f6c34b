"""Celery jobs for the skill corpus. Thin: claim the batch, run the service, record the outcome."""
from celery import shared_task

from . import services


@shared_task(name="skills.jobs.ingest_batch")
def ingest_batch(batch_id: int) -> None:
    # execute_batch claims with a conditional UPDATE, so a redelivered message is a no-op.
    services.execute_batch(batch_id)
