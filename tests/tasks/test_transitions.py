"""Single-row transitions on the models (claims with a conditional UPDATE) and the one way work is
queued: a service calls `job.delay_on_commit`, so nothing reaches the broker before the commit."""
from datetime import timedelta

import pytest
from django.utils import timezone

from tasks import construction, jobs, rollouts, validating
from tasks.models import (
    RolloutBatch,
    Step,
    Task,
    TaskStatus,
    TaskVersion,
    Trajectory,
    TrajectoryStatus,
    Validation,
)

pytestmark = pytest.mark.django_db


def test_a_task_is_claimed_once_for_its_step_and_moving_on_releases_the_claim():
    task = Task.objects.create(name="t", step=Step.BUILD)
    assert not Task.claim(task.pk, Step.ARTIFACTS)  # not the step it is in
    assert Task.claim(task.pk, Step.BUILD)
    assert not Task.claim(task.pk, Step.BUILD)  # a second worker loses
    task.move_to(Step.VALIDATE, message="")
    task.refresh_from_db()
    assert (task.step, task.status, task.claimed_at) == (Step.VALIDATE, TaskStatus.VALIDATING, None)
    assert Task.claim(task.pk, Step.VALIDATE)
    task.release("no engine", status=TaskStatus.WAITING_FOR_DOCKER)
    task.refresh_from_db()
    assert (task.step, task.status, task.claimed_at, task.message) == (
        Step.VALIDATE, TaskStatus.WAITING_FOR_DOCKER, None, "no engine")
    assert not Task.claim(task.pk, Step.VALIDATE)  # waiting is not open
    assert Task.resume(task.pk, task.step) == 1
    assert Task.objects.get(pk=task.pk).status == TaskStatus.VALIDATING


def test_a_trajectory_claim_is_a_token_that_later_writes_must_carry():
    task = Task.objects.create(name="t", status=TaskStatus.VALIDATED, step=Step.DONE)
    batch = RolloutBatch.objects.create(name="b", model="m", attempts=1)
    traj = Trajectory.objects.create(batch=batch, task=task, attempt=0, model="m")
    recent = timezone.now() - timedelta(minutes=5)
    token = Trajectory.claim(traj.pk, stale_before=recent)
    assert token is not None
    assert Trajectory.claim(traj.pk, stale_before=recent) is None  # running and not stale
    traj.release(timezone.now(), TrajectoryStatus.WAITING_FOR_DOCKER, "someone else's token")
    assert Trajectory.objects.get(pk=traj.pk).status == TrajectoryStatus.RUNNING
    traj.finish_error(token, "infra_error", "the engine went away")
    traj.refresh_from_db()
    assert (traj.status, traj.failure, traj.claimed_at) == (TrajectoryStatus.ERROR, "infra_error", None)


def test_a_stale_trajectory_claim_is_taken_over():
    task = Task.objects.create(name="t", status=TaskStatus.VALIDATED, step=Step.DONE)
    batch = RolloutBatch.objects.create(name="b", model="m", attempts=1)
    long_ago = timezone.now() - timedelta(hours=3)
    traj = Trajectory.objects.create(batch=batch, task=task, attempt=0, model="m", status=TrajectoryStatus.RUNNING,
                                     claimed_at=long_ago)
    assert Trajectory.claim(traj.pk, stale_before=timezone.now() - timedelta(hours=1)) is not None


def test_requesting_a_validation_queues_its_docker_job_only_after_the_commit(monkeypatch,
                                                                             django_capture_on_commit_callbacks):
    task = Task.objects.create(name="t", status=TaskStatus.VALIDATED, step=Step.DONE)
    version = TaskVersion.objects.create(task=task, number=1, content_hash="sha256:t-1", files={})
    sent: list[int] = []
    monkeypatch.setattr(jobs.docker_validate, "delay", sent.append)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        validation = validating.request_validation(version)
    assert sent == [] and len(callbacks) == 1  # nothing before the commit
    callbacks[0]()
    assert sent == [validation.pk]
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        here = validating.request_validation(version, queue=False)  # the CLI runs it itself
    assert callbacks == [] and sent == [validation.pk]
    assert Validation.objects.get(pk=here.pk).status == "queued"


def test_advancing_a_run_queues_each_open_step_on_its_queue(make_run, monkeypatch, django_capture_on_commit_callbacks):
    run = make_run("", "b")
    sent: list[tuple] = []
    monkeypatch.setattr(jobs.llm_step, "delay", lambda task_id, step: sent.append(("llm", task_id, step)))
    monkeypatch.setattr(jobs.docker_step, "delay", lambda task_id, step: sent.append(("docker", task_id, step)))
    with django_capture_on_commit_callbacks(execute=True):
        assert construction.advance_construction(run.pk) == 2
    first, second = Task.objects.filter(run=run).order_by("id")
    assert sorted(sent) == [("llm", first.pk, Step.ENVIRONMENT), ("llm", second.pk, Step.ENVIRONMENT)]
    Task.objects.filter(pk=first.pk).update(step=Step.BUILD)
    Task.claim(second.pk, Step.ENVIRONMENT)  # held by a worker: not handed out again
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        construction.advance_construction(run.pk)
    assert sent == [("docker", first.pk, Step.BUILD)]


def test_starting_construction_creates_the_tasks_and_queues_the_run(make_run, monkeypatch,
                                                                    django_capture_on_commit_callbacks):
    run = make_run("")
    sent: list[int] = []
    monkeypatch.setattr(jobs.advance_construction, "delay", sent.append)
    with django_capture_on_commit_callbacks(execute=True):
        assert construction.start_construction(run) == 1
    assert sent == [run.pk] and Task.objects.filter(run=run).count() == 1


def test_reclaiming_gives_back_pending_trajectories_once_without_queueing_them(monkeypatch,
                                                                                django_capture_on_commit_callbacks):
    task = Task.objects.create(name="t", status=TaskStatus.VALIDATED, step=Step.DONE)
    batch = RolloutBatch.objects.create(name="b", model="m", attempts=2, status="running")
    a = Trajectory.objects.create(batch=batch, task=task, attempt=0, model="m")
    b = Trajectory.objects.create(batch=batch, task=task, attempt=1, model="m")
    sent: list[int] = []
    monkeypatch.setattr(jobs.docker_rollout, "delay", sent.append)
    with django_capture_on_commit_callbacks(execute=True):
        assert rollouts.reclaim(batch, all_pending=True) == [a.pk, b.pk]
    assert sent == []
    with django_capture_on_commit_callbacks(execute=True):
        assert rollouts.resume(batch, all_pending=True) == 2
    assert sent == [a.pk, b.pk]
