"""Rollout batches (claiming, redelivery, dead workers, waiting for Docker, cancelling) and what a
finished attempt stores; and the whole loop against a real Docker container with the model's turns
from the scripted server, recorded to a cassette and replayed, and a batch on a Docker worker."""
import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from facet_site.lib import rollout as ro
from demo import scripted_llm
from scenarios.models import LLMCall
from tasks import generation, rollouts
from tasks.models import AuditEvent, RolloutBatch, RolloutBatchStatus, TaskStatus, Trajectory, TrajectoryStatus, Trial
from tests.tasks.rollout_samples import CLOSED_SOCKET, XSS, Recorder, fake_result, make_task


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
