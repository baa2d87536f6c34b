"""Validation of one task version (construction, the CLI, the API, imported tasks, re-checks):
requesting it, running it in Docker with the nop, oracle and partial trials, storing what it saw,
and what its outcome means for the task (validated, another repair, or discarded). What the task
becomes reflects every validation of its current version, not only the last one."""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from facet_site import leases
from facet_site.lib import docker_engine as de
from facet_site.lib import validation as val
from scenarios.run_config import construction_config

from . import images, jobs, summary
from .apps import base_image
from .models import RepairOutcome, Step, Task, TaskStatus, TaskVersion, TestResult, Trial, Validation, ValidationStatus
from .versions import slug, write_harbor_task
from .workspace import data_dir, docker_client, worker_owner

log = logging.getLogger(__name__)

LOG_CAP = 16 * 1024


def cap_log(text: str, limit: int = LOG_CAP) -> str:
    """A log as the database keeps it: its head and tail within `limit`."""
    return val.cap_text(text, limit)


def request_validation(version: TaskVersion, *, user=None, queue: bool = True) -> Validation:
    """A queued validation of the version; its Docker job is queued once the transaction commits
    (`queue=False`: the caller runs `validate` itself, as the CLI does)."""
    validation = Validation.objects.create(version=version, requested_by=user)
    if queue:
        jobs.docker_validate.delay_on_commit(validation.pk)
    return validation


def validate(validation_id: int, *, run_cfg: dict | None = None, client=None) -> Validation | None:
    """Claim a queued (or waiting) validation, or one whose worker died (Validation.claim), run it
    in Docker and store everything it saw. Returns None when another worker has it."""
    if not Validation.claim(validation_id):
        return None
    validation = Validation.objects.select_related("version__task__run").get(pk=validation_id)
    version = validation.version
    run_cfg = run_cfg or construction_config(version.task.run)
    own_client = client is None
    try:
        if own_client:
            client = docker_client()
    except de.EngineUnavailable as exc:
        Validation.objects.filter(pk=validation_id).update(status=ValidationStatus.WAITING_FOR_DOCKER,
                                                           reason=str(exc))
        return Validation.objects.get(pk=validation_id)
    # An imported task FROM an image this machine lacks waits for it (tasks/images.py), never fails.
    try:
        need = images.image_need(version, client)
    except de.TransientEngineError:
        need = None  # the build below meets the same engine trouble and waits for Docker
    if need is not None and need.missing:
        if own_client:
            client.close()
        Validation.objects.filter(pk=validation_id).update(status=ValidationStatus.WAITING_FOR_IMAGE,
                                                           reason=need.reason[:5000])
        return Validation.objects.get(pk=validation_id)
    # The sandboxes of this attempt carry this owner label, and the label is on record before
    # any container exists: if the engine goes away mid-run the attempt cannot remove them,
    # and whoever resumes the validation removes them by it (remove_attempt_sandboxes).
    remove_attempt_sandboxes(validation, client)
    owner = validation_owner(validation)
    Validation.objects.filter(pk=validation_id).update(settings={"owner": owner})
    logs = data_dir("validations", validation.pk)
    t = run_cfg["timeouts"]
    try:
        with leases.heartbeat(Validation, validation_id, running=ValidationStatus.RUNNING), \
                tempfile.TemporaryDirectory(prefix="facet-task-") as tmp:
            task_dir = write_harbor_task(version, Path(tmp) / slug(version.task.name))
            if need is not None:
                images.retarget(task_dir, need)
            report = val.validate_task(
                client, task_dir, base_image=need.local if need is not None else base_image(), max_partials=run_cfg["max_partials"],
                timeouts=val.ValidationTimeouts(max_build_s=t["build_s"], max_solution_s=t["solution_s"],
                                                max_verifier_s=t["verifier_s"]),
                keep_logs_dir=logs, owner=owner,
                trial_log_max_bytes=settings.FACET_TRIAL_LOG_MAX_BYTES,
                trial_runs=trial_runs(validation, run_cfg),
                max_parallel=settings.FACET_VALIDATION_PARALLEL_TRIALS or None)
    except de.TransientEngineError as exc:
        # Engine gone or restarting mid-run: nothing the task did. The trials so far are dropped
        # (they ran against an engine that went away) and the whole validation runs again from
        # clean containers once the engine answers.
        reason = (f"infrastructure: the Docker engine failed during the validation (daemon restarting or "
                  f"connection lost): {exc}")
        if "README" not in reason:
            reason += "; it runs again when the engine answers (see README, Docker)"
        Validation.objects.filter(pk=validation_id).update(status=ValidationStatus.WAITING_FOR_DOCKER,
                                                           reason=reason[:5000])
        return Validation.objects.get(pk=validation_id)
    finally:
        if own_client and client is not None:
            client.close()
    store_report(validation, report, logs)
    return Validation.objects.get(pk=validation_id)


def trial_runs(validation: Validation, run_cfg: dict) -> int:
    """How many times the nop and the oracle run: once in a re-check (it repeats whole
    validations itself, 5 by default), else the run's setting or FACET_VALIDATION_TRIAL_RUNS."""
    if validation.recheck_id is not None:
        return 1
    return int(run_cfg.get("trial_runs") or settings.FACET_VALIDATION_TRIAL_RUNS)


def validation_owner(validation: Validation) -> str:
    """The owner label prefix of one validation attempt's sandboxes (validate_task appends its
    own suffix). It starts with this worker's owner, so a worker's clean-up covers it too."""
    return f"{worker_owner()}:validation-{validation.pk}"


def remove_attempt_sandboxes(validation: Validation, client) -> int:
    """Remove what an earlier, interrupted attempt of this validation left (by its owner label)."""
    previous = (validation.settings or {}).get("owner")
    if not previous or client is None:
        return 0
    try:
        return de.cleanup_leftovers(client, owner_prefix=f"{previous}:")
    except de.DockerEngineError as exc:
        log.warning("could not remove the sandboxes of validation %s: %s", validation.pk, exc)
        return 0


def store_report(validation: Validation, report: val.ValidationReport, logs: Path) -> None:
    with transaction.atomic():
        for trial in report.trials:
            row = Trial.objects.create(
                validation=validation, version=validation.version, kind=trial.kind,
                index=trial.index if trial.kind == "partial" else trial.repeat,
                reward=trial.reward, passed=trial.passed, failure=trial.failure or "", reason=trial.reason or "",
                solution_exit_code=trial.solution_exit_code, solution_output=cap_log(trial.solution_output),
                verifier_output=cap_log(trial.verifier_output), fs_diff=trial.fs_diff,
                solution_seconds=trial.solution_seconds, verifier_seconds=trial.verifier_seconds,
                seconds=trial.total_seconds, peak_memory_bytes=trial.peak_memory_bytes,
                logs_path=str(logs / f"trial_{trial.name}"))
            TestResult.objects.bulk_create([
                TestResult(trial=row, name=str(t.get("name", ""))[:500], outcome=str(t.get("outcome", ""))[:10],
                           message=str(t.get("message") or "")[:5000])
                for t in trial.test_results[:2000]])
        infra = report.failure == val.INFRA_ERROR
        Validation.objects.filter(pk=validation.pk).update(
            status=ValidationStatus.ERROR if infra else ValidationStatus.DONE, accepted=report.accepted,
            failure=report.failure or "", reason=report.reason or "", static_findings=report.static_findings,
            image_tag=report.image_tag or "", build_cached=report.build.cached if report.build else None,
            build_seconds=report.build_seconds, build_log=cap_log(report.build_log), total_seconds=report.total_seconds,
            initial_state=report.initial_state, settings=report.settings, logs_dir=str(logs),
            finished_at=timezone.now())
        summary.refresh_summary(validation.version.task_id)


def apply_outcome(task: Task, validation: Validation) -> None:
    """What a finished validation means for the task: validated, another repair, or discarded."""
    if validation.status == ValidationStatus.WAITING_FOR_DOCKER:
        return task.release(validation.reason, status=TaskStatus.WAITING_FOR_DOCKER)
    if validation.status == ValidationStatus.WAITING_FOR_IMAGE:
        return task.release(validation.reason, status=TaskStatus.WAITING_FOR_IMAGE)
    run_cfg = construction_config(task.run)
    # An earlier failed validation of the same version (a flaky verifier that failed once) is not
    # undone by this one passing: the version failed, and its failure is the earlier one.
    _kinds, failure, reason = summary.version_findings(validation.version, rechecks=False)
    passed = validation.accepted and not failure
    if validation.accepted and failure:
        validation.failure, validation.reason = failure, f"an earlier validation of this version failed: {reason}"
    pending = task.repairs.filter(to_version=validation.version, outcome=RepairOutcome.PENDING)
    pending.update(outcome=RepairOutcome.FIXED if passed else RepairOutcome.STILL_FAILING)
    if validation.status == ValidationStatus.ERROR:
        return task.move_to(Step.DONE, status=TaskStatus.FAILED, message=f"validation: {validation.reason}"[:5000])
    if passed:
        return task.move_to(Step.DONE, status=TaskStatus.VALIDATED, message="")
    if task.imported:
        return task.move_to(Step.DONE, status=TaskStatus.DISCARDED,
                            discard_reason=f"{validation.failure}: {validation.reason}"[:5000])
    rounds = task.repairs.count()
    if rounds >= run_cfg["max_repair_rounds"]:
        reason = (f"still invalid after {rounds} repair rounds; last failure {validation.failure}: "
                  f"{validation.reason}")
        return task.move_to(Step.DONE, status=TaskStatus.DISCARDED, discard_reason=reason[:5000],
                            message=reason[:5000])
    task.move_to(Step.REPAIR, message=f"{validation.failure}: {validation.reason}"[:5000])


def retry_validation(validation: Validation) -> Validation | None:
    """Retry / Resume on a task page: a validation whose worker died goes back to the queue; one
    that ended in an infrastructure error is validated again as a new validation (records are
    append-only). None when it is neither."""
    if validation.status == ValidationStatus.ERROR:
        with transaction.atomic():
            # The errored row locked: of two clicks the second waits here, then finds the first
            # one's validation and adds none (a double click validates once).
            list(Validation.objects.select_for_update().filter(pk=validation.pk).values_list("pk", flat=True))
            if Validation.objects.filter(version_id=validation.version_id, recheck__isnull=True,
                                         pk__gt=validation.pk).exists():
                return None
            return request_validation(validation.version, user=validation.requested_by)
    if leases.retry(Validation, validation.pk, retryable=[], queued=ValidationStatus.QUEUED,
                    running=ValidationStatus.RUNNING):
        jobs.docker_validate.delay_on_commit(validation.pk)
        return Validation.objects.get(pk=validation.pk)
    return None


def resume_stalled() -> list[int]:
    """Validations requested on their own (not construction's, which advance_construction resumes,
    nor re-checks') whose worker died or whose message was lost go back to the Docker queue."""
    own = Q(recheck__isnull=True) & (Q(version__task__imported=True) | Q(version__task__step=Step.DONE))
    ids = leases.requeue_stalled(Validation, queued=ValidationStatus.QUEUED, running=ValidationStatus.RUNNING,
                                 scope=own)
    for pk in ids:
        jobs.docker_validate.delay_on_commit(pk)
    return ids


def run_requested(validation_id: int) -> Validation | None:
    """A validation requested on its own (the API, the Validate button, an imported task), run by
    its Docker job. An imported task's validation decides its status; a reviewer's re-check never does."""
    result = validate(validation_id)
    task = Task.objects.filter(versions__validations__pk=validation_id).first()
    if result is not None and task is not None and task.imported and result.recheck_id is None:
        apply_outcome(task, result)
    return result
