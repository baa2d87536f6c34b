"""Rollouts: agent attempts at our tasks, run here (a Terminus-2-style loop), each graded by the
task version's own verifier.

A *batch* is k attempts per task by one model on the tasks a task-list filter selects (default:
validated tasks), each attempt one Trajectory on the task's current version, created up front.
One job per trajectory, on the Docker queue:

    claim (conditional UPDATE on claimed_at) -> build or find the environment image ->
    facet_site.lib.rollout.run_rollout (model turns and commands in a sandbox with validation's
    limits, then the verifier) -> store the trial, its per-test results and every turn ->
    refresh the task's summary columns

Why the model's turns are not split onto the LLM queue: a trajectory's state between two turns
is a live container on one worker's engine. Handing each turn to the LLM queue would keep that
container idle (and its worker slot blocked, or the container orphaned) while the call waits
for an LLM worker, and the next command would have to find its way back to the same engine.
The LLM calls are made inside the Docker job through the configured client instead (the same
client, recorder and cassettes as every other stage, stage "rollout.turn"); the Docker queue's
concurrency therefore bounds both the sandboxes and the concurrent model conversations.

Idempotent and resumable: the claim is `status in (pending, waiting) or (running and claimed
longer ago than the batch can possibly take)`, and the claim time is the claim's token: turns
and the final result are written only while the trajectory still carries it, so a redelivered
message is a no-op and a worker that died has its trajectory taken over after the timeout
without the two ever both writing. Without an engine a trajectory waits (waiting_for_docker);
`resume` puts it back. Cancelling a batch stops its running trajectories at their next turn.

Harbor job directories are imported as batches by tasks/rollout_imports.py.
"""
from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from facet_site.lib import docker_engine as de
from facet_site.lib import rollout as ro
from facet_site.lib import shell_commands
from facet_site.lib import validation as val
from facet_site.lib.llm import LLMClient, LLMSettings
from scenarios.llm import llm_settings as run_llm_settings
from scenarios.run_config import RunConfigError, check_llm_config
from scenarios.throughput import limiter as endpoint_limiter

from . import jobs, summary
from .apps import base_image
from .filters import TaskFilter
from .generation import task_subject
from .models import CLAIMABLE_TRAJECTORY_STATUSES as CLAIMABLE
from .models import (
    AuditEvent,
    RolloutBatch,
    RolloutBatchStatus,
    TestResult,
    Trajectory,
    TrajectoryStatus,
    Trial,
    TrialKind,
    Turn,
)
from .rollout_imports import TURN_OUTPUT_CAP
from .versions import write_harbor_task
from .workspace import data_dir, docker_client, worker_owner

log = logging.getLogger(__name__)

DEFAULT_QUERY = "status=validated"
AGENT = "terminus-2"
OPEN_BATCH = [RolloutBatchStatus.QUEUED, RolloutBatchStatus.RUNNING]
UNFINISHED = [TrajectoryStatus.PENDING, TrajectoryStatus.RUNNING, TrajectoryStatus.WAITING_FOR_DOCKER]
LIMITS = {"attempts": (1, 20), "max_turns": (1, 200), "timeout_s": (30, 4 * 3600)}
MAX_TRAJECTORIES = 50_000
# caps on what task.toml asks for, as validation's (scenarios.run_config.DEFAULT_CONSTRUCTION)
BUILD_CAP_S = 600
VERIFIER_CAP_S = 600


class RolloutError(ValueError):
    """A batch cannot be started as asked (bad parameters, nothing selected)."""


# --- batches ------------------------------------------------------------------------------------


def selected_tasks(query: str | None):
    """The tasks a batch would roll out: the task filter's selection (default: validated tasks),
    those with a version only."""
    tf = TaskFilter.from_query(query if query and query.strip() else DEFAULT_QUERY)
    return tf, tf.queryset().filter(current_version__isnull=False)


def create_batch(*, query: str = "", model: str = "", attempts: int = 3, max_turns: int = 30, timeout_s: int = 900,
                 name: str = "", user=None, llm: dict | None = None, run=None, trusted: bool = False) -> RolloutBatch:
    """A queued batch with one pending trajectory per (selected task, attempt). Dispatch with
    `start_batch` (after commit) or run in process with `run_batch`. `llm` is checked as a run's
    "llm" section: a named endpoint and safe values; URLs and cassettes only when `trusted` (CLI, demo)."""
    values = {"attempts": attempts, "max_turns": max_turns, "timeout_s": timeout_s}
    for key, (low, high) in LIMITS.items():
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise RolloutError(f"{key}: must be a whole number from {low} to {high}, not {value!r}")
    tf, tasks = selected_tasks(query)
    if tf.errors:
        raise RolloutError("task filter: " + "; ".join(tf.errors))
    rows = list(tasks.order_by("id").values_list("id", "current_version_id"))
    if not rows:
        raise RolloutError(f"no task with a version matches the filter ({tf.describe()})")
    if len(rows) * attempts > MAX_TRAJECTORIES:
        raise RolloutError(f"{len(rows)} tasks × {attempts} attempts is over {MAX_TRAJECTORIES:,} trajectories; "
                           "narrow the filter")
    llm = dict(llm or {})
    try:
        check_llm_config({**llm, "model": (model or "").strip()}, trusted=trusted)
    except RunConfigError as exc:
        raise RolloutError(str(exc)) from None
    model = (model or "").strip()[:200] or run_llm_settings({"endpoint": llm.get("endpoint")}).model or "default"
    llm.setdefault("temperature", 1.0)  # independent attempts, as the paper's evaluation (Table 9)
    with transaction.atomic():
        batch = RolloutBatch.objects.create(
            name=(name or f"{model} × {attempts} on {tf.describe()}")[:200], source="builtin", run=run, model=model,
            agent=AGENT, attempts=attempts, max_turns=max_turns, timeout_s=timeout_s, created_by=user,
            selection={"query": tf.query_string(with_view=False), "describe": tf.describe(), "tasks": len(rows)},
            config={"llm": llm})
        Trajectory.objects.bulk_create([
            Trajectory(batch=batch, task_id=task_id, version_id=version_id, attempt=attempt, model=model, agent=AGENT)
            for task_id, version_id in rows for attempt in range(attempts)], batch_size=2000)
        _audit(user, "rollout.start", batch, after={"tasks": len(rows), "attempts": attempts, "model": model})
    return batch


def start_batch(batch: RolloutBatch) -> None:
    """Queue one job per pending trajectory once the transaction that made them commits."""
    for tid in batch.trajectories.filter(status=TrajectoryStatus.PENDING).values_list("id", flat=True):
        jobs.docker_rollout.delay_on_commit(tid)


def cancel_batch(batch: RolloutBatch, *, user=None) -> bool:
    """Stop a batch: what has not run is marked as such, running trajectories stop at their
    next turn. False when the batch had already finished."""
    with transaction.atomic():
        if not RolloutBatch.objects.filter(pk=batch.pk, status__in=OPEN_BATCH).update(
                status=RolloutBatchStatus.CANCELLED, finished_at=timezone.now(),
                message=f"cancelled by {getattr(user, 'username', None) or 'an operator'}"):
            return False
        batch.trajectories.filter(status__in=CLAIMABLE).update(
            status=TrajectoryStatus.ERROR, failure="cancelled", message="the batch was cancelled before it ran",
            claimed_at=None, finished_at=timezone.now())
        _audit(user, "rollout.cancel", batch, before={"status": batch.status}, after={"status": RolloutBatchStatus.CANCELLED})
    return True


def progress(batch: RolloutBatch) -> dict:
    """Counts per status and the pass rate so far, in one grouped query."""
    counts = dict(batch.trajectories.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    done = batch.trajectories.filter(status=TrajectoryStatus.DONE).aggregate(
        n=Count("id"), passed=Count("id", filter=Q(passed=True)))
    total = sum(counts.values())
    finished = counts.get(TrajectoryStatus.DONE, 0) + counts.get(TrajectoryStatus.ERROR, 0)
    return {
        "total": total, "finished": finished, "counts": counts,
        "pending": counts.get(TrajectoryStatus.PENDING, 0), "running": counts.get(TrajectoryStatus.RUNNING, 0),
        "waiting": counts.get(TrajectoryStatus.WAITING_FOR_DOCKER, 0), "done": counts.get(TrajectoryStatus.DONE, 0),
        "error": counts.get(TrajectoryStatus.ERROR, 0), "passed": done["passed"],
        "pass_rate": (done["passed"] / done["n"]) if done["n"] else None,
        "percent": round(100 * finished / total) if total else 100,
    }


def finish_if_done(batch_id: int) -> bool:
    """Mark the batch done once nothing in it is left to run."""
    if Trajectory.objects.filter(batch_id=batch_id, status__in=UNFINISHED).exists():
        return False
    batch = RolloutBatch.objects.filter(pk=batch_id).first()
    if batch is None:
        return False
    p = progress(batch)
    message = f"{p['done']} finished, {p['passed']} passed" + (f", {p['error']} errors" if p["error"] else "")
    return bool(RolloutBatch.objects.filter(pk=batch_id, status__in=OPEN_BATCH).update(
        status=RolloutBatchStatus.DONE, finished_at=timezone.now(), message=message))


def claim_timeout(batch: RolloutBatch) -> timedelta:
    """Longer than one trajectory can take (build, agent budget, verifier, cleanup): a claim this
    old belongs to a worker that died."""
    return timedelta(seconds=BUILD_CAP_S + batch.timeout_s + VERIFIER_CAP_S + 300)


def requeue_stale(batch: RolloutBatch) -> list[int]:
    cutoff = timezone.now() - claim_timeout(batch)
    stale = list(batch.trajectories.filter(status=TrajectoryStatus.RUNNING, claimed_at__lt=cutoff)
                 .values_list("id", flat=True))
    if stale:
        Trajectory.objects.filter(pk__in=stale, status=TrajectoryStatus.RUNNING, claimed_at__lt=cutoff).update(
            status=TrajectoryStatus.PENDING, claimed_at=None, message="its worker stopped answering; queued again")
    return stale


def trajectory_finished(batch_id: int) -> None:
    """After a trajectory's job: queue the advance of its batch."""
    jobs.advance_rollouts.delay_on_commit(batch_id)


def advance_batch(batch_id: int) -> int:
    """After a trajectory: queue the trajectories of dead workers again and close the batch when
    it is done. Returns how many were queued."""
    batch = RolloutBatch.objects.filter(pk=batch_id, status__in=OPEN_BATCH).first()
    if batch is None:
        return 0
    stale = requeue_stale(batch)
    for tid in stale:
        jobs.docker_rollout.delay_on_commit(tid)
    finish_if_done(batch_id)
    return len(stale)


def resume(batch: RolloutBatch | None = None, *, all_pending: bool = False) -> int:
    """Queue again what `reclaim` gives back (the periodic job, the Resume button, the CLI).
    Returns how many trajectories were queued."""
    ids = reclaim(batch, all_pending=all_pending)
    for tid in ids:
        jobs.docker_rollout.delay_on_commit(tid)
    return len(ids)


def reclaim(batch: RolloutBatch | None = None, *, all_pending: bool = False) -> list[int]:
    """Waiting trajectories go back to work once an engine answers; stale ones are reclaimed.
    `all_pending` also gives back every pending trajectory (after a lost queue). Returns the
    trajectories to run, each once."""
    batches = RolloutBatch.objects.filter(status__in=OPEN_BATCH)
    if batch is not None:
        batches = batches.filter(pk=batch.pk)
    ids: list[int] = []
    waiting = Trajectory.objects.filter(batch__in=batches, status=TrajectoryStatus.WAITING_FOR_DOCKER)
    if waiting.exists():
        try:
            docker_client(timeout_s=10).close()
        except de.EngineUnavailable:
            pass
        else:
            ids += list(waiting.values_list("id", flat=True))
            waiting.update(status=TrajectoryStatus.PENDING, claimed_at=None, message="")
    for b in batches:
        ids += requeue_stale(b)
    if all_pending:
        ids += list(Trajectory.objects.filter(batch__in=batches, status=TrajectoryStatus.PENDING)
                    .values_list("id", flat=True))
    return list(dict.fromkeys(ids))


def run_batch(batch_id: int, *, client=None) -> RolloutBatch:
    """Every claimable trajectory of the batch in this process (the CLI's --wait, tests)."""
    for tid in Trajectory.objects.filter(batch_id=batch_id, status__in=CLAIMABLE).order_by("id").values_list(
            "id", flat=True):
        run_trajectory(tid, client=client)
    finish_if_done(batch_id)
    return RolloutBatch.objects.get(pk=batch_id)


def _audit(user, action: str, batch: RolloutBatch, *, before=None, after=None) -> None:
    AuditEvent.objects.create(actor=user if getattr(user, "is_authenticated", False) else None, action=action,
                              object_type="rollout_batch", object_id=str(batch.pk), before=before, after=after)


# --- one trajectory -----------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a job learns from run_trajectory: `retry_in` seconds when another worker holds a
    claim that has not expired yet (a redelivered message)."""

    status: str = ""
    batch_id: int | None = None
    retry_in: float | None = None


class _Cancelled(Exception):
    pass


class _ClaimLost(Exception):
    pass


def _claim(trajectory_id: int):
    traj = Trajectory.objects.select_related("batch").filter(pk=trajectory_id).first()
    if traj is None or traj.batch.status not in OPEN_BATCH:
        return traj, None
    return traj, Trajectory.claim(trajectory_id, stale_before=timezone.now() - claim_timeout(traj.batch))


def llm_settings(batch: RolloutBatch) -> LLMSettings:
    """The batch's endpoint with its model and its "llm" config over them, laid the same way as a
    synthesis run's (scenarios.llm.llm_settings)."""
    given = dict((batch.config or {}).get("llm") or {})
    if batch.model and batch.model != "default":
        given["model"] = batch.model
    return run_llm_settings(given)


def subject_for(traj: Trajectory) -> str:
    """Stable across databases (task subject, model, attempt), so one recorded cassette replays
    the same attempts in another batch or another installation."""
    return f"{task_subject(traj.task)}:model:{traj.batch.model}:attempt:{traj.attempt + 1}"


def run_trajectory(trajectory_id: int, *, client=None) -> Outcome:
    """Claim the trajectory, run it, store what happened. See the module docstring."""
    from scenarios.llm import DbRecorder

    traj, token = _claim(trajectory_id)
    if traj is None:
        return Outcome()
    if token is None:
        if traj.status == TrajectoryStatus.RUNNING and traj.claimed_at is not None:
            left = (traj.claimed_at + claim_timeout(traj.batch) - timezone.now()).total_seconds()
            return Outcome(status="busy", batch_id=traj.batch_id, retry_in=max(5.0, left + 5))
        return Outcome(status=traj.status, batch_id=traj.batch_id)
    traj = Trajectory.objects.select_related("batch__run", "task__scenario__pair", "version").get(pk=trajectory_id)
    batch = traj.batch
    RolloutBatch.objects.filter(pk=batch.pk, status=RolloutBatchStatus.QUEUED).update(status=RolloutBatchStatus.RUNNING)
    Turn.objects.filter(trajectory=traj).delete()  # a dead worker's partial transcript
    own_client = client is None
    try:
        if own_client:
            client = docker_client()
    except de.EngineUnavailable as exc:
        traj.release(token, TrajectoryStatus.WAITING_FOR_DOCKER, str(exc))
        return Outcome(status=TrajectoryStatus.WAITING_FOR_DOCKER, batch_id=batch.pk)
    recorder = DbRecorder(batch.run)
    llm = None
    subject = subject_for(traj)
    try:
        # no cache: attempts must be independent; the endpoint limits of every other worker apply
        llm = LLMClient(llm_settings(batch), recorder=recorder, limiter=endpoint_limiter())
        with tempfile.TemporaryDirectory(prefix="facet-rollout-") as tmp:
            task_dir = write_harbor_task(traj.version, Path(tmp) / "task")
            try:
                image = de.build_image(client, task_dir / "environment", base_image=base_image(),
                                       timeout_s=BUILD_CAP_S, labels={"facet.rollout": str(traj.pk)})
            except (de.DockerfileLintError, de.BuildFailed) as exc:
                return _finish_error(traj, token, "build_failed", f"the environment did not build: {exc}")
            except de.BaseImageMissing as exc:
                traj.release(token, TrajectoryStatus.WAITING_FOR_DOCKER, f"{exc} (run `facet base-image`)")
                return Outcome(status=TrajectoryStatus.WAITING_FOR_DOCKER, batch_id=batch.pk)
            result = ro.run_rollout(
                client, image_tag=image.image_tag, task_dir=task_dir, llm=llm, model_label=batch.model,
                subject=subject, max_turns=batch.max_turns, time_budget_s=float(batch.timeout_s),
                limits=val.DEFAULT_LIMITS, verifier_timeout_cap_s=VERIFIER_CAP_S, owner=worker_owner(),
                on_turn=lambda turn: _store_live_turn(traj, token, turn, recorder, subject))
    except _Cancelled:
        return _finish_error(traj, token, "cancelled", "the batch was cancelled while this attempt ran")
    except _ClaimLost:
        return Outcome(status="lost", batch_id=batch.pk)
    except de.TransientEngineError as exc:
        traj.release(token, TrajectoryStatus.WAITING_FOR_DOCKER, f"Docker engine trouble: {exc}")
        return Outcome(status=TrajectoryStatus.WAITING_FOR_DOCKER, batch_id=batch.pk)
    except Exception as exc:  # recorded on the trajectory, so one bad attempt never stalls the batch
        log.exception("rollout trajectory %s failed", trajectory_id)
        return _finish_error(traj, token, "error", f"{type(exc).__name__}: {exc}")
    finally:
        if llm is not None:
            llm.close()
        if own_client and client is not None:
            client.close()
    return _record(traj, token, result, recorder, subject)


def _still_mine(traj: Trajectory, token) -> None:
    row = Trajectory.objects.filter(pk=traj.pk).values_list("status", "claimed_at", "batch__status").first()
    if row is None or row[0] != TrajectoryStatus.RUNNING or row[1] != token:
        raise _ClaimLost()
    if row[2] == RolloutBatchStatus.CANCELLED:
        raise _Cancelled()


def _finish_error(traj: Trajectory, token, failure: str, message: str) -> Outcome:
    """An attempt that says nothing about the model (infrastructure, cancellation): recorded,
    never counted in a pass rate (only done trajectories are)."""
    traj.finish_error(token, failure, message)
    return Outcome(status=TrajectoryStatus.ERROR, batch_id=traj.batch_id)


def _describe(run: ro.CommandRun) -> str:
    head = f"$ {run.command}"
    if run.skipped:
        return f"{head}\n[not run: {run.skipped}]"
    if run.timed_out:
        status = f"[killed after {run.timeout_s:g} s: timeout]"
    elif run.killed_by:
        status = f"[killed: {run.killed_by} limit]"
    else:
        status = f"[exit code {run.exit_code}, {run.seconds:.1f} s]"
    body = run.output.rstrip("\n")
    return f"{head}\n{body}\n{status}" if body else f"{head}\n{status}"


def _turn_row(traj: Trajectory, turn: ro.Turn, call_ids: dict[str, int], subject: str) -> Turn:
    commands = [shell_commands.command_record(c.command, exit_code=c.exit_code, seconds=round(c.seconds, 3),
                                  timeout_s=c.timeout_s, timed_out=c.timed_out, skipped=c.skipped,
                                  killed_by=c.killed_by) for c in turn.commands]
    output = "\n\n".join(_describe(c) for c in turn.commands)
    if turn.parse_error:
        output = f"[the reply could not be used: {turn.parse_error}]\n{turn.model_text}"
    analysis = turn.analysis if not turn.parse_error else ""
    return Turn(trajectory=traj, index=turn.index, analysis=analysis, plan=turn.plan, commands=commands,
                output=val.cap_text(output, TURN_OUTPUT_CAP), state=turn.state, task_complete=turn.task_complete,
                seconds=round(turn.seconds, 3), prompt_tokens=turn.tokens_in, completion_tokens=turn.tokens_out,
                llm_call_id=call_ids.get(f"{subject}:turn{turn.index}"))


def _call_ids(recorder) -> dict[str, int]:
    # the last call for a turn's subject is its answer (the first may be an invalid reply re-asked)
    return {call.subject: call.pk for call in recorder.calls}


def _store_live_turn(traj: Trajectory, token, turn: ro.Turn, recorder, subject: str) -> None:
    _still_mine(traj, token)
    row = _turn_row(traj, turn, _call_ids(recorder), subject)
    Turn.objects.filter(trajectory=traj, index=turn.index).delete()
    row.save()
    Trajectory.objects.filter(pk=traj.pk, claimed_at=token).update(n_turns=turn.index)


def _failure_of(result: ro.AgentRun) -> str:
    if result.passed:
        return ""
    if result.stop_reason in ("turn_budget", "time_budget", "model_error", "sandbox_killed"):
        return result.stop_reason
    return "no_reward" if result.reward is None else "tests_failed"


def _record(traj: Trajectory, token, result: ro.AgentRun, recorder, subject: str) -> Outcome:
    if result.stop_reason == "infra_error":
        if result.error.startswith(("TransientEngineError", "EngineUnavailable")):
            traj.release(token, TrajectoryStatus.WAITING_FOR_DOCKER, f"Docker engine trouble: {result.error}")
            return Outcome(status=TrajectoryStatus.WAITING_FOR_DOCKER, batch_id=traj.batch_id)
        return _finish_error(traj, token, "infra_error", result.error)
    answered = any(not t.parse_error for t in result.turns)
    if result.stop_reason == "model_error" and not answered:
        # a model that never answered says nothing about the task (a wrong key, a dead endpoint)
        return _finish_error(traj, token, "model_error", f"the model never answered: {result.error}")
    logs = data_dir("rollouts", traj.pk)
    (logs / "trajectory.json").write_text(ro.agent_run_json(result))
    failure = _failure_of(result)
    call_ids = _call_ids(recorder)
    with transaction.atomic():
        trial = Trial.objects.create(
            version=traj.version, kind=TrialKind.ROLLOUT, index=traj.attempt, reward=result.reward,
            passed=result.passed, failure=failure, reason=(result.error or "")[:5000],
            verifier_output=val.cap_text(result.verifier_output, 16 * 1024), solution_seconds=result.agent_seconds,
            verifier_seconds=result.verifier_seconds, seconds=result.total_seconds, logs_path=str(logs))
        updated = Trajectory.objects.filter(pk=traj.pk, status=TrajectoryStatus.RUNNING, claimed_at=token).update(
            status=TrajectoryStatus.DONE, reward=result.reward, passed=result.passed, failure=failure,
            message=(result.error or "")[:5000], trial=trial, n_turns=len(result.turns),
            seconds=round(result.total_seconds, 3), prompt_tokens=result.tokens_in,
            completion_tokens=result.tokens_out, claimed_at=None, finished_at=timezone.now())
        if not updated:  # another worker took it over: its result counts, not ours
            transaction.set_rollback(True)
            return Outcome(status="lost", batch_id=traj.batch_id)
        TestResult.objects.bulk_create([
            TestResult(trial=trial, name=str(t.get("name", ""))[:500], outcome=str(t.get("outcome", ""))[:10],
                       message=str(t.get("message") or "")[:5000]) for t in result.test_results[:2000]])
        have = set(Turn.objects.filter(trajectory=traj).values_list("index", flat=True))
        Turn.objects.bulk_create([_turn_row(traj, t, call_ids, subject) for t in result.turns if t.index not in have])
    summary.refresh_summary(traj.task_id)
    return Outcome(status=TrajectoryStatus.DONE, batch_id=traj.batch_id)

