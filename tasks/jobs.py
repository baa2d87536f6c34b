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
    # an imported task's validation decides its status; a reviewer's re-check never does
    if result is not None and task is not None and task.imported and result.recheck_id is None:
        services.apply_outcome(task, result)


@shared_task(name="tasks.jobs.resume_waiting")
def resume_waiting() -> None:
    """Periodic (or by hand): put tasks that waited for Docker back to work."""
    services.resume_waiting()
    for run_id in Task.objects.filter(status__in=services.OPEN_STATUSES).values_list("run_id", flat=True).distinct():
        if run_id:
            advance_construction.delay(run_id)


# --- datasets in and out (tasks.datasets) -------------------------------------------------------


@shared_task(name="tasks.jobs.run_export")
def run_export(export_id: int) -> None:
    # run_export claims the export with a conditional UPDATE: a redelivered message is a no-op.
    from . import datasets

    datasets.run_export(export_id)


@shared_task(name="tasks.jobs.run_import")
def run_import(import_id: int, validate: bool = False) -> None:
    from . import datasets

    datasets.run_import(import_id, validate=validate)


# --- rollouts (tasks/rollouts.py): one Docker job per trajectory; its LLM turns are made inside it
# (a live sandbox cannot wait on another queue). Redelivered messages are no-ops or wait out the claim.


@shared_task(name="tasks.jobs.docker_rollout", bind=True, max_retries=None)
def docker_rollout(self, trajectory_id: int) -> None:
    from . import rollouts

    outcome = rollouts.run_trajectory(trajectory_id)
    if outcome.retry_in is not None:
        # another worker holds the claim: come back when it would count as dead
        raise self.retry(countdown=min(outcome.retry_in, 6 * 3600))
    if outcome.batch_id is not None:
        advance_rollouts.delay(outcome.batch_id)


@shared_task(name="tasks.jobs.advance_rollouts")
def advance_rollouts(batch_id: int) -> None:
    from . import rollouts

    rollouts.advance_batch(batch_id, dispatch=docker_rollout.delay)


@shared_task(name="tasks.jobs.resume_rollouts")
def resume_rollouts() -> None:
    """Periodic (or by hand): trajectories that waited for Docker, and those of dead workers."""
    from . import rollouts

    rollouts.resume(dispatch=docker_rollout.delay)


# --- executable re-checks from the task page (tasks/rechecks.py) ----------------------------------


@shared_task(name="tasks.jobs.docker_recheck")
def docker_recheck(recheck_id: int) -> None:
    # Each validation is claimed by services.validate: a redelivered message runs nothing twice.
    from . import rechecks

    rechecks.run_recheck(recheck_id)


@shared_task(name="tasks.jobs.resume_rechecks")
def resume_rechecks() -> None:
    """Periodic (or by hand): re-checks that waited for Docker, or whose worker died, go back to the queue."""
    from . import rechecks

    rechecks.resume_queued(dispatch=docker_recheck.delay)
