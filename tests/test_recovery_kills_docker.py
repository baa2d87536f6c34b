"""The Docker-bound jobs survive the death of their worker (docs/operations.md):
a real `facet worker` is killed with SIGKILL while a validation, a re-check, a construction
step or a rollout trajectory has containers running; a new worker with beat takes the work up
within a lease (FACET_JOB_LEASE_S=5 here), removes the dead attempt's sandboxes and finishes with
the records an uninterrupted run leaves: each validation once with one set of trials, each
trajectory once with one transcript, no LLM answer paid for twice. The other kinds are in
tests/test_recovery_kills.py (synthesis, imports, exports) and tests/test_recovery.py (ingest).
Every kind runs on both brokers (the default filesystem one and Redis).
"""
from __future__ import annotations

import json
import uuid

import pytest
from django.db import transaction
from django.db.models import Count

from facet_site.lib import docker_engine as de
from facet_site.lib import rollout as ro
from demo.scripted_llm import ScriptedLLMServer
from scenarios.models import LLMCall
from tasks import construction, generation, rechecks, rollouts, validating
from tasks.models import (Recheck, RecheckStatus, RolloutBatchStatus, Step, Task, TaskStatus, Trajectory,
                          TrajectoryStatus, Trial, Turn, Validation, ValidationStatus)
from tests.conftest import docker_engine_with_base_image
from tests.tasks.conftest import make_run, skills  # noqa: F401  (fixtures)
from tests.tasks.rollout_samples import make_task
from tests.test_recovery_kills import FAST_RECOVERY, LLM_THREADS, broker  # noqa: F401  (broker: a fixture)
from tests.workers import WorkerProcess, wait_until, worker_env

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def engine():
    client = docker_engine_with_base_image()
    yield client
    client.close()


def start_worker(tmp_path, settings, name: str, *, beat: bool, broker_env: dict | None = None) -> WorkerProcess:
    env = worker_env(settings.BROKER_DIR.parent, **FAST_RECOVERY, **(broker_env or {}),
                     FACET_LLM_CONCURRENCY=str(LLM_THREADS))
    return WorkerProcess(name=f"{name}-{uuid.uuid4().hex[:6]}", queues="default,llm,docker",
                         log_path=tmp_path / f"{name}.log", env=env, beat=beat)


def killed_mid_way(tmp_path, settings, *, send, mid_way, done, what: str, timeout: float = 600,
                   broker_env: dict | None = None):
    """A worker that runs the job `send` queues is killed once `mid_way()` holds; a new worker with
    beat must then bring `done()` about. Returns what `mid_way()` returned."""
    name = what.replace(" ", "-").replace("'", "")
    first = start_worker(tmp_path, settings, f"{name}-first", beat=False, broker_env=broker_env)
    try:
        with transaction.atomic():
            send()
        seen = wait_until(mid_way, workers=[first], timeout=timeout, what=f"{what} mid-way", every=0.05)
    finally:
        first.kill()
    assert not done()
    second = start_worker(tmp_path, settings, f"{name}-second", beat=True, broker_env=broker_env)
    try:
        wait_until(done, workers=[second], timeout=timeout, what=f"{what} to finish after the kill", every=0.5)
    finally:
        second.stop()
    return seen


def containers_of(engine, owner: str) -> list[str]:
    """The sandbox containers of one validation attempt, by its owner label."""
    rows = engine.api.containers(all=True, filters={"label": [f"{de.LABEL_SANDBOX}=1"]})
    return [r["Id"][:12] for r in rows if (r.get("Labels") or {}).get(de.LABEL_OWNER, "").startswith(f"{owner}:")]


def in_containers(engine, validation: Validation) -> str | None:
    """The owner label of the validation's attempt when it runs with containers up (the label is on
    record before any container starts), else None."""
    v = Validation.objects.get(pk=validation.pk)
    owner = (v.settings or {}).get("owner")
    if v.status == ValidationStatus.RUNNING and owner and containers_of(engine, owner):
        return owner
    return None


def assert_validated_once(validation: Validation) -> None:
    """Finished, with the trials of one validation (a dead attempt stores none)."""
    validation.refresh_from_db()
    assert validation.status == ValidationStatus.DONE, (validation.status, validation.reason)
    keys = list(validation.trials.values_list("kind", "index"))
    assert len(keys) == len(set(keys)), keys
    assert {"nop", "oracle"} <= {k for k, _ in keys}


def test_a_validation_and_a_recheck_whose_worker_is_killed_mid_trials_finish_once(
        tmp_path, settings, engine, broker):  # noqa: F811
    task = make_task(tmp_path)
    version = task.current_version
    validation = validating.request_validation(version, queue=False)

    dead_owner = killed_mid_way(
        tmp_path, settings, send=lambda: broker.send("tasks.jobs.docker_validate", [validation.pk]),
        mid_way=lambda: in_containers(engine, validation), broker_env=broker.env,
        done=lambda: Validation.objects.get(pk=validation.pk).status == ValidationStatus.DONE, what="the validation")
    assert_validated_once(validation)
    assert validation.accepted, validation.reason
    assert Validation.objects.filter(version=version).count() == 1  # taken up again, not validated anew
    assert containers_of(engine, dead_owner) == []  # the dead attempt's containers are gone
    task.refresh_from_db()
    assert task.status == TaskStatus.VALIDATED

    recheck = rechecks.request_recheck(version, kind="flakiness", runs=2)
    first_run, second_run = Validation.objects.filter(recheck=recheck).order_by("id")

    dead_owner = killed_mid_way(
        tmp_path, settings, send=lambda: broker.send("tasks.jobs.docker_recheck", [recheck.pk]),
        mid_way=lambda: in_containers(engine, first_run), broker_env=broker.env,
        done=lambda: Recheck.objects.get(pk=recheck.pk).status not in (RecheckStatus.QUEUED, RecheckStatus.RUNNING),
        what="the re-check")
    recheck.refresh_from_db()
    assert recheck.status == RecheckStatus.DONE, recheck.message
    assert Validation.objects.filter(recheck=recheck).count() == 2
    for run in (first_run, second_run):
        assert_validated_once(run)
    assert containers_of(engine, dead_owner) == []
    # the two runs ran the same trials, each once
    assert (sorted(first_run.trials.values_list("kind", "index"))
            == sorted(second_run.trials.values_list("kind", "index")))


def test_a_construction_step_whose_worker_is_killed_mid_validation_is_freed_and_finishes(
        tmp_path, settings, engine, make_run, broker):  # noqa: F811
    server = ScriptedLLMServer(latency=0.2)
    with server as url:
        run = make_run("", url=url)

        def validating_in_containers():
            v = Validation.objects.filter(version__task__run=run, status=ValidationStatus.RUNNING).first()
            return v is not None and in_containers(engine, v)

        def task_final():
            task = Task.objects.filter(run=run).first()
            return task is not None and task.is_final

        def send():  # what construction.start_construction queues, onto the broker under test
            construction.create_tasks(run)
            transaction.on_commit(lambda: broker.send("tasks.jobs.advance_construction", [run.pk]))

        dead_owner = killed_mid_way(tmp_path, settings, send=send, mid_way=validating_in_containers,
                                    done=task_final, what="the task's construction", broker_env=broker.env)
    task = Task.objects.get(run=run)
    assert (task.status, task.step) == (TaskStatus.VALIDATED, Step.DONE), task.message
    # the validation the dead worker ran was taken up again, not doubled: one per version
    for version in task.versions.all():
        assert version.validations.count() == 1
        [validation] = version.validations.all()
        assert_validated_once(validation)
    assert containers_of(engine, dead_owner) == []
    assert task.environment.builds.count() == 1
    # no model answer paid for twice (the dead worker's steps had finished before the kill)
    paid = dict(LLMCall.objects.filter(run=run, status="ok").values_list("request_hash").annotate(n=Count("id")))
    assert [h for h, n in paid.items() if n > 1] == []
    assert server.requests == sum(paid.values())


def test_a_rollout_whose_worker_is_killed_mid_trajectory_is_run_again_once(
        tmp_path, settings, engine, broker):  # noqa: F811
    task = make_task(tmp_path)
    cassette = tmp_path / "rollout.cassette.jsonl"
    replies = [{"analysis": "look", "plan": "", "commands": [{"command": "cat /app/data.csv"}], "task_complete": False},
               {"analysis": "wait", "plan": "", "commands": [{"command": "sleep 4", "duration": 5}],
                "task_complete": False},
               {"analysis": "write", "plan": "", "commands": [{"command": "echo 10 > /app/out.txt"}],
                "task_complete": True},
               {"analysis": "sure", "plan": "", "commands": [], "task_complete": True}]
    with cassette.open("w") as fh:
        for attempt in (1, 2):
            subject = f"{generation.task_subject(task)}:model:recorded:attempt:{attempt}"
            for n, reply in enumerate(replies, 1):
                fh.write(json.dumps({"stage": "rollout.turn", "subject": f"{subject}:turn{n}", "seq": 0,
                                     "prompt_version": ro.PROMPT_VERSION, "model": "recorded", "request_hash": "",
                                     "messages": [], "response_text": json.dumps(reply),
                                     "usage": {"prompt_tokens": 100, "completion_tokens": 10},
                                     "finish_reason": "stop", "source": "http",
                                     "recorded_at": "2026-01-01T00:00:00+00:00"}) + "\n")
    batch = rollouts.create_batch(trusted=True, query=f"ids={task.pk}", model="recorded", attempts=2, max_turns=6,
                                  timeout_s=120, llm={"provider": "replay", "cassette": str(cassette)})

    def mid_trajectory():
        return Trajectory.objects.filter(batch=batch, status=TrajectoryStatus.RUNNING, n_turns__gte=1).exists()

    def send():  # what rollouts.start_batch queues, onto the broker under test
        for tid in batch.trajectories.values_list("id", flat=True):
            broker.send("tasks.jobs.docker_rollout", [tid])

    killed_mid_way(tmp_path, settings, send=send, mid_way=mid_trajectory, broker_env=broker.env,
                   done=lambda: type(batch).objects.get(pk=batch.pk).status == RolloutBatchStatus.DONE,
                   what="the rollout batch")
    trajectories = list(batch.trajectories.order_by("attempt"))
    assert [(t.status, t.passed, t.n_turns) for t in trajectories] == [("done", True, 4)] * 2, \
        [(t.status, t.message) for t in trajectories]
    # one transcript and one trial each: the dead attempt's partial transcript was dropped
    for t in trajectories:
        indexes = list(Turn.objects.filter(trajectory=t).values_list("index", flat=True))
        assert len(indexes) == len(set(indexes)) == 4, indexes
    assert Trial.objects.filter(trajectory__batch=batch).count() == 2
    task.refresh_from_db()
    assert (task.n_rollouts, task.pass_rate) == (2, 1.0)
