"""Rollout batches (claiming, redelivery, dead workers, waiting for Docker, cancelling), what a
finished attempt stores, Harbor job import (good, malformed, partial, unmatched, uploaded), the
pages, the API, the CLI and the permissions; and the whole loop against a real Docker container
with the model's turns from the scripted server, recorded to a cassette and replayed."""
import io
import json
import time
import zipfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from facet_site.lib import harbor
from facet_site.lib import rollout as ro
from demo import scripted_llm
from scenarios.models import LLMCall
from tasks import generation, rollout_imports, rollouts, versions
from tasks.models import (
    AuditEvent,
    RolloutBatchStatus,
    RolloutBatch,
    Task,
    TaskStatus,
    TestResult,
    Trajectory,
    TrajectoryStatus,
    Trial,
    Turn,
)

XSS = "<script>alert('x')</script>"
CLOSED_SOCKET = "unix:///nonexistent/facet-test-docker.sock"

DATA_CSV = "name,qty\napple,3\npear,5\nplum,2\n"
TEST_PY = '''from pathlib import Path


def test_out_exists():
    assert Path("/app/out.txt").is_file()


def test_total():
    assert Path("/app/out.txt").read_text().strip() == "10"
'''
TEST_SH = """#!/bin/bash
cd /app
python3 -m pytest -q -p no:cacheprovider --junitxml=/logs/verifier/junit.xml /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def task_bundle(name: str = "sum-qty", instruction: str = "") -> harbor.TaskBundle:
    return harbor.TaskBundle(
        name=name, instruction=instruction or ("/app/data.csv lists fruit and quantities. Write the total of the qty "
                                               f"column to /app/out.txt as a single number and a newline ({name}).\n"),
        config=harbor.TaskConfig(tags=["csv"], category="csv-excel-and-spreadsheets", agent_timeout_sec=300.0,
                                 verifier_timeout_sec=120.0),
        files={"environment/Dockerfile": b"FROM facet-base:bookworm\nWORKDIR /app\nCOPY data.csv /app/data.csv\n",
               "environment/data.csv": DATA_CSV.encode(), "tests/test.sh": TEST_SH.encode(),
               "tests/test_outputs.py": TEST_PY.encode(),
               "solution/solve.sh": b"#!/bin/bash\nawk -F, 'NR>1 {s+=$2} END {print s}' /app/data.csv > /app/out.txt\n"})


def make_task(tmp_path: Path, name: str = "sum-qty", status=TaskStatus.VALIDATED, instruction: str = "") -> Task:
    d = harbor.write_task_dir(task_bundle(name, instruction), tmp_path / "src" / name)
    task = versions.import_task_dir(d)
    Task.objects.filter(pk=task.pk).update(status=status)
    task.refresh_from_db()
    return task


# --- batches ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_batch_has_one_pending_trajectory_per_task_and_attempt_on_the_current_version(tmp_path, users):
    a, b = make_task(tmp_path, "alpha"), make_task(tmp_path, "beta")
    make_task(tmp_path, "gamma", status=TaskStatus.DISCARDED)
    batch = rollouts.create_batch(model="m1", attempts=3, user=users["reviewer"])  # default: validated tasks
    assert batch.status == RolloutBatchStatus.QUEUED and batch.selection["tasks"] == 2
    rows = list(batch.trajectories.order_by("task_id", "attempt").values_list("task_id", "attempt", "version_id",
                                                                               "status", "model", "agent"))
    assert rows == [(t.pk, n, t.current_version_id, "pending", "m1", "terminus-2") for t in (a, b) for n in range(3)]
    assert batch.config["llm"]["temperature"] == 1.0
    assert AuditEvent.objects.filter(action="rollout.start", object_id=str(batch.pk)).exists()
    only_beta = rollouts.create_batch(query=f"ids={b.pk}", model="m1", attempts=1)
    assert list(only_beta.trajectories.values_list("task_id", flat=True)) == [b.pk]
    for bad in ({"attempts": 0}, {"max_turns": 500}, {"timeout_s": 5}, {"attempts": "3"}):
        with pytest.raises(rollouts.RolloutError):
            rollouts.create_batch(model="m1", **bad)
    with pytest.raises(rollouts.RolloutError, match="strategy: unknown value"):
        rollouts.create_batch(query="strategy=sideways", model="m1")
    with pytest.raises(rollouts.RolloutError, match="no task with a version"):
        rollouts.create_batch(query="status=failed", model="m1")


@pytest.mark.django_db
def test_without_docker_trajectories_wait_and_a_redelivered_message_changes_nothing(tmp_path, monkeypatch):
    task = make_task(tmp_path)
    batch = rollouts.create_batch(query=f"ids={task.pk}", model="m1", attempts=2)
    monkeypatch.setattr(settings, "DOCKER_HOST", CLOSED_SOCKET)
    rollouts.run_batch(batch.pk)
    trajs = list(batch.trajectories.order_by("id"))
    assert {t.status for t in trajs} == {TrajectoryStatus.WAITING_FOR_DOCKER}
    assert trajs[0].message.startswith(f"Docker engine not reachable at {CLOSED_SOCKET}")
    assert all(t.claimed_at is None for t in trajs)
    batch.refresh_from_db()
    assert batch.status == RolloutBatchStatus.RUNNING  # not done: waiting
    assert not rollouts.finish_if_done(batch.pk)
    # a claim another worker holds is left alone: the job is told when to look again
    now = timezone.now()
    Trajectory.objects.filter(pk=trajs[0].pk).update(status=TrajectoryStatus.RUNNING, claimed_at=now)
    outcome = rollouts.run_trajectory(trajs[0].pk)
    assert outcome.status == "busy" and outcome.retry_in > 1000
    assert Trajectory.objects.get(pk=trajs[0].pk).claimed_at == now
    # ... until it is older than the batch can take: a dead worker's, taken over
    old = now - rollouts.claim_timeout(batch) - timedelta(seconds=1)
    Trajectory.objects.filter(pk=trajs[0].pk).update(claimed_at=old)
    outcome = rollouts.run_trajectory(trajs[0].pk)
    assert outcome.status == TrajectoryStatus.WAITING_FOR_DOCKER  # reclaimed, then no engine again
    # a finished trajectory's redelivered message is a no-op
    Trajectory.objects.filter(pk=trajs[1].pk).update(status=TrajectoryStatus.DONE, passed=True, reward=1.0)
    assert rollouts.run_trajectory(trajs[1].pk).status == TrajectoryStatus.DONE
    assert Trajectory.objects.get(pk=trajs[1].pk).passed is True


@pytest.mark.django_db
def test_stale_claims_are_requeued_and_waiting_trajectories_resume_when_an_engine_answers(
        tmp_path, monkeypatch, django_capture_on_commit_callbacks):
    from tasks import jobs

    task = make_task(tmp_path)
    batch = rollouts.create_batch(query=f"ids={task.pk}", model="m1", attempts=3)
    t1, t2, t3 = batch.trajectories.order_by("id")
    stale = timezone.now() - rollouts.claim_timeout(batch) - timedelta(minutes=1)
    Trajectory.objects.filter(pk=t1.pk).update(status=TrajectoryStatus.RUNNING, claimed_at=stale)
    Trajectory.objects.filter(pk=t2.pk).update(status=TrajectoryStatus.RUNNING, claimed_at=timezone.now())
    Trajectory.objects.filter(pk=t3.pk).update(status=TrajectoryStatus.WAITING_FOR_DOCKER)
    dispatched: list[int] = []
    monkeypatch.setattr(jobs.docker_rollout, "delay", dispatched.append)
    with django_capture_on_commit_callbacks(execute=True):
        assert rollouts.advance_batch(batch.pk) == 1
    assert dispatched == [t1.pk] and Trajectory.objects.get(pk=t1.pk).status == TrajectoryStatus.PENDING
    assert Trajectory.objects.get(pk=t2.pk).status == TrajectoryStatus.RUNNING  # alive
    monkeypatch.setattr(settings, "DOCKER_HOST", CLOSED_SOCKET)
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert rollouts.resume(batch) == 0
    assert dispatched == []
    assert Trajectory.objects.get(pk=t3.pk).status == TrajectoryStatus.WAITING_FOR_DOCKER


@pytest.mark.docker
@pytest.mark.django_db
def test_waiting_trajectories_go_back_to_work_once_docker_answers(tmp_path, engine, monkeypatch,
                                                                   django_capture_on_commit_callbacks):
    from tasks import jobs

    task = make_task(tmp_path)
    batch = rollouts.create_batch(query=f"ids={task.pk}", model="m1", attempts=1)
    batch.trajectories.update(status=TrajectoryStatus.WAITING_FOR_DOCKER, message="no engine")
    dispatched: list[int] = []
    monkeypatch.setattr(jobs.docker_rollout, "delay", dispatched.append)
    with django_capture_on_commit_callbacks(execute=True):
        assert rollouts.resume() == 1
    assert len(dispatched) == 1
    assert Trajectory.objects.get(pk=dispatched[0]).status == TrajectoryStatus.PENDING


@pytest.mark.django_db
def test_cancelling_marks_what_has_not_run_and_stops_running_attempts_at_their_next_turn(tmp_path, users):
    task = make_task(tmp_path)
    batch = rollouts.create_batch(query=f"ids={task.pk}", model="m1", attempts=2)
    running, pending = batch.trajectories.order_by("id")
    traj, token = rollouts._claim(running.pk)
    assert token is not None
    assert rollouts.cancel_batch(batch, user=users["reviewer"])
    pending.refresh_from_db()
    assert (pending.status, pending.failure) == (TrajectoryStatus.ERROR, "cancelled")
    with pytest.raises(rollouts._Cancelled):
        rollouts._still_mine(traj, token)
    assert not rollouts.cancel_batch(batch)
    assert RolloutBatch.objects.get(pk=batch.pk).status == RolloutBatchStatus.CANCELLED
    assert rollouts.run_trajectory(pending.pk).status == TrajectoryStatus.ERROR  # nothing claimable


class Recorder:
    def __init__(self, calls):
        self.calls = calls


def fake_result(*, passed: bool) -> ro.AgentRun:
    """What run_rollout returns: three turns (observe, act, confirm) and the verifier's verdict."""
    turns = [
        ro.Turn(index=1, analysis=f"Read it first {XSS}", plan="cat", model_text="{}", tokens_in=100, tokens_out=10,
                seconds=1.5, state="observation", commands=[
                    ro.CommandRun(command="cd /app && cat data.csv", output="name,qty\n", exit_code=0, seconds=0.1,
                                  timed_out=False, kind="observation", timeout_s=30)]),
        ro.Turn(index=2, analysis="Sum it", plan="write", model_text="{}", tokens_in=200, tokens_out=20, seconds=2.0,
                state="action", task_complete=True, commands=[
                    ro.CommandRun(command="printf '10\\n' > /app/out.txt", output="", exit_code=0, seconds=0.1,
                                  timed_out=False, kind="action", timeout_s=30)]),
        ro.Turn(index=3, analysis="Confirm", plan="", model_text="{}", tokens_in=300, tokens_out=5, seconds=0.5,
                state="none", task_complete=True, commands=[]),
    ]
    return ro.AgentRun(turns=turns, reward=1.0 if passed else 0.0, passed=passed, stop_reason="completed",
                         total_seconds=9.0, tokens_in=600, tokens_out=35, agent_seconds=4.0, verifier_seconds=3.0,
                         verifier_output="2 passed", test_results=[
                             {"name": "test_outputs.py::test_out_exists", "outcome": "passed"},
                             {"name": "test_outputs.py::test_total", "outcome": "passed" if passed else "failed",
                              "message": "assert '11' == '10'"}])


@pytest.mark.django_db
def test_a_finished_attempt_stores_trial_tests_turns_llm_calls_and_the_task_summary(tmp_path):
    task = make_task(tmp_path)
    batch = rollouts.create_batch(query=f"ids={task.pk}", model="m1", attempts=2)
    first, second = batch.trajectories.order_by("id")
    subject = "task:sum-qty:model:m1:attempt:1"
    calls = [LLMCall.objects.create(stage="rollout.turn", subject=f"{subject}:turn{n}", model="m1",
                                    prompt_version="v", status="ok") for n in (1, 2, 3)]
    traj, token = rollouts._claim(first.pk)
    rollouts._record(traj, token, fake_result(passed=True), Recorder(calls), subject)
    first.refresh_from_db()
    assert (first.status, first.passed, first.reward, first.failure, first.n_turns) == ("done", True, 1.0, "", 3)
    assert (first.prompt_tokens, first.completion_tokens, first.claimed_at) == (600, 35, None)
    trial = first.trial
    assert (trial.kind, trial.version_id, trial.passed, trial.verifier_output) == ("rollout", task.current_version_id,
                                                                                  True, "2 passed")
    assert [(t.name, t.outcome) for t in trial.tests.all()] == [("test_outputs.py::test_out_exists", "passed"),
                                                                ("test_outputs.py::test_total", "passed")]
    turns = list(first.turns.all())
    assert [(t.index, t.state, t.task_complete, t.llm_call_id) for t in turns] == [
        (1, "observation", False, calls[0].pk), (2, "action", True, calls[1].pk), (3, "none", True, calls[2].pk)]
    assert turns[0].commands[0]["program"] == "cat" and turns[1].commands[0]["kind"] == "action"
    assert "[exit code 0" in turns[0].output
    assert Path(trial.logs_path, "trajectory.json").is_file()
    task.refresh_from_db()
    assert (task.pass_rate, task.n_rollouts) == (1.0, 1)
    # the second attempt fails a test; a worker that lost its claim writes nothing
    traj, token = rollouts._claim(second.pk)
    Trajectory.objects.filter(pk=second.pk).update(claimed_at=timezone.now())  # taken over meanwhile
    before = Trial.objects.count()
    assert rollouts._record(traj, token, fake_result(passed=False), Recorder([]), subject).status == "lost"
    assert Trial.objects.count() == before and not second.turns.exists()
    token = Trajectory.objects.get(pk=second.pk).claimed_at
    rollouts._record(traj, token, fake_result(passed=False), Recorder([]), subject)
    second.refresh_from_db()
    assert (second.status, second.passed, second.failure) == ("done", False, "tests_failed")
    task.refresh_from_db()
    assert (task.pass_rate, task.n_rollouts) == (0.5, 2)
    assert rollouts.finish_if_done(batch.pk)
    assert RolloutBatch.objects.get(pk=batch.pk).message == "2 finished, 1 passed"


@pytest.mark.django_db
def test_infrastructure_trouble_and_a_silent_model_are_never_counted(tmp_path):
    task = make_task(tmp_path)
    batch = rollouts.create_batch(query=f"ids={task.pk}", model="m1", attempts=3)
    a, b, c = batch.trajectories.order_by("id")
    traj, token = rollouts._claim(a.pk)
    result = ro.AgentRun(turns=[], reward=None, passed=False, test_results=[], stop_reason="model_error",
                           total_seconds=1, tokens_in=0, tokens_out=0, error="PermanentLLMError: no key")
    rollouts._record(traj, token, result, Recorder([]), "s")
    a.refresh_from_db()
    assert (a.status, a.failure) == ("error", "model_error") and "never answered" in a.message
    traj, token = rollouts._claim(b.pk)
    result.stop_reason, result.error = "infra_error", "TransientEngineError: daemon restarted"
    rollouts._record(traj, token, result, Recorder([]), "s")
    assert Trajectory.objects.get(pk=b.pk).status == TrajectoryStatus.WAITING_FOR_DOCKER
    traj, token = rollouts._claim(c.pk)
    result.error = "PermanentEngineError: could not create /logs"
    rollouts._record(traj, token, result, Recorder([]), "s")
    assert Trajectory.objects.get(pk=c.pk).status == TrajectoryStatus.ERROR
    task.refresh_from_db()
    assert (task.n_rollouts, task.pass_rate) == (0, None)


# --- Harbor import ------------------------------------------------------------------------------


def harbor_result(task_name, *, checksum=None, task_path=None, reward=1.0, exception=None, model="deepseek-v4-pro",
                  agent="terminus-2", tokens=(1000, 50), trial_name=""):
    return {
        "id": "6d706a03-7fb3-4c0e-88c3-6dcbd04c8ad9", "task_name": task_name, "trial_name": trial_name,
        "trial_uri": f"file:///jobs/j/{trial_name}", "task_id": {"path": task_path or f"/elsewhere/{task_name}"},
        "source": None, "task_checksum": checksum or "0" * 64,
        "config": {"task": {"path": task_path or f"/elsewhere/{task_name}"}, "trial_name": trial_name},
        "agent_info": {"name": agent, "version": "2.0.0", "model_info": {"name": model, "provider": "deepseek"}},
        "agent_result": {"n_input_tokens": tokens[0], "n_cache_tokens": None, "n_output_tokens": tokens[1],
                         "cost_usd": 0.01},
        "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
        "exception_info": None if exception is None else {
            "exception_type": exception, "exception_message": f"{exception} {XSS}", "exception_traceback": "",
            "occurred_at": "2026-01-01T10:05:00Z"},
        "started_at": "2026-01-01T10:00:00Z", "finished_at": "2026-01-01T10:06:00Z",
        "agent_execution": {"started_at": "2026-01-01T10:00:10Z", "finished_at": "2026-01-01T10:05:10Z"},
        "verifier": {"started_at": "2026-01-01T10:05:20Z", "finished_at": "2026-01-01T10:05:50Z"},
    }


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="2">
<testcase classname="test_outputs" name="test_out_exists"/>
<testcase classname="test_outputs" name="test_total">{failure}</testcase></testsuite></testsuites>"""


def write_trial(job: Path, name: str, result: dict | str | None, *, passed=True, atif=True):
    d = job / name
    (d / "verifier").mkdir(parents=True)
    (d / "agent").mkdir()
    if result is not None:
        (d / "result.json").write_text(result if isinstance(result, str) else json.dumps(result))
    (d / "verifier" / "reward.txt").write_text("1\n" if passed else "0\n")
    (d / "verifier" / "test-stdout.txt").write_text("2 passed\n" if passed else "1 failed, 1 passed\n")
    (d / "verifier" / "junit.xml").write_text(JUNIT.format(
        failure="" if passed else '<failure message="assert \'11\' == \'10\'">AssertionError</failure>'))
    if atif:
        (d / "agent" / "trajectory.json").write_text(json.dumps({"schema_version": "ATIF-v1.4", "session_id": "s",
            "agent": {"name": "terminus-2", "version": "2"}, "steps": [
                {"step_id": 1, "source": "user", "message": "task"},
                {"step_id": 2, "source": "agent", "message": json.dumps({"analysis": f"look {XSS}", "plan": "cat"}),
                 "tool_calls": [{"tool_call_id": "c1", "function_name": "bash_command",
                                 "arguments": {"keystrokes": "cat /app/data.csv\n", "duration": 0.1}}],
                 "observation": {"results": [{"content": "name,qty"}]}, "metrics": {"prompt_tokens": 500}},
                {"step_id": 3, "source": "agent", "message": "{}", "tool_calls": [
                    {"tool_call_id": "c2", "function_name": "bash_command",
                     "arguments": {"keystrokes": "echo 10 > /app/out.txt\n"}},
                    {"tool_call_id": "c3", "function_name": "mark_task_complete", "arguments": {}}]}]}))
    return d


@pytest.fixture
def job_dir(tmp_path, db):
    """A Harbor job over one of our tasks (exported, so its checksum is known), a task that moved
    on since (matched through its directory), and one that is not ours."""
    ours = make_task(tmp_path, "sum-qty")
    exported = versions.write_harbor_task(ours.current_version, tmp_path / "exported" / "sum-qty")
    checksum = harbor.dirhash([(p.relative_to(exported).as_posix(), p.read_bytes())
                           for p in sorted(exported.rglob("*")) if p.is_file()])
    local = make_task(tmp_path, "local-one", instruction="Another task.\n")
    local_dir = versions.write_harbor_task(local.current_version, tmp_path / "exported" / "local-one")
    job = tmp_path / "jobs" / "2026-01-01__10-00-00"
    job.mkdir(parents=True)
    (job / "config.json").write_text(json.dumps({"job_name": "nightly"}))
    (job / "result.json").write_text(json.dumps({"id": "job-1", "finished_at": "2026-01-01T11:00:00Z",
                                                 "n_total_trials": 5}))
    write_trial(job, "sum-qty__aaa1111", harbor_result("sum-qty", checksum=checksum, trial_name="sum-qty__aaa1111"))
    write_trial(job, "sum-qty__bbb2222", harbor_result("sum-qty", checksum=checksum, reward=0.0,
                                                       trial_name="sum-qty__bbb2222"), passed=False, atif=False)
    write_trial(job, "sum-qty__ccc3333", harbor_result("sum-qty", checksum=checksum, reward=None,
                                                       exception="AgentTimeoutError"), passed=False)
    write_trial(job, "renamed__ddd4444", harbor_result("renamed", task_path=str(local_dir), reward=1.0))
    write_trial(job, "fix-git__eee5555", harbor_result("terminal-bench/fix-git", checksum="f" * 64))
    return {"job": job, "ours": ours, "local": local, "checksum": checksum}


def test_a_harbor_job_becomes_a_batch_with_trials_matched_by_name_checksum_or_directory(job_dir, users):
    assert harbor.task_checksum(versions.version_bundle(job_dir["ours"].current_version)) == job_dir["checksum"]
    outcome = rollout_imports.import_results(job_dir["job"], user=users["reviewer"])
    assert outcome.refused == [] and len(outcome.batches) == 1
    batch = outcome.batches[0]
    assert (batch.source, batch.name, batch.status, batch.model, batch.agent) == (
        "harbor", "nightly", "done", "deepseek/deepseek-v4-pro", "terminus-2")
    report = rollout_imports.job_report(batch)
    assert (report["trials"], report["matched"]) == (5, 4)
    assert report["unmatched"] == [{"trial": "fix-git__eee5555", "task_name": "terminal-bench/fix-git",
                                    "reason": f"no task named 'fix-git' and no version with task_checksum {'f' * 16}…"}]
    assert report["matched_by"] == {"name and checksum": 3, "content hash of the task directory": 1}
    ours = list(batch.trajectories.filter(task=job_dir["ours"]).order_by("attempt"))
    assert [(t.attempt, t.passed, t.reward, t.failure) for t in ours] == [
        (0, True, 1.0, ""), (1, False, 0.0, "tests_failed"), (2, False, None, "AgentTimeoutError")]
    assert ours[0].version_id == job_dir["ours"].current_version_id
    assert (ours[0].seconds, ours[0].prompt_tokens, ours[0].source_path.endswith("sum-qty__aaa1111")) == (300.0, 1000,
                                                                                                        True)
    assert [(t.name, t.outcome) for t in ours[1].trial.tests.all()] == [("test_outputs::test_out_exists", "passed"),
                                                                        ("test_outputs::test_total", "failed")]
    turns = list(ours[0].turns.all())
    assert [(t.index, t.state, t.task_complete) for t in turns] == [(1, "observation", False), (2, "action", True)]
    assert turns[0].commands == [{"command": "cat /app/data.csv", "program": "cat", "kind": "observation"}]
    assert ours[1].n_turns == 0  # no agent logs: no turns, still a graded attempt
    assert batch.trajectories.get(task=job_dir["local"]).passed is True
    task = Task.objects.get(pk=job_dir["ours"].pk)
    assert (task.n_rollouts, task.pass_rate) == (3, pytest.approx(1 / 3))
    # the same job again is refused, naming the batch it already is
    with pytest.raises(rollout_imports.ImportRefused, match=f"already imported as batch #{batch.pk}"):
        rollout_imports.import_job(job_dir["job"])


def _counts():
    return (RolloutBatch.objects.count(), Trajectory.objects.count(), Trial.objects.count(), Turn.objects.count(),
            TestResult.objects.count())


def test_a_malformed_trial_refuses_the_whole_job_naming_file_and_field(job_dir):
    write_trial(job_dir["job"], "broken__fff6666", '{"task_name": "sum-qty", "verifier_res')
    bad = harbor_result("sum-qty", checksum=job_dir["checksum"])
    bad["agent_result"]["n_input_tokens"] = "many"
    write_trial(job_dir["job"], "typed__ggg7777", bad)
    before = _counts()
    with pytest.raises(rollout_imports.ImportRefused) as refused:
        rollout_imports.import_job(job_dir["job"])
    assert _counts() == before  # nothing half-imported
    problems = {(p["trial"], p["file"], p["field"]) for p in refused.value.problems}
    assert ("broken__fff6666", "result.json", "") in problems
    assert ("typed__ggg7777", "result.json", "agent_result.n_input_tokens") in problems
    assert "invalid JSON" in next(p["error"] for p in refused.value.problems if p["trial"] == "broken__fff6666")


def test_a_partial_job_is_refused_unless_asked_and_then_lists_what_it_left_out(job_dir):
    write_trial(job_dir["job"], "sum-qty__hhh8888", None)  # still running: no result.json yet
    before = _counts()
    with pytest.raises(rollout_imports.ImportRefused, match="the trial has not finished"):
        rollout_imports.import_job(job_dir["job"])
    assert _counts() == before
    batch = rollout_imports.import_job(job_dir["job"], allow_partial=True)
    assert rollout_imports.job_report(batch)["incomplete"] == ["sum-qty__hhh8888"]
    assert batch.trajectories.count() == 4


def test_import_results_finds_every_job_and_refuses_a_directory_without_one(job_dir, tmp_path):
    second = tmp_path / "jobs" / "other"
    write_trial(second, "sum-qty__iii9999", harbor_result("sum-qty", checksum=job_dir["checksum"]))
    outcome = rollout_imports.import_results(tmp_path / "jobs")
    assert outcome.refused == [], [r.problems for r in outcome.refused]
    assert sorted(b.name for b in outcome.batches) == ["nightly", "other"]
    with pytest.raises(rollout_imports.ImportRefused, match="no Harbor job directory here"):
        rollout_imports.import_results(tmp_path / "src")
    with pytest.raises(rollout_imports.ImportRefused, match="no such file"):
        rollout_imports.import_results(tmp_path / "missing")


def test_the_import_command_prints_the_report_and_fails_on_a_refused_job(job_dir, capsys):
    call_command("import-results", str(job_dir["job"]))
    out = capsys.readouterr().out
    assert "4 of 5 trials matched" in out and "unmatched fix-git__eee5555 (terminal-bench/fix-git)" in out
    write_trial(job_dir["job"], "broken__jjj0000", "{")
    with pytest.raises(CommandError, match=r"1 job\(s\) refused, 0 imported"):
        call_command("import-results", str(job_dir["job"]))
    assert "broken__jjj0000/result.json: invalid JSON" in capsys.readouterr().err


def zipped(directory: Path, prefix: str = "") -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for p in sorted(directory.rglob("*")):
            if p.is_file():
                zf.write(p, prefix + p.relative_to(directory.parent).as_posix())
    buf.seek(0)
    buf.name = "job.zip"
    return buf


def test_uploading_a_job_archive_imports_it_and_a_bad_one_shows_every_problem(job_dir, client_as):
    c = client_as("reviewer")
    response = c.post("/tasks/rollouts/import/", {"archive": zipped(job_dir["job"])})
    batch = RolloutBatch.objects.get(source="harbor")
    assert response.status_code == 302 and response["Location"] == f"/tasks/rollouts/{batch.pk}/"
    page = c.get(response["Location"]).content.decode()
    assert "4 of 5 trials matched" in page and "fix-git__eee5555" in page
    write_trial(job_dir["job"], "broken__kkk1111", "{")
    (job_dir["job"] / "result.json").write_text(json.dumps({"id": "job-2"}))
    response = c.post("/tasks/rollouts/import/", {"archive": zipped(job_dir["job"])})
    assert response.status_code == 400
    html = response.content.decode()
    assert "Nothing was imported" in html and "broken__kkk1111" in html and "result.json" in html
    assert RolloutBatch.objects.filter(source="harbor").count() == 1
    not_archive = io.BytesIO(b"hello")
    not_archive.name = "job.txt"
    assert c.post("/tasks/rollouts/import/", {"archive": not_archive}).status_code == 400


# --- pages, permissions, API, CLI ---------------------------------------------------------------


@pytest.fixture
def finished_batch(tmp_path, db):
    task = make_task(tmp_path, f"sum {XSS}")
    batch = rollouts.create_batch(query=f"ids={task.pk}", model="m1", attempts=2)
    for traj, passed in zip(batch.trajectories.order_by("id"), (True, False)):
        claimed, token = rollouts._claim(traj.pk)
        rollouts._record(claimed, token, fake_result(passed=passed), Recorder([]), "s")
    rollouts.finish_if_done(batch.pk)
    return RolloutBatch.objects.get(pk=batch.pk)


@pytest.mark.django_db
def test_viewers_read_but_cannot_start_cancel_resume_or_import(finished_batch, client_as):
    c = client_as("viewer")
    assert c.get("/tasks/rollouts/").status_code == 200
    page = c.get("/tasks/rollouts/new/")
    assert page.status_code == 200
    assert "Your role can read rollouts but not start them" in page.content.decode()
    assert c.post("/tasks/rollouts/new/", {"query": "status=validated", "model": "m", "attempts": 1, "max_turns": 5,
                                           "timeout_s": 60}).status_code == 403
    assert c.post(f"/tasks/rollouts/{finished_batch.pk}/cancel/").status_code == 403
    assert c.post(f"/tasks/rollouts/{finished_batch.pk}/resume/").status_code == 403
    assert c.post("/tasks/rollouts/import/", {}).status_code == 403
    assert RolloutBatch.objects.count() == 1


@pytest.mark.django_db
def test_a_reviewer_starts_a_batch_from_the_task_list_filter_and_watches_it(tmp_path, client_as,
                                                                            django_capture_on_commit_callbacks,
                                                                            monkeypatch):
    from tasks import jobs

    task = make_task(tmp_path)
    c = client_as("reviewer")
    form = c.get(f"/tasks/rollouts/new/?ids={task.pk}").content.decode()
    assert f'value="ids={task.pk}"' in form and "1 task with a version" in form
    queued: list[int] = []
    monkeypatch.setattr(jobs.docker_rollout, "delay", queued.append)
    with django_capture_on_commit_callbacks(execute=True):
        response = c.post("/tasks/rollouts/new/", {"query": f"ids={task.pk}", "model": "m1", "attempts": 2,
                                                   "max_turns": 10, "timeout_s": 120, "name": ""})
    batch = RolloutBatch.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/tasks/rollouts/{batch.pk}/"
    assert sorted(queued) == sorted(batch.trajectories.values_list("id", flat=True))
    page = c.get(response["Location"]).content.decode()
    assert "0 of 2" in page and 'hx-trigger="every 2s"' in page and "Cancel batch" in page
    partial = c.get(f"/tasks/rollouts/{batch.pk}/?part=progress", HTTP_HX_REQUEST="true")
    assert partial.status_code == 200 and "<h1>" not in partial.content.decode()
    bad = c.post("/tasks/rollouts/new/", {"query": "strategy=sideways", "model": "m1", "attempts": 2,
                                          "max_turns": 10, "timeout_s": 120})
    assert bad.status_code == 400 and "strategy: unknown value" in bad.content.decode()
    response = c.post(f"/tasks/rollouts/{batch.pk}/cancel/")
    assert response.status_code == 302
    assert RolloutBatch.objects.get(pk=batch.pk).status == RolloutBatchStatus.CANCELLED
    partial = c.get(f"/tasks/rollouts/{batch.pk}/?part=progress", HTTP_HX_REQUEST="true")
    assert partial.status_code == 286  # finished: polling stops


@pytest.mark.django_db
def test_the_task_page_shows_transcripts_beside_the_per_test_result(finished_batch, client_as):
    task = finished_batch.trajectories.first().task
    html = client_as("viewer").get(f"/tasks/{task.pk}/?tab=rollouts").content.decode()
    assert XSS not in html and "Read it first &lt;script&gt;" in html and "rollouts_context" not in html
    assert "test_outputs.py::test_total" in html and "assert &#x27;11&#x27; == &#x27;10&#x27;" in html
    assert "$ cd /app &amp;&amp; cat data.csv" in html and "task complete" in html
    assert "1/2 tests failed" in html or "1 failed or errored" in html
    detail = client_as("viewer").get(f"/tasks/rollouts/trajectories/{finished_batch.trajectories.first().pk}/")
    assert detail.status_code == 200 and "Verifier: 2 tests" in detail.content.decode()
    listing = client_as("viewer").get(f"/tasks/rollouts/trajectories/?batch={finished_batch.pk}&passed=no")
    assert "1 finished trajectory" in listing.content.decode()


@pytest.mark.django_db
def test_the_api_lists_starts_cancels_and_imports_with_roles(finished_batch, tmp_path, client, token_for, job_dir):
    viewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('viewer')}"}
    reviewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('reviewer')}"}
    listing = client.get("/api/rollouts", **viewer).json()
    assert listing["items"][0]["id"] == finished_batch.pk and listing["items"][0]["progress"]["passed"] == 1
    traj = finished_batch.trajectories.order_by("id").first()
    detail = client.get(f"/api/trajectories/{traj.pk}", **viewer).json()
    assert [t["state"] for t in detail["turns"]] == ["observation", "action", "none"] and len(detail["tests"]) == 2
    body = {"query": f"ids={finished_batch.trajectories.first().task_id}", "model": "m9", "attempts": 1}
    assert client.post("/api/rollouts", body, content_type="application/json", **viewer).status_code == 403
    created = client.post("/api/rollouts", body, content_type="application/json", **reviewer)
    assert created.status_code == 201 and created.json()["progress"]["total"] == 1
    assert client.post("/api/rollouts", {**body, "attempts": 99}, content_type="application/json",
                       **reviewer).status_code == 422
    bid = created.json()["id"]
    assert client.post(f"/api/rollouts/{bid}/cancel", **viewer).status_code == 403
    assert client.post(f"/api/rollouts/{bid}/cancel", **reviewer).json()["status"] == "cancelled"
    assert client.post(f"/api/rollouts/{bid}/cancel", **reviewer).status_code == 409
    assert client.post("/api/rollouts/import", {"archive": zipped(job_dir["job"])}, **viewer).status_code == 403
    imported = client.post("/api/rollouts/import", {"archive": zipped(job_dir["job"])}, **reviewer)
    assert imported.status_code == 201 and imported.json()["batches"][0]["report"]["matched"] == 4
    again = client.post("/api/rollouts/import", {"archive": zipped(job_dir["job"])}, **reviewer)
    assert again.status_code == 422 and "already imported" in again.json()["refused"][0]["error"]


@pytest.mark.django_db
def test_the_rollout_command_starts_reports_and_cancels(tmp_path, capsys, monkeypatch):
    task = make_task(tmp_path)
    monkeypatch.setattr(settings, "DOCKER_HOST", CLOSED_SOCKET)
    call_command("rollout", "start", "--query", f"ids={task.pk}", "--model", "m1", "-k", "2", "--wait")
    out = capsys.readouterr().out
    batch = RolloutBatch.objects.get()
    assert f"Batch #{batch.pk}" in out and "2 waiting for Docker" in out
    call_command("rollout", "status")
    assert f"#{batch.pk}" in capsys.readouterr().out
    call_command("rollout", "cancel", str(batch.pk))
    assert "cancelled" in capsys.readouterr().out
    with pytest.raises(CommandError, match="already finished"):
        call_command("rollout", "cancel", str(batch.pk))
    with pytest.raises(CommandError, match="no rollout batch"):
        call_command("rollout", "status", "999")
    with pytest.raises(CommandError, match="unknown value"):
        call_command("rollout", "start", "--query", "strategy=sideways", "--model", "m1")


# --- the whole loop in Docker -------------------------------------------------------------------


def scripted_turns(original):
    """The scripted server's answers for rollout turns: look, write the total (11 for the model
    "scripted-wrong"), confirm. Other schemas go to the usual responders."""

    def answer(body):
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
        if schema != "TurnAnswer":
            return original(body)
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        done = sum("[turn " in u for u in users)
        if done == 0:
            reply = {"analysis": f"Nothing read yet {XSS}", "plan": "Look at the data.",
                     "commands": [{"command": "cd /app && cat data.csv", "timeout_s": 10}], "task_complete": False}
        elif done == 1:
            total = "11" if body.get("model") == "scripted-wrong" else "10"
            reply = {"analysis": "3 + 5 + 2", "plan": "Write it.",
                     "commands": [{"command": f"printf '{total}\\n' > /app/out.txt"}], "task_complete": True}
        else:
            reply = {"analysis": "Written.", "plan": "", "commands": [], "task_complete": True}
        return json.dumps(reply)

    return answer


@pytest.mark.docker
@pytest.mark.django_db
def test_rollouts_run_in_docker_recorded_from_the_scripted_model_and_replayed(tmp_path, engine, monkeypatch,
                                                                              client_as):
    monkeypatch.setattr(scripted_llm, "answer", scripted_turns(scripted_llm.answer))
    task = make_task(tmp_path)
    cassette = tmp_path / "rollout.cassette.jsonl"
    with scripted_llm.ScriptedLLMServer() as url:
        recorded = rollouts.create_batch(trusted=True, query=f"ids={task.pk}", model="scripted", attempts=2, max_turns=6,
                                         timeout_s=120, llm={"provider": "openai", "base_url": url,
                                                             "record": str(cassette)})
        recorded = rollouts.run_batch(recorded.pk)
        wrong = rollouts.create_batch(trusted=True, query=f"ids={task.pk}", model="scripted-wrong", attempts=1, max_turns=6,
                                      timeout_s=120, llm={"provider": "openai", "base_url": url})
        wrong = rollouts.run_batch(wrong.pk)
    assert recorded.status == RolloutBatchStatus.DONE, recorded.message
    trajs = list(recorded.trajectories.order_by("attempt"))
    assert [(t.status, t.passed, t.reward, t.n_turns) for t in trajs] == [("done", True, 1.0, 3)] * 2, \
        [(t.status, t.message) for t in trajs]
    turns = list(trajs[0].turns.all())
    assert [t.state for t in turns] == ["observation", "action", "none"]
    assert turns[0].commands[0]["program"] == "cat" and "apple,3" in turns[0].output
    assert all(t.llm_call_id for t in turns) and turns[0].prompt_tokens > 0
    assert LLMCall.objects.get(pk=turns[1].llm_call_id).subject.endswith(":attempt:1:turn2")
    assert [(x.name.split("::")[-1], x.outcome) for x in trajs[0].trial.tests.all()] == [
        ("test_out_exists", "passed"), ("test_total", "passed")]
    failed = wrong.trajectories.get()
    assert (failed.passed, failed.failure) == (False, "tests_failed")
    assert failed.trial.tests.get(name__endswith="test_total").outcome == "failed"
    task.refresh_from_db()
    assert (task.n_rollouts, task.pass_rate) == (3, pytest.approx(2 / 3))
    # the recorded turns replay without any server, into another batch
    replayed = rollouts.create_batch(trusted=True, query=f"ids={task.pk}", model="scripted", attempts=2, max_turns=6, timeout_s=120,
                                     llm={"provider": "replay", "cassette": str(cassette)})
    replayed = rollouts.run_batch(replayed.pk)
    assert [(t.passed, t.n_turns) for t in replayed.trajectories.order_by("attempt")] == [(True, 3), (True, 3)]
    subjects = {c.subject for c in LLMCall.objects.filter(status="replayed")}
    assert len(subjects) == 6 and all(":model:scripted:attempt:" in s for s in subjects)
    html = client_as("viewer").get(f"/tasks/{task.pk}/?tab=rollouts").content.decode()
    assert "Nothing read yet &lt;script&gt;" in html and XSS not in html and "test_total" in html


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_a_batch_runs_on_a_docker_worker(tmp_path, engine, docker_worker, monkeypatch):
    # the worker is another process: it replays a cassette written here (no server it could reach)
    task = make_task(tmp_path)
    subject = f"{generation.task_subject(task)}:model:recorded:attempt:1"
    cassette = tmp_path / "worker.cassette.jsonl"
    replies = [{"analysis": "look", "plan": "", "commands": [{"command": "cat /app/data.csv"}], "task_complete": False},
               {"analysis": "write", "plan": "", "commands": [{"command": "echo 10 > /app/out.txt"}],
                "task_complete": True},
               {"analysis": "sure", "plan": "", "commands": [], "task_complete": True}]
    with cassette.open("w") as fh:
        for n, reply in enumerate(replies, 1):
            fh.write(json.dumps({"stage": "rollout.turn", "subject": f"{subject}:turn{n}", "seq": 0,
                                 "prompt_version": ro.PROMPT_VERSION, "model": "recorded", "request_hash": "",
                                 "messages": [], "response_text": json.dumps(reply),
                                 "usage": {"prompt_tokens": 100, "completion_tokens": 10}, "finish_reason": "stop",
                                 "source": "http", "recorded_at": "2026-01-01T00:00:00+00:00"}) + "\n")
    from django.db import transaction

    with transaction.atomic():
        batch = rollouts.create_batch(trusted=True, query=f"ids={task.pk}", model="recorded", attempts=1, max_turns=5,
                                      timeout_s=120, llm={"provider": "replay", "cassette": str(cassette)})
        rollouts.start_batch(batch)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        batch.refresh_from_db()
        if batch.status == RolloutBatchStatus.DONE:
            break
        assert docker_worker.poll() is None, docker_worker.log_tail()
        time.sleep(0.5)
    traj = batch.trajectories.get()
    assert batch.status == RolloutBatchStatus.DONE, (traj.status, traj.message, docker_worker.log_tail())
    assert (traj.passed, traj.n_turns) == (True, 3)
