"""Celery jobs of task construction: thin wrappers that claim a task or a validation and call one
service. `llm_*` jobs run on the LLM queue, `docker_*` jobs on the Docker queue (CELERY_TASK_ROUTES)."""
from celery import shared_task

from facet_site.lib.docker_engine import TransientEngineError
from facet_site.lib.llm import TransientLLMError

from . import services
from .models import DOCKER_STEPS, Task

RETRY = dict(retry_backoff=5, retry_backoff_max=300, retry_jitter=True, max_retries=8)


def _dispatch(step: str, task_id: int):
    (docker_step if step in DOCKER_STEPS else llm_step).delay(task_id, step)


def _continue(task_id: int):
    run_id = Task.objects.filter(pk=task_id).values_list("run_id", flat=True).first()
    if run_id:
        advance_construction.delay(run_id)


@shared_task(name="tasks.jobs.advance_construction")
def advance_construction(run_id: int) -> None:
    services.advance_construction(run_id, dispatch=_dispatch)


@shared_task(name="tasks.jobs.llm_step", autoretry_for=(TransientLLMError,), **RETRY)
def llm_step(task_id: int, step: str | None = None) -> None:
    if services.run_step(task_id, step):
        _continue(task_id)


@shared_task(name="tasks.jobs.docker_step", autoretry_for=(TransientEngineError,), **RETRY)
def docker_step(task_id: int, step: str | None = None) -> None:
    # An unreachable engine is not retried here: the task waits (waiting_for_docker) until
    # resume_waiting finds an engine again.
    if services.run_step(task_id, step):
        _continue(task_id)


@shared_task(name="tasks.jobs.docker_validate")
def docker_validate(validation_id: int) -> None:
    result = services.validate(validation_id)
    task = Task.objects.filter(versions__validations__pk=validation_id).first()
    if result is not None and task is not None and task.imported:
        services.apply_outcome(task, result)


@shared_task(name="tasks.jobs.resume_waiting")
def resume_waiting() -> None:
    """Periodic (or by hand): put tasks that waited for Docker back to work."""
    services.resume_waiting()
    for run_id in Task.objects.filter(status__in=services.OPEN_STATUSES).values_list("run_id", flat=True).distinct():
        if run_id:
            advance_construction.delay(run_id)
