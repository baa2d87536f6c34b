"""Celery jobs for the skill corpus. Thin: claim the batch, run the service, record the outcome."""
from celery import shared_task

from facet_site import leases

from . import services
from .models import IngestBatch, IngestBatchStatus


@shared_task(name="skills.jobs.ingest_batch", bind=True, max_retries=None)
def ingest_batch(self, batch_id: int) -> None:
    # execute_batch claims with a conditional UPDATE, so a redelivered message never runs the batch
    # twice at once. When another worker holds it (the message came back because this worker's
    # pool process was killed mid-batch), come back once that holder's lease has run out: the
    # claim then takes the batch over and the ingest resumes (docs/operations.md).
    if services.execute_batch(batch_id) is None:
        leases.wait_out(self, IngestBatch, batch_id, running=IngestBatchStatus.RUNNING)
