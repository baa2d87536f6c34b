"""Leases on the work that used to wait out a long stale timeout (docs/operations.md):
synthesis items and retrievals, construction steps and rollout trajectories are found by a
lease that ran out (FACET_JOB_LEASE_S, not the run's stale_after_minutes) and handed out again by
the periodic resume job, once however many beats look; work whose worker still renews its lease is
left alone. The worker-kill tests with real processes are in tests/test_recovery_kills.py."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from facet_site import leases, recovery
from scenarios.models import RunSkill, RunStatus, Stage, SynthesisRun, WorkStatus
from skills.models import Skill
from tasks.models import (RolloutBatch, RolloutBatchStatus, Step, Task, TaskStatus, Trajectory, TrajectoryStatus,
                          Validation, ValidationStatus)
from tasks.versions import create_version

pytestmark = pytest.mark.django_db


def long_ago():
    return timezone.now() - timedelta(hours=1)


def a_while_ago():
    """Older than a lease (120 s by default), far younger than any stale_after_minutes."""
    return timezone.now() - timedelta(seconds=200)


@pytest.fixture
def run():
    skills = [Skill.objects.create(key=f"k{i}", name=f"skill {i}", source="s", source_kind="directory",
                                content_hash=f"h{i}")
              for i in range(3)]
    run = SynthesisRun.objects.create(name="r", status=RunStatus.RUNNING, stage=Stage.HYPOTHESES,
                                      config={"limits": {"stale_after_minutes": 30}})
    for s in skills:
        RunSkill.objects.create(run=run, skill=s)
    return run


def items(run):
    return list(RunSkill.objects.filter(run=run).order_by("id"))


def test_a_synthesis_item_whose_worker_died_is_handed_out_again_after_a_lease_not_the_stale_window(
        run, django_capture_on_commit_callbacks, monkeypatch):
    dead, alive, queued = items(run)
    RunSkill.objects.filter(pk=dead.pk).update(status=WorkStatus.RUNNING, claimed_at=a_while_ago())
    RunSkill.objects.filter(pk=alive.pk).update(status=WorkStatus.RUNNING, claimed_at=timezone.now())
    RunSkill.objects.filter(pk=queued.pk).update(status=WorkStatus.QUEUED, claimed_at=a_while_ago())
    monkeypatch.setattr(recovery, "_llm_queue_empty", lambda: False)  # its message still waits

    with django_capture_on_commit_callbacks() as queued_jobs:
        assert recovery.resume_stalled()["synthesis"] == [run.pk]
    assert len(queued_jobs) == 1  # the run is advanced, which hands the item out again
    statuses = {i.pk: (i.status, i.error) for i in items(run)}
    assert statuses[dead.pk] == (WorkStatus.PENDING, "Its worker stopped answering; queued again.")
    assert statuses[alive.pk][0] == WorkStatus.RUNNING
    assert statuses[queued.pk][0] == WorkStatus.QUEUED
    # a second beat a moment later finds nothing more to give back
    assert recovery.resume_stalled()["synthesis"] == []


def test_queued_items_are_handed_out_again_only_when_their_queue_lost_its_messages(run, monkeypatch):
    first, second, _ = items(run)
    RunSkill.objects.filter(pk=first.pk).update(status=WorkStatus.QUEUED, claimed_at=a_while_ago())
    RunSkill.objects.filter(pk=second.pk).update(status=WorkStatus.QUEUED, claimed_at=timezone.now())
    monkeypatch.setattr(recovery, "_llm_queue_empty", lambda: True)
    assert recovery.resume_stalled()["synthesis"] == [run.pk]
    assert RunSkill.objects.get(pk=first.pk).status == WorkStatus.PENDING
    assert RunSkill.objects.get(pk=second.pk).status == WorkStatus.QUEUED  # handed out within the lease


def test_the_llm_queue_reads_empty_on_the_filesystem_broker_and_not_with_a_message_in_it(settings):
    from scenarios import jobs

    assert recovery._llm_queue_empty()
    jobs.llm_hypotheses.delay(0)  # no worker consumes this process's broker folder
    assert not recovery._llm_queue_empty()


def test_a_retrieval_whose_worker_died_is_given_up_and_a_live_one_kept(run):
    SynthesisRun.objects.filter(pk=run.pk).update(stage=Stage.RETRIEVAL, retrieval_claimed_at=timezone.now())
    assert not SynthesisRun.free_stalled_retrieval(run.pk)
    SynthesisRun.objects.filter(pk=run.pk).update(retrieval_claimed_at=a_while_ago())
    assert recovery.resume_stalled()["synthesis"] == [run.pk]
    assert SynthesisRun.objects.get(pk=run.pk).retrieval_claimed_at is None


def test_the_job_renews_the_items_lease_while_it_works(run, settings, transactional_db):
    settings.FACET_JOB_HEARTBEAT_S = 0.05
    item = items(run)[0]
    RunSkill.objects.filter(pk=item.pk).update(status=WorkStatus.RUNNING, claimed_at=long_ago())
    with leases.heartbeat(RunSkill, item.pk, running=WorkStatus.RUNNING, field="claimed_at"):
        time.sleep(0.5)
    assert RunSkill.objects.get(pk=item.pk).claimed_at > leases.cutoff()
    assert RunSkill.requeue_stalled(run.pk) == 0
    # once the block ends, nobody renews it: a lease later, it is stalled
    settings.FACET_JOB_LEASE_S = 0.3
    time.sleep(0.6)
    assert RunSkill.requeue_stalled(run.pk) == 1


def _constructing(name: str, *, claimed_at, step=Step.VALIDATE) -> Task:
    task = Task.objects.create(name=name, step=step, status=TaskStatus.VALIDATING)
    Task.objects.filter(pk=task.pk).update(claimed_at=claimed_at)
    return task


def test_a_construction_step_whose_worker_died_is_freed_with_the_validation_it_ran(django_capture_on_commit_callbacks):
    dead = _constructing("dead", claimed_at=a_while_ago())
    version = create_version(dead, {"instruction.md": "Do it.\n", "task.toml": 'version = "1.0"\n'})
    running = Validation.objects.create(version=version, status=ValidationStatus.RUNNING)
    Validation.objects.filter(pk=running.pk).update(heartbeat_at=a_while_ago())
    alive = _constructing("alive", claimed_at=timezone.now())
    # its task's claim went quiet a beat before its validation's heartbeat: not yet
    skewed = _constructing("skewed", claimed_at=a_while_ago())
    skewed_version = create_version(skewed, {"instruction.md": "Other.\n", "task.toml": 'version = "1.0"\n'})
    beating = Validation.objects.create(version=skewed_version, status=ValidationStatus.RUNNING)
    Validation.objects.filter(pk=beating.pk).update(heartbeat_at=timezone.now())

    with django_capture_on_commit_callbacks():
        assert recovery.resume_stalled()["construction"] == [dead.pk]
    dead.refresh_from_db(), alive.refresh_from_db(), skewed.refresh_from_db()
    assert dead.claimed_at is None and "stopped answering" in dead.message
    assert alive.claimed_at is not None and skewed.claimed_at is not None
    assert Validation.objects.get(pk=running.pk).status == ValidationStatus.QUEUED  # the step takes it up again
    assert Validation.objects.get(pk=beating.pk).status == ValidationStatus.RUNNING
    assert recovery.resume_stalled()["construction"] == []


def test_the_stale_window_never_requeues_a_validation_that_still_beats(run):
    """A construction validation claimed over an hour ago whose worker still beats keeps running;
    one whose heartbeat is as old as its claim goes back to the queue."""
    from tasks import construction

    def running_validation(name: str, heartbeat_at) -> Validation:
        task = _constructing(name, claimed_at=timezone.now())
        Task.objects.filter(pk=task.pk).update(run=run)
        version = create_version(task, {"instruction.md": f"{name}.\n", "task.toml": 'version = "1.0"\n'})
        v = Validation.objects.create(version=version, status=ValidationStatus.RUNNING)
        Validation.objects.filter(pk=v.pk).update(claimed_at=long_ago() - timedelta(hours=1), heartbeat_at=heartbeat_at)
        return v

    long_running = running_validation("long", timezone.now())
    silent = running_validation("silent", long_ago() - timedelta(hours=1))
    construction._requeue_stale(run, minutes=60)
    assert Validation.objects.get(pk=long_running.pk).status == ValidationStatus.RUNNING
    assert Validation.objects.get(pk=silent.pk).status == ValidationStatus.QUEUED


def test_a_trajectory_whose_worker_died_is_queued_again_once_and_its_token_cleared(
        django_capture_on_commit_callbacks):
    task = Task.objects.create(name="t", step=Step.DONE, status=TaskStatus.VALIDATED)
    batch = RolloutBatch.objects.create(name="b", status=RolloutBatchStatus.RUNNING)
    dead = Trajectory.objects.create(batch=batch, task=task, attempt=0, status=TrajectoryStatus.RUNNING)
    fresh_claim = Trajectory.objects.create(batch=batch, task=task, attempt=1, status=TrajectoryStatus.RUNNING)
    beating = Trajectory.objects.create(batch=batch, task=task, attempt=2, status=TrajectoryStatus.RUNNING)
    Trajectory.objects.filter(pk=dead.pk).update(claimed_at=long_ago(), heartbeat_at=a_while_ago())
    Trajectory.objects.filter(pk=fresh_claim.pk).update(claimed_at=timezone.now())  # no beat yet
    Trajectory.objects.filter(pk=beating.pk).update(claimed_at=a_while_ago(), heartbeat_at=timezone.now())
    with django_capture_on_commit_callbacks() as queued:
        assert recovery.resume_stalled()["rollouts"] == [dead.pk]
    assert len(queued) == 1
    dead.refresh_from_db()
    assert (dead.status, dead.claimed_at, dead.heartbeat_at) == (TrajectoryStatus.PENDING, None, None)
    assert Trajectory.objects.filter(status=TrajectoryStatus.RUNNING).count() == 2
    assert recovery.resume_stalled()["rollouts"] == []


def test_a_trajectory_claim_starts_its_lease():
    task = Task.objects.create(name="t", step=Step.DONE, status=TaskStatus.VALIDATED)
    batch = RolloutBatch.objects.create(name="b", status=RolloutBatchStatus.RUNNING)
    traj = Trajectory.objects.create(batch=batch, task=task, attempt=0, status=TrajectoryStatus.RUNNING)
    Trajectory.objects.filter(pk=traj.pk).update(claimed_at=long_ago(), heartbeat_at=long_ago())
    assert Trajectory.claim(traj.pk, stale_before=timezone.now()) is not None  # taken over
    assert Trajectory.requeue_stalled() == []  # the new holder's lease is fresh


def test_beat_looks_at_the_work_items_of_every_stage():
    from scenarios.models import WorkItem
    from scenarios.services import STAGE_ITEMS

    assert set(STAGE_ITEMS.values()) <= set(WorkItem.__subclasses__())
