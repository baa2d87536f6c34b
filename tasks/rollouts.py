"""Rollouts: agent attempts at our tasks, run here (a Terminus-2-style loop) or imported from
Harbor job directories, each graded by the task version's own verifier.

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

Harbor import (`import_results`): each job directory is imported in ONE transaction, all or
nothing. A job whose trials are malformed (result.json not JSON, task_name missing, a wrongly
typed field) is refused as a whole with every problem named by trial, file and field; so is a
partial job (trials without result.json: still running, or interrupted) unless a partial import
is asked for, in which case the missing trials are listed in the batch report. Per-trial
transactions would leave a batch whose k attempts per task are silently incomplete, which is
exactly what pass@k must not see. Trials whose task is not ours are not errors: they are listed
by name, with the reason, in the batch report.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from facet_site.lib import docker_engine as de
from facet_site.lib import harbor
from facet_site.lib import harbor_results as hr
from facet_site.lib import rollout as ro
from facet_site.lib import validation as val
from facet_site.lib.llm import LLMClient, LLMSettings

from . import services, summary
from .apps import base_image
from .filters import TaskFilter
from .models import (
    AuditEvent,
    BatchStatus,
    RolloutBatch,
    Task,
    TaskVersion,
    TestResult,
    Trajectory,
    TrajectoryStatus,
    Trial,
    TrialKind,
    Turn,
)

log = logging.getLogger(__name__)

DEFAULT_QUERY = "status=validated"
AGENT = "terminus-2"
OPEN_BATCH = [BatchStatus.QUEUED, BatchStatus.RUNNING]
UNFINISHED = [TrajectoryStatus.PENDING, TrajectoryStatus.RUNNING, TrajectoryStatus.WAITING_FOR_DOCKER]
CLAIMABLE = [TrajectoryStatus.PENDING, TrajectoryStatus.WAITING_FOR_DOCKER]
LIMITS = {"attempts": (1, 20), "max_turns": (1, 200), "timeout_s": (30, 4 * 3600)}
MAX_TRAJECTORIES = 50_000
# caps on what task.toml asks for, as validation's (services.DEFAULT_CONSTRUCTION)
BUILD_CAP_S = 600
VERIFIER_CAP_S = 600
TURN_OUTPUT_CAP = 20_000


class RolloutError(ValueError):
    """A batch cannot be started as asked (bad parameters, nothing selected)."""


# --- batches ------------------------------------------------------------------------------------


def selected_tasks(query: str | None):
    """The tasks a batch would roll out: the task filter's selection (default: validated tasks),
    those with a version only."""
    tf = TaskFilter.from_query(query if query and query.strip() else DEFAULT_QUERY)
    return tf, tf.queryset().filter(current_version__isnull=False)


def create_batch(*, query: str = "", model: str = "", attempts: int = 3, max_turns: int = 30, timeout_s: int = 900,
                 name: str = "", user=None, llm: dict | None = None, run=None) -> RolloutBatch:
    """A queued batch with one pending trajectory per (selected task, attempt). Dispatch with
    `start_batch` (after commit) or run in process with `run_batch`."""
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
    model = (model or "").strip()[:200] or LLMSettings.from_env().model or "default"
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
    from . import jobs

    ids = list(batch.trajectories.filter(status=TrajectoryStatus.PENDING).values_list("id", flat=True))
    transaction.on_commit(lambda: [jobs.docker_rollout.delay(i) for i in ids])


def cancel_batch(batch: RolloutBatch, *, user=None) -> bool:
    """Stop a batch: what has not run is marked as such, running trajectories stop at their
    next turn. False when the batch had already finished."""
    with transaction.atomic():
        if not RolloutBatch.objects.filter(pk=batch.pk, status__in=OPEN_BATCH).update(
                status=BatchStatus.CANCELLED, finished_at=timezone.now(),
                message=f"cancelled by {getattr(user, 'username', None) or 'an operator'}"):
            return False
        batch.trajectories.filter(status__in=CLAIMABLE).update(
            status=TrajectoryStatus.ERROR, failure="cancelled", message="the batch was cancelled before it ran",
            claimed_at=None, finished_at=timezone.now())
        _audit(user, "rollout.cancel", batch, before={"status": batch.status}, after={"status": BatchStatus.CANCELLED})
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
        status=BatchStatus.DONE, finished_at=timezone.now(), message=message))


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


def advance_batch(batch_id: int, *, dispatch: Callable[[int], None]) -> int:
    """After a trajectory: hand trajectories of dead workers to `dispatch` again and close the
    batch when it is done. Returns how many were dispatched."""
    batch = RolloutBatch.objects.filter(pk=batch_id, status__in=OPEN_BATCH).first()
    if batch is None:
        return 0
    stale = requeue_stale(batch)
    for tid in stale:
        dispatch(tid)
    finish_if_done(batch_id)
    return len(stale)


def resume(batch: RolloutBatch | None = None, *, dispatch: Callable[[int], None], all_pending: bool = False) -> int:
    """Waiting trajectories go back to work once an engine answers; stale ones are reclaimed.
    `all_pending` also re-dispatches every pending trajectory (after a lost queue)."""
    batches = RolloutBatch.objects.filter(status__in=OPEN_BATCH)
    if batch is not None:
        batches = batches.filter(pk=batch.pk)
    ids: list[int] = []
    waiting = Trajectory.objects.filter(batch__in=batches, status=TrajectoryStatus.WAITING_FOR_DOCKER)
    if waiting.exists():
        try:
            de.connect(timeout_s=10).close()
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
    for tid in dict.fromkeys(ids):
        dispatch(tid)
    return len(set(ids))


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
    now = timezone.now()
    cutoff = now - claim_timeout(traj.batch)
    took = Trajectory.objects.filter(pk=trajectory_id).filter(
        Q(status__in=CLAIMABLE) | Q(status=TrajectoryStatus.RUNNING, claimed_at__lt=cutoff)).update(
        status=TrajectoryStatus.RUNNING, claimed_at=now, message="")
    return traj, (now if took else None)


def llm_settings(batch: RolloutBatch) -> LLMSettings:
    """The environment's LLM settings with the batch's model and its "llm" config over them
    (provider, base_url, cassette, record, temperature, max_tokens)."""
    base = LLMSettings.from_env()
    given = (batch.config or {}).get("llm") or {}
    names = {"provider": "provider", "base_url": "base_url", "cassette": "cassette_path", "record": "record_path",
             "temperature": "temperature", "max_tokens": "max_tokens", "timeout": "timeout"}
    overrides = {field: given[key] for key, field in names.items() if given.get(key) is not None}
    if batch.model and batch.model != "default":
        overrides["model"] = batch.model
    return dataclasses.replace(base, **overrides) if overrides else base


def subject_for(traj: Trajectory) -> str:
    """Stable across databases (task subject, model, attempt), so one recorded cassette replays
    the same attempts in another batch or another installation."""
    return f"{services.task_subject(traj.task)}:model:{traj.batch.model}:attempt:{traj.attempt + 1}"


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
    RolloutBatch.objects.filter(pk=batch.pk, status=BatchStatus.QUEUED).update(status=BatchStatus.RUNNING)
    Turn.objects.filter(trajectory=traj).delete()  # a dead worker's partial transcript
    own_client = client is None
    try:
        if own_client:
            client = de.connect()
    except de.EngineUnavailable as exc:
        _release(traj, token, TrajectoryStatus.WAITING_FOR_DOCKER, str(exc))
        return Outcome(status=TrajectoryStatus.WAITING_FOR_DOCKER, batch_id=batch.pk)
    recorder = DbRecorder(batch.run)
    llm = None
    subject = subject_for(traj)
    try:
        llm = LLMClient(llm_settings(batch), recorder=recorder)  # no cache: attempts must be independent
        with tempfile.TemporaryDirectory(prefix="facet-rollout-") as tmp:
            task_dir = services.write_harbor_task(traj.version, Path(tmp) / "task")
            try:
                image = de.build_image(client, task_dir / "environment", base_image=base_image(),
                                       timeout_s=BUILD_CAP_S, labels={"facet.rollout": str(traj.pk)})
            except (de.DockerfileLintError, de.BuildFailed) as exc:
                return _finish_error(traj, token, "build_failed", f"the environment did not build: {exc}")
            except de.BaseImageMissing as exc:
                _release(traj, token, TrajectoryStatus.WAITING_FOR_DOCKER, f"{exc} (run `facet base-image`)")
                return Outcome(status=TrajectoryStatus.WAITING_FOR_DOCKER, batch_id=batch.pk)
            result = ro.run_rollout(
                client, image_tag=image.image_tag, task_dir=task_dir, llm=llm, model_label=batch.model,
                subject=subject, max_turns=batch.max_turns, time_budget_s=float(batch.timeout_s),
                limits=val.DEFAULT_LIMITS, verifier_timeout_cap_s=VERIFIER_CAP_S, owner=services._owner(),
                on_turn=lambda turn: _store_live_turn(traj, token, turn, recorder, subject))
    except _Cancelled:
        return _finish_error(traj, token, "cancelled", "the batch was cancelled while this attempt ran")
    except _ClaimLost:
        return Outcome(status="lost", batch_id=batch.pk)
    except de.TransientEngineError as exc:
        _release(traj, token, TrajectoryStatus.WAITING_FOR_DOCKER, f"Docker engine trouble: {exc}")
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
    if row[2] == BatchStatus.CANCELLED:
        raise _Cancelled()


def _release(traj: Trajectory, token, status: str, message: str) -> None:
    Trajectory.objects.filter(pk=traj.pk, status=TrajectoryStatus.RUNNING, claimed_at=token).update(
        status=status, claimed_at=None, message=message[:5000])


def _finish_error(traj: Trajectory, token, failure: str, message: str) -> Outcome:
    """An attempt that says nothing about the model (infrastructure, cancellation): recorded,
    never counted in a pass rate (only done trajectories are)."""
    Trajectory.objects.filter(pk=traj.pk, status=TrajectoryStatus.RUNNING, claimed_at=token).update(
        status=TrajectoryStatus.ERROR, failure=failure[:40], message=message[:5000], claimed_at=None,
        finished_at=timezone.now())
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
    commands = [hr.command_record(c.command, exit_code=c.exit_code, seconds=round(c.seconds, 3),
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


def _failure_of(result: ro.Trajectory) -> str:
    if result.passed:
        return ""
    if result.stop_reason in ("turn_budget", "time_budget", "model_error", "sandbox_killed"):
        return result.stop_reason
    return "no_reward" if result.reward is None else "tests_failed"


def _record(traj: Trajectory, token, result: ro.Trajectory, recorder, subject: str) -> Outcome:
    if result.stop_reason == "infra_error":
        if result.error.startswith(("TransientEngineError", "EngineUnavailable")):
            _release(traj, token, TrajectoryStatus.WAITING_FOR_DOCKER, f"Docker engine trouble: {result.error}")
            return Outcome(status=TrajectoryStatus.WAITING_FOR_DOCKER, batch_id=traj.batch_id)
        return _finish_error(traj, token, "infra_error", result.error)
    answered = any(not t.parse_error for t in result.turns)
    if result.stop_reason == "model_error" and not answered:
        # a model that never answered says nothing about the task (a wrong key, a dead endpoint)
        return _finish_error(traj, token, "model_error", f"the model never answered: {result.error}")
    logs = services.data_dir("rollouts", traj.pk)
    (logs / "trajectory.json").write_text(ro.trajectory_json(result))
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


# --- Harbor job import --------------------------------------------------------------------------


class ImportRefused(Exception):
    """Nothing of this job was imported; `problems` name trial, file, field and what is wrong."""

    def __init__(self, job: str, problems: list[dict]):
        self.job = job
        self.problems = problems
        first = problems[0] if problems else {}
        where = "/".join(p for p in (first.get("trial"), first.get("file")) if p)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{job}: {where + ': ' if where else ''}{first.get('error', 'refused')}{more}")


def _problem(trial: str, file: str, error: str, field: str = "") -> dict:
    return {"trial": trial, "file": file, "field": field or "", "error": error}


class VersionMatcher:
    """Our task version behind a Harbor trial, by (in order): the task directory Harbor read, if
    it is on this machine (its content hash, else the facet_version_hash in its task.toml);
    the task name and Harbor's checksum of the directory (every version of the tasks so named,
    then every version); the name alone when the result carries no checksum (older Harbor)."""

    def __init__(self):
        self._names: dict[str, list[int]] | None = None
        self._checksums: dict[int, str] = {}
        self._all_scanned = False
        self._by_checksum: dict[str, int] = {}

    def _tasks_named(self, name: str) -> list[int]:
        if self._names is None:
            self._names = {}
            for pk, task_name in Task.objects.values_list("id", "name"):
                for key in {task_name, services._slug(task_name)}:
                    self._names.setdefault(key, []).append(pk)
        return self._names.get(name, [])

    def _checksum(self, version: TaskVersion) -> str:
        if version.pk not in self._checksums:
            try:
                self._checksums[version.pk] = hr.task_checksum(services.version_bundle(version))
            except (harbor.TaskFormatError, ValueError):
                self._checksums[version.pk] = ""
            self._by_checksum.setdefault(self._checksums[version.pk], version.pk)
        return self._checksums[version.pk]

    def match(self, trial: hr.TrialRead) -> tuple[TaskVersion | None, str]:
        result = trial.result
        name = result.task_name.rsplit("/", 1)[-1]
        task_ids = self._tasks_named(name) or self._tasks_named(result.task_name)
        candidates = list(TaskVersion.objects.filter(task_id__in=task_ids).select_related("task").order_by("id"))
        local = Path(trial.task_path) if trial.task_path else None
        if local is not None and local.is_dir():
            try:
                bundle = harbor.read_task_dir(local)
            except (harbor.TaskFormatError, OSError, ValueError):
                bundle = None
            if bundle is not None:
                version = TaskVersion.objects.filter(content_hash=harbor.content_hash(bundle)).select_related("task").first()
                if version is not None:
                    return version, "content hash of the task directory"
                wanted = bundle.config.version_hash
                for version in candidates if wanted else []:
                    if services.version_bundle(version).config.version_hash == wanted:
                        return version, "facet_version_hash in task.toml"
        checksum = result.task_checksum
        if checksum:
            for version in candidates:
                if self._checksum(version) == checksum:
                    return version, "name and checksum"
            if not self._all_scanned:
                for version in TaskVersion.objects.select_related("task").exclude(pk__in=list(self._checksums)).iterator():
                    self._checksum(version)
                self._all_scanned = True
            pk = self._by_checksum.get(checksum)
            if pk is not None:
                return TaskVersion.objects.select_related("task").get(pk=pk), "checksum (the name differs)"
            if candidates:
                return None, (f"task_checksum {checksum[:16]}… matches none of the {len(candidates)} version(s) of "
                              f"our task(s) named {name!r} (changed since it was exported?)")
            return None, f"no task named {name!r} and no version with task_checksum {checksum[:16]}…"
        tasks = {v.task_id: v.task for v in candidates}
        if len(tasks) == 1:
            task = next(iter(tasks.values()))
            if task.current_version_id:
                return TaskVersion.objects.select_related("task").get(pk=task.current_version_id), \
                    "name only (the result has no task_checksum)"
        if len(tasks) > 1:
            return None, f"{len(tasks)} tasks are named {name!r} and the result has no task_checksum to tell them apart"
        return None, f"no task named {name!r}"


def _trial_records(batch: RolloutBatch, trial: hr.TrialRead, version: TaskVersion, attempt: int, how: str):
    r = trial.result
    passed = r.reward is not None and r.reward >= 1.0
    failure = "" if passed else (r.exception or ("no_reward" if r.reward is None else "tests_failed"))
    tokens_in = r.tokens_in if r.tokens_in is not None else sum(t.tokens_in for t in trial.turns)
    tokens_out = r.tokens_out if r.tokens_out is not None else sum(t.tokens_out for t in trial.turns)
    row = Trial.objects.create(
        version=version, kind=TrialKind.ROLLOUT, index=attempt, reward=r.reward, passed=passed, failure=failure[:40],
        reason=(r.exception_message or "")[:5000], verifier_output=val.cap_text(r.verifier_stdout or "", 16 * 1024),
        solution_seconds=trial.agent_seconds, verifier_seconds=trial.verifier_seconds or 0,
        seconds=trial.seconds or 0, logs_path=str(trial.path))
    traj = Trajectory.objects.create(
        batch=batch, task_id=version.task_id, version=version, attempt=attempt, model=(r.model or "")[:200],
        agent=(r.agent_name or "")[:100], status=TrajectoryStatus.DONE, reward=r.reward, passed=passed,
        failure=failure[:40], message=(f"matched by {how}. " + (r.exception_message or ""))[:5000], trial=row,
        n_turns=min(len(trial.turns), 32767), seconds=trial.agent_seconds or trial.seconds or 0,
        prompt_tokens=max(0, tokens_in), completion_tokens=max(0, tokens_out), source_path=str(trial.path)[:500],
        finished_at=r.finished_at or timezone.now())
    TestResult.objects.bulk_create([TestResult(trial=row, name=t.name[:500], outcome=t.outcome[:10],
                                               message=(t.message or "")[:5000]) for t in r.test_results[:2000]])
    turns = []
    for t in trial.turns[:32767]:
        records = [hr.command_record(c) for c in t.commands]
        turns.append(Turn(trajectory=traj, index=t.index, analysis=t.analysis, plan=t.plan, commands=records,
                          output=val.cap_text(t.output, TURN_OUTPUT_CAP), state=ro.turn_state([c["kind"] for c in records]),
                          task_complete=t.task_complete, prompt_tokens=t.tokens_in, completion_tokens=t.tokens_out))
    Turn.objects.bulk_create(turns, batch_size=1000)
    return traj


def import_job(path: Path, *, user=None, allow_partial: bool = False, name: str = "") -> RolloutBatch:
    """One Harbor job directory as a RolloutBatch(source="harbor"), all or nothing (module
    docstring). Raises ImportRefused with every problem when it cannot be imported whole."""
    job = hr.read_job(Path(path))
    problems = [_problem(e.trial, e.file, e.message, e.field or "") for e in job.errors]
    if job.incomplete and not allow_partial:
        problems += [_problem(t, "result.json", "missing: the trial has not finished (the job is still running or was "
                                                "interrupted); import it when it has, or ask for a partial import")
                     for t in job.incomplete]
    if not job.trials and not problems:
        problems.append(_problem("", ".", "no trials: expected <job>/<trial>/result.json"))
    if problems:
        raise ImportRefused(job.name, problems)
    earlier = RolloutBatch.objects.filter(source="harbor", config__job_id=job.job_id).first()
    if earlier is not None:
        raise ImportRefused(job.name, [_problem("", "result.json", f"this job ({job.job_id}) was already imported as "
                                                                   f"batch #{earlier.pk}", "id")])
    matcher = VersionMatcher()
    matches, unmatched = [], []
    for trial in job.trials:
        version, how = matcher.match(trial)
        if version is None:
            unmatched.append({"trial": trial.name, "task_name": trial.result.task_name, "reason": how})
        else:
            matches.append((trial, version, how))
    models = sorted({t.result.model for t, _, _ in matches if t.result.model})
    agents = sorted({t.result.agent_name for t, _, _ in matches if t.result.agent_name})
    attempts: dict[int, int] = {}
    with transaction.atomic():
        batch = RolloutBatch.objects.create(
            name=(name or job.name)[:200], source="harbor", model=(models[0] if len(models) == 1 else
                                                                   ("mixed" if models else ""))[:200],
            agent=(agents[0] if len(agents) == 1 else ("mixed" if agents else "unknown"))[:100],
            attempts=0, status=BatchStatus.DONE, created_by=user, finished_at=timezone.now(),
            selection={"path": str(job.path)},
            config={"job_id": job.job_id, "models": models, "agents": agents},
            report={"trials": len(job.trials), "matched": len(matches), "unmatched": unmatched,
                    "incomplete": job.incomplete, "warnings": job.warnings[:200],
                    "matched_by": _count_by(how for _, _, how in matches)},
            message=f"{len(matches)} of {len(job.trials)} trials matched our tasks"
                    + (f", {len(job.incomplete)} incomplete trials left out" if job.incomplete else ""))
        for trial, version, how in matches:
            attempt = attempts.get(version.task_id, 0)
            attempts[version.task_id] = attempt + 1
            _trial_records(batch, trial, version, attempt, how)
        RolloutBatch.objects.filter(pk=batch.pk).update(attempts=max(attempts.values(), default=0))
        _audit(user, "rollout.import", batch, after={"path": str(job.path), "matched": len(matches),
                                                     "unmatched": len(unmatched)})
    for task_id in attempts:
        summary.refresh_summary(task_id)
    return RolloutBatch.objects.get(pk=batch.pk)


def _count_by(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


@dataclass
class ImportOutcome:
    batches: list[RolloutBatch]
    refused: list[ImportRefused]


def import_results(path: Path, *, user=None, allow_partial: bool = False, name: str = "") -> ImportOutcome:
    """Every Harbor job directory at or below `path` (a job, a jobs/ directory, an unpacked
    archive), each in its own transaction."""
    path = Path(path)
    if not path.exists():
        raise ImportRefused(path.name or str(path), [_problem("", str(path), "no such file or directory")])
    jobs = hr.find_job_dirs(path)
    if not jobs:
        raise ImportRefused(path.name, [_problem("", ".", "no Harbor job directory here: expected "
                                                          "<job>/<trial>/result.json (harbor-format.md §4.4)")])
    outcome = ImportOutcome(batches=[], refused=[])
    for job_dir in jobs:
        try:
            outcome.batches.append(import_job(job_dir, user=user, allow_partial=allow_partial,
                                              name=name if len(jobs) == 1 else ""))
        except ImportRefused as exc:
            outcome.refused.append(exc)
    return outcome


def import_upload(upload, *, user=None, allow_partial: bool = False) -> ImportOutcome:
    """An uploaded archive (.zip, .tar.gz, ...) of one or more job directories: unpacked into the
    data directory (kept: the trials' logs stay readable) and imported. An archive with unsafe
    or broken members is refused before anything is read from it."""
    from facet_site.lib import archives

    name = Path(getattr(upload, "name", "") or "upload").name
    if not archives.is_archive(Path(name)):
        raise ImportRefused(name, [_problem("", name, "not an archive: upload a .zip or .tar.gz of the job directory")])
    if getattr(upload, "size", 0) > settings.FACET_INGEST_MAX_UPLOAD_BYTES:
        raise ImportRefused(name, [_problem("", name, f"over {settings.FACET_INGEST_MAX_UPLOAD_BYTES:,} bytes")])
    area = services.data_dir("rollout-imports", uuid.uuid4().hex[:12])
    archive = area / name
    with open(archive, "wb") as fh:
        for chunk in upload.chunks():
            fh.write(chunk)
    root = area / "unpacked"
    root.mkdir()
    problems = archives.unpack(archive, root, max_total_bytes=settings.FACET_INGEST_MAX_ARCHIVE_BYTES)
    archive.unlink(missing_ok=True)
    if problems:
        shutil.rmtree(area, ignore_errors=True)
        raise ImportRefused(name, [_problem("", getattr(p, "path", "") or name, getattr(p, "message", str(p)))
                                   for p in problems])
    outcome = import_results(root, user=user, allow_partial=allow_partial)
    if not outcome.batches:
        shutil.rmtree(area, ignore_errors=True)
    return outcome


def job_report(batch: RolloutBatch) -> dict:
    """The import report for pages, API and CLI."""
    report = batch.report or {}
    return {"trials": report.get("trials", 0), "matched": report.get("matched", 0),
            "unmatched": report.get("unmatched", []), "incomplete": report.get("incomplete", []),
            "warnings": report.get("warnings", []), "matched_by": report.get("matched_by", {})}


def problems_json(exc: ImportRefused) -> str:
    return json.dumps(exc.problems, indent=1)
