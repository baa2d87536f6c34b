"""Task construction (FACET stage 3): from a consistent scenario to a validated Harbor task.

Each task moves through steps (models.Step). One step is one job: the LLM steps (manifest and
materialization, environment repair, artifacts, targeted repair) and the Docker steps (build with
init checks and e0, validation). A job claims the task with a conditional UPDATE on `claimed_at`
for the step the database says it is in (Task.claim), does the step, and records where the task
goes next (Task.move_to), so a redelivered job is a no-op and `advance_construction` can be
called any number of times. The steps themselves live in environments (environment, repair of
it, build), here (artifacts, validate), and repair (targeted repair); validating runs validations.

Without a Docker engine the Docker steps leave the task in waiting_for_docker with the engine's
message; `resume_waiting` puts it back when an engine answers.
"""
from __future__ import annotations

import logging
from datetime import timedelta
from typing import Callable
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from facet_site.lib import docker_engine as de
from facet_site.lib import validation as val
from facet_site.lib.llm import InvalidOutput, PermanentLLMError, TransientLLMError
from scenarios.models import Consistency, Scenario, Strategy, SynthesisRun
from scenarios.run_config import construction_config

from . import jobs, outputs, summary
from .environments import step_build, step_environment, step_environment_repair
from .generation import CONTEXT_BUDGET, TESTS_HINT, Generator, cap, difficulty_of, grounding, scenario_json
from .models import (
    DOCKER_STEPS,
    OPEN_STATUSES,
    Environment,
    Step,
    Task,
    TaskStatus,
    Validation,
    ValidationStatus,
)
from .repair import step_repair
from .validating import apply_outcome, remove_attempt_sandboxes, validate
from .versions import create_version, make_files
from .workspace import docker_client

log = logging.getLogger(__name__)


def create_tasks(run: SynthesisRun) -> int:
    """One task per consistent scenario of the run (the funnel's scenario–skill seeds)."""
    have = set(Task.objects.filter(run=run).values_list("scenario_id", flat=True))
    created = 0
    for scenario in Scenario.objects.filter(run=run, consistency=Consistency.CONSISTENT).order_by("id"):
        if scenario.pk in have:
            continue
        with transaction.atomic():
            env = Environment.objects.create(scenario=scenario)
            task = Task.objects.create(scenario=scenario, run=run, environment=env, strategy=run.strategy,
                                       name=(scenario.title or f"Scenario {scenario.pk}")[:200])
            summary.set_labels(task)
        created += 1
    return created


def run_step(task_id: int, step: str | None = None) -> str:
    """Claim the task for the step the database says it is in (only `step`, when given: a
    duplicated job message for a step already done must not run the next step on the wrong
    queue), do it, and record where it goes next. Returns the step done, or "" when another
    worker has it or nothing is due."""
    task = Task.objects.filter(pk=task_id).first()
    if task is None or task.status not in OPEN_STATUSES or task.step == Step.DONE:
        return ""
    if step is not None and task.step != step:
        return ""
    step = task.step
    if not Task.claim(task_id, step):
        return ""
    task = Task.objects.select_related("run", "environment", "scenario__pair", "current_version").get(pk=task_id)
    try:
        STEPS[step](task)
    except TransientLLMError as exc:
        task.release(f"transient LLM error, will retry: {exc}")
        raise
    except de.EngineUnavailable as exc:
        task.release(str(exc), status=TaskStatus.WAITING_FOR_DOCKER)
    except de.TransientEngineError as exc:
        # The daemon restarted or the connection broke mid-step: nothing the task did. It waits
        # like a missing engine and resumes with the same step.
        task.release(f"Docker engine trouble during {step}: {exc}; see README", status=TaskStatus.WAITING_FOR_DOCKER)
    except (InvalidOutput, PermanentLLMError) as exc:
        task.move_to(Step.DONE, status=TaskStatus.FAILED, message=f"{step}: {exc.__class__.__name__}: {exc}"[:5000])
    except Exception as exc:  # recorded on the task, so one bad task never stalls the run
        log.exception("task %s step %s failed", task_id, step)
        task.move_to(Step.DONE, status=TaskStatus.FAILED, message=f"{step}: {exc.__class__.__name__}: {exc}"[:5000])
    return step


def _artifacts_forward(gen: Generator, context: dict[str, str], strategy: str) -> dict:
    """FORWARD: instruction, solution, verifier (the verifier sees the solution); REVERSE: the
    verifier before the solution (the solution sees the verifier). Every stage sees the same
    specification and grounding (`context`)."""
    instruction = gen("instruction", "task.instruction", outputs.InstructionOut, **context).instruction
    shown = cap(instruction, CONTEXT_BUDGET["instruction"], "instruction")
    if strategy == Strategy.REVERSE:
        verifier = gen("verifier", "task.verifier", outputs.VerifierOut, **context, instruction=shown,
                       solution_section="")
        solution = gen("solution", "task.solution", outputs.SolutionOut, **context, instruction=shown,
                       verifier_section=(
                           "## The verifier the solution must satisfy\ntests/test_outputs.py:\n"
                           + cap(verifier.test_py, CONTEXT_BUDGET["tests"], "test file") + "\n"))
    else:
        solution = gen("solution", "task.solution", outputs.SolutionOut, **context, instruction=shown,
                       verifier_section="")
        verifier = gen("verifier", "task.verifier", outputs.VerifierOut, **context, instruction=shown,
                       solution_section=(
                           "## The reference solution (check the state it leaves, not its commands)\n"
                           + cap(solution.solve_sh, CONTEXT_BUDGET["solution"], "solution") + "\n"))
    return {"instruction": instruction, "solve_sh": solution.solve_sh, "test_sh": verifier.test_sh,
            "test_py": verifier.test_py, "partial_solutions": solution.partial_solutions}


def artifact_context(task: Task) -> dict[str, str]:
    """The placeholders every artifact prompt shares: the specification, the grounding in e0
    (generation.grounding), the difficulty target and the test count it implies."""
    env = task.environment
    difficulty = difficulty_of(task.scenario)
    return {"scenario_json": scenario_json(task.scenario), **grounding(env.initial_state, env.files),
            "difficulty": difficulty, "tests_hint": TESTS_HINT[difficulty]}


def step_artifacts(task: Task) -> None:
    """Instruction, solution and verifier, grounded in e0, in the order the run's strategy says;
    the solution stage's partial solutions are stored beside solve.sh for validation."""
    env = task.environment
    run_cfg = construction_config(task.run)
    gen = Generator(task)
    context = artifact_context(task)
    try:
        if task.strategy == Strategy.JOINT:
            out = gen("joint", "task.joint", outputs.ArtifactsOut, **context)
            parts = {**out.model_dump(), "partial_solutions": out.partial_solutions}
        else:
            parts = _artifacts_forward(gen, context, task.strategy)
    finally:
        gen.close()
    files = make_files(task, environment=env.files, instruction=parts["instruction"], solve_sh=parts["solve_sh"],
                       test_sh=parts["test_sh"], test_py=parts["test_py"], run_cfg=run_cfg,
                       partials=val.partial_solution_files(parts["partial_solutions"]))
    with transaction.atomic():
        version = create_version(task, files, prompt_versions=gen.versions, llm_calls=gen.calls)
        Validation.objects.create(version=version)
        task.move_to(Step.VALIDATE, current_version=version, message="")


def step_validate(task: Task) -> None:
    """Validate the current version, then move the task by the outcome (validating.apply_outcome)."""
    version = task.current_version
    validation = version.validations.filter(
        status__in=[ValidationStatus.QUEUED, ValidationStatus.WAITING_FOR_DOCKER], recheck__isnull=True
    ).order_by("id").first()
    if validation is None:
        validation = Validation.objects.create(version=version)
    validation = validate(validation.pk, run_cfg=construction_config(task.run))
    if validation is None:
        return task.release("the validation is running elsewhere")
    apply_outcome(task, validation)


STEPS: dict[str, Callable[[Task], None]] = {
    Step.ENVIRONMENT: step_environment, Step.ENVIRONMENT_REPAIR: step_environment_repair, Step.BUILD: step_build,
    Step.ARTIFACTS: step_artifacts, Step.VALIDATE: step_validate, Step.REPAIR: step_repair,
}


def validate_pending(*, client=None) -> list[Validation]:
    """Every queued or waiting validation (the CLI's --pending), oldest first."""
    done = []
    for vid in Validation.objects.filter(
            status__in=[ValidationStatus.QUEUED, ValidationStatus.WAITING_FOR_DOCKER],
            recheck__isnull=True).order_by("id").values_list("id", flat=True):
        task = Task.objects.filter(versions__validations__pk=vid).first()
        if task is not None and task.step == Step.VALIDATE and not task.imported:
            run_step(task.pk)  # construction's own validation: the task moves on with it
            done.append(Validation.objects.get(pk=vid))
            continue
        result = validate(vid, client=client)
        if result is not None:
            if task is not None and task.imported and result.status != ValidationStatus.WAITING_FOR_DOCKER:
                apply_outcome(task, result)
            done.append(result)
    return done


# --- orchestration ------------------------------------------------------------------------------


def resume_waiting(*, run: SynthesisRun | None = None) -> int:
    """Tasks and validations that waited for Docker go back to work once an engine answers.

    Called by every advance_construction, by `facet construct --resume` and periodically by the
    tasks.jobs.resume_waiting job (Celery beat inside `facet worker`). A construction task goes
    back to its step; a validation requested on its own (task page, API, an imported task) is
    queued again and handed to the Docker queue. Returns how many tasks resumed."""
    tasks = Task.objects.filter(status=TaskStatus.WAITING_FOR_DOCKER)
    waiting_validations = Validation.objects.filter(status=ValidationStatus.WAITING_FOR_DOCKER)
    if run is not None:
        tasks = tasks.filter(run=run)
        waiting_validations = waiting_validations.filter(version__task__run=run)
    if not tasks.exists() and not waiting_validations.exists():
        return 0
    try:
        client = docker_client(timeout_s=10)
    except de.EngineUnavailable:
        return 0
    try:
        # What an engine restart stopped is garbage now: each waiting validation's own sandboxes
        # (by owner label) and any stopped sandbox a minute old (a sandbox never stops by itself).
        for validation in waiting_validations:
            remove_attempt_sandboxes(validation, client)
        de.cleanup_leftovers(client, older_than_s=60, stopped_only=True)
    except de.DockerEngineError as exc:
        log.warning("could not remove stopped sandboxes: %s", exc)
    finally:
        client.close()
    resumed = 0
    for task in tasks:
        resumed += Task.resume(task.pk, task.step)
    ids = list(waiting_validations.values_list("id", flat=True))
    Validation.objects.filter(pk__in=ids, status=ValidationStatus.WAITING_FOR_DOCKER).update(
        status=ValidationStatus.QUEUED)
    # Construction's own validations run with their task's validate step; a reviewer's re-check
    # goes back to its re-check job (it never changes the task); the others need a job.
    rechecks = sorted(set(Validation.objects.filter(pk__in=ids, recheck__isnull=False)
                          .values_list("recheck_id", flat=True)))
    standalone = list(Validation.objects.filter(pk__in=ids, recheck__isnull=True).exclude(
        version__task__step=Step.VALIDATE, version__task__imported=False).values_list("id", flat=True))
    for vid in standalone:
        jobs.docker_validate.delay_on_commit(vid)
    for rid in rechecks:
        jobs.docker_recheck.delay_on_commit(rid)
    return resumed


def resume_all() -> None:
    """Every waiting task and validation back to work (the periodic job), and each run with open
    tasks advanced again."""
    resume_waiting()
    for run_id in Task.objects.filter(status__in=OPEN_STATUSES).values_list("run_id", flat=True).distinct():
        if run_id:
            queue_advance(run_id)


def _requeue_stale(run: SynthesisRun, minutes: int) -> None:
    """The last resort behind the leases (Task.free_stalled, run by beat): claims older than the
    run's stale_after_minutes. A validation is requeued only when its heartbeat is silent too, so
    one that still runs after an hour is never validated twice."""
    cutoff = timezone.now() - timedelta(minutes=minutes)
    Task.objects.filter(run=run, claimed_at__lt=cutoff, status__in=OPEN_STATUSES).update(claimed_at=None)
    Validation.objects.filter(version__task__run=run, status=ValidationStatus.RUNNING, claimed_at__lt=cutoff).filter(
        Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=cutoff)).update(status=ValidationStatus.QUEUED)


def _due_steps(run_id: int) -> tuple[list[tuple[int, str]], int]:
    """Create the run's tasks, resume waiting ones, free stale claims; the (task, step) pairs due
    now, and how many tasks are open."""
    run = SynthesisRun.objects.get(pk=run_id)
    create_tasks(run)
    resume_waiting(run=run)
    _requeue_stale(run, construction_config(run)["stale_after_minutes"])
    open_tasks = Task.objects.filter(run=run, status__in=OPEN_STATUSES).exclude(step=Step.DONE)
    due = list(open_tasks.filter(claimed_at__isnull=True).values_list("id", "step"))
    return due, open_tasks.count()


def advance_construction(run_id: int) -> int:
    """Queue each open task's step of the run (models.DOCKER_STEPS on the Docker queue, the rest on
    the LLM queue) once the transaction commits. Returns how many tasks are open."""
    due, n_open = _due_steps(run_id)
    for task_id, step in due:
        (jobs.docker_step if step in DOCKER_STEPS else jobs.llm_step).delay_on_commit(task_id, step)
    return n_open


def queue_advance(run_id: int) -> None:
    """Queue the job that runs `advance_construction` for the run, once the transaction commits."""
    jobs.advance_construction.delay_on_commit(run_id)


def continue_run_of(task_id: int) -> None:
    """After a step: advance the task's run (its next step, or the run's other tasks)."""
    run_id = Task.objects.filter(pk=task_id).values_list("run_id", flat=True).first()
    if run_id:
        queue_advance(run_id)


def start_construction(run: SynthesisRun) -> int:
    """Create the run's tasks and queue its construction (after the commit). Returns the tasks created."""
    created = create_tasks(run)
    queue_advance(run.pk)
    return created


def construct_run(run_id: int, *, max_steps: int = 10_000) -> SynthesisRun:
    """Construct every task of the run in this process (the CLI's --wait, tests, the demo)."""
    for _ in range(max_steps):
        before = list(Task.objects.filter(run_id=run_id).values_list("id", "step", "status", "claimed_at"))
        due, n_open = _due_steps(run_id)
        if not n_open:
            break
        for task_id, step in due:
            try:
                run_step(task_id, step)
            except TransientLLMError as exc:
                log.warning("transient LLM error on task %s: %s", task_id, exc)
        if list(Task.objects.filter(run_id=run_id).values_list("id", "step", "status", "claimed_at")) == before:
            break  # nothing moved: waiting for Docker or held by another worker
    return SynthesisRun.objects.get(pk=run_id)
