"""Celery jobs of the tasks app: thin wrappers that each call one service. `llm_*` jobs run on the
LLM queue, `docker_*` jobs on the Docker queue (CELERY_TASK_ROUTES).

Services queue these jobs themselves (`job.delay_on_commit(id)`, after their transaction commits),
so the service modules import this one at module level; each job imports the service it calls
inside its body, which keeps that import one-way. Job names are stable: settings and the beat
schedule name them (FACET_CONSTRUCTION_JOB is "tasks.jobs.advance_construction").
"""
from celery import shared_task

from facet_site import leases
from facet_site.lib.docker_engine import TransientEngineError
from facet_site.lib.llm import TransientLLMError

RETRY = dict(retry_backoff=5, retry_backoff_max=300, retry_jitter=True, max_retries=8)


# --- construction (tasks/construction.py) and validation (tasks/validating.py) --------------------


@shared_task(name="tasks.jobs.advance_construction")
def advance_construction(run_id: int) -> None:
    from . import construction

    construction.advance_construction(run_id)


def _step_leased(task_id: int):
    """The task's claim renewed while its step runs: when the worker dies, beat frees the task
    within a lease (Task.free_stalled) and its step is queued again."""
    from .models import Task

    return leases.heartbeat(Task, task_id, field="claimed_at", held={"claimed_at__isnull": False})


@shared_task(name="tasks.jobs.llm_step", autoretry_for=(TransientLLMError,), **RETRY)
def llm_step(task_id: int, step: str | None = None) -> None:
    from . import construction

    with _step_leased(task_id):
        done = construction.run_step(task_id, step)
    if done:
        construction.continue_run_of(task_id)


@shared_task(name="tasks.jobs.docker_step", autoretry_for=(TransientEngineError,), **RETRY)
def docker_step(task_id: int, step: str | None = None) -> None:
    # An unreachable engine is not retried here: the task waits (waiting_for_docker) until
    # resume_waiting finds an engine again.
    from . import construction

    with _step_leased(task_id):
        done = construction.run_step(task_id, step)
    if done:
        construction.continue_run_of(task_id)


@shared_task(name="tasks.jobs.docker_validate", bind=True, max_retries=None)
def docker_validate(self, validation_id: int) -> None:
    from . import validating
    from .models import Validation, ValidationStatus

    if validating.run_requested(validation_id) is None:
        leases.wait_out(self, Validation, validation_id, running=ValidationStatus.RUNNING)


@shared_task(name="tasks.jobs.resume_waiting")
def resume_waiting() -> None:
    """Periodic (or by hand): put tasks that waited for Docker back to work."""
    from . import construction

    construction.resume_all()


# --- datasets out (tasks/exports.py) and in (tasks/imports.py) ------------------------------------


@shared_task(name="tasks.jobs.run_export", bind=True, max_retries=None)
def run_export(self, export_id: int) -> None:
    # run_export claims the export with a conditional UPDATE: a redelivered message never runs it twice.
    from . import exports
    from .models import Export, ExportStatus

    if exports.run_export(export_id) is None:
        leases.wait_out(self, Export, export_id, running=ExportStatus.RUNNING)


@shared_task(name="tasks.jobs.run_import", bind=True, max_retries=None)
def run_import(self, import_id: int, validate: bool = False) -> None:
    from . import imports
    from .models import ExportStatus, TaskImport

    if imports.run_import(import_id, validate=validate) is None:
        leases.wait_out(self, TaskImport, import_id, running=ExportStatus.RUNNING)


# --- rollouts (tasks/rollouts.py): one Docker job per trajectory; its LLM turns are made inside it
# (a live sandbox cannot wait on another queue). Redelivered messages are no-ops or wait out the claim.


@shared_task(name="tasks.jobs.docker_rollout", bind=True, max_retries=None)
def docker_rollout(self, trajectory_id: int) -> None:
    from . import rollouts
    from .models import Trajectory, TrajectoryStatus

    with leases.heartbeat(Trajectory, trajectory_id, running=TrajectoryStatus.RUNNING):
        outcome = rollouts.run_trajectory(trajectory_id)
    if outcome.retry_in is not None:
        # another worker holds the claim: come back when it would count as dead
        raise self.retry(countdown=min(outcome.retry_in, 6 * 3600))
    if outcome.batch_id is not None:
        rollouts.trajectory_finished(outcome.batch_id)


@shared_task(name="tasks.jobs.advance_rollouts")
def advance_rollouts(batch_id: int) -> None:
    from . import rollouts

    rollouts.advance_batch(batch_id)


@shared_task(name="tasks.jobs.resume_rollouts")
def resume_rollouts() -> None:
    """Periodic (or by hand): trajectories that waited for Docker, and those of dead workers."""
    from . import rollouts

    rollouts.resume()


# --- executable re-checks from the task page (tasks/rechecks.py) ----------------------------------


@shared_task(name="tasks.jobs.docker_recheck")
def docker_recheck(recheck_id: int) -> None:
    # Each validation is claimed by validating.validate: a redelivered message runs nothing twice.
    from . import rechecks

    rechecks.run_recheck(recheck_id)


@shared_task(name="tasks.jobs.resume_rechecks")
def resume_rechecks() -> None:
    """Periodic (or by hand): re-checks that waited for Docker, or whose worker died, go back to the queue."""
    from . import rechecks

    rechecks.resume_queued()


# --- labels after a skill's category changed (skills.services.category_changed) ------------------


@shared_task(name="tasks.jobs.relabel_skill_tasks")
def relabel_skill_tasks(skill_id: int) -> None:
    # Recomputing labels from the records is idempotent: a redelivered message changes nothing.
    from . import summary

    summary.relabel_skill_tasks(skill_id)
