"""Celery jobs of the site itself: the periodic recovery job every `facet worker` runs in beat."""
from celery import shared_task


@shared_task(name="facet_site.jobs.resume_stalled")
def resume_stalled() -> None:
    """Periodic (or by hand): every kind of job whose worker died goes back to the queue."""
    from . import recovery

    recovery.resume_stalled()
