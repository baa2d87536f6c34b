"""Jobs survive the death of their worker (docs/operations.md): real `facet worker` processes are
killed with SIGKILL in the middle of an ingest, on the filesystem broker and on Redis, and the
batch still finishes, with the counts an uninterrupted run gives and no skill or problem stored
twice.

- the pool process killed: the broker gives the message back, the redelivered job finds the batch
  held by a lease that no longer beats, waits it out and takes the batch over;
- the whole worker killed: a new worker's beat (resume_stalled) finds the batch stalled and
  queues it again (on the filesystem broker the message died with the worker).
"""
from __future__ import annotations

import os
import random
import signal
import time
import uuid
from pathlib import Path

import pytest

from skills.models import IngestBatch, IngestBatchStatus, IngestProblem, Skill, SkillStatus, Verdict, VerdictKind
from tests.workers import WorkerProcess, redis_broker, worker_env

N_SKILLS = 36
N_BROKEN = 3
# short leases so a dead worker is noticed in seconds; small chunks so there is a "middle" to kill in
FAST_RECOVERY = {"FACET_JOB_LEASE_S": "5", "FACET_JOB_HEARTBEAT_S": "1", "FACET_RESUME_WAITING_S": "2",
                 "FACET_INGEST_CHUNK_SIZE": "3"}
REDIS_DB = 15  # a Redis database of these tests' own (no other worker consumes it), emptied before and after
WORDS = ("sqlite csv json yaml nginx redis postgres kafka git make cmake rust python node awk sed grep tar "
         "gzip cron systemd ssh rsync curl jq ffmpeg imagemagick pandoc latex terraform ansible").split()

pytestmark = pytest.mark.django_db(transaction=True)  # worker processes see only committed rows


def write_corpus(root: Path) -> Path:
    rnd = random.Random(18)
    for i in range(N_SKILLS):
        tools = rnd.sample(WORDS, 4)
        d = root / f"skill-{i:03d}"
        d.mkdir(parents=True)
        (d / "SKILL.md").write_text(
            f"---\nname: skill-{i:03d}-{tools[0]}\ndescription: Use {tools[0]} and {tools[1]} to turn {tools[2]} "
            f"report {i} into {tools[3]} output.\n---\n# Skill {i}\n\n1. Run `{tools[0]} data/{i}.txt`.\n"
            f"2. Write `out/{i}.txt`.\n")
    for j in range(N_BROKEN):
        (root / f"broken-{j}").mkdir()
        (root / f"broken-{j}" / "SKILL.md").write_text("---\nname: [oops\n---\n")
    return root


def start_worker(tmp_path, settings, name: str, *, beat: bool, **env) -> WorkerProcess:
    return WorkerProcess(name=f"{name}-{uuid.uuid4().hex[:6]}", queues="default", log_path=tmp_path / f"{name}.log",
                         env=worker_env(settings.BROKER_DIR.parent, **FAST_RECOVERY, **env), beat=beat)


def wait_until_mid_batch(batch: IngestBatch, worker: WorkerProcess, *, timeout: float = 300) -> None:
    """Until the worker has stored some chunks of the batch, but not all of them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch.refresh_from_db()
        assert batch.status != IngestBatchStatus.SUCCEEDED, "the batch finished before the worker could be killed"
        if batch.status == IngestBatchStatus.RUNNING and Skill.objects.filter(batch=batch).count() >= 6:
            return
        assert worker.poll() is None, worker.log_tail()
        time.sleep(0.05)
    pytest.fail(f"the batch never got going: {batch.status}\n{worker.log_tail()}")


def wait_finished(batch: IngestBatch, worker: WorkerProcess, *, timeout: float = 300) -> IngestBatch:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch.refresh_from_db()
        if batch.is_finished:
            return batch
        assert worker.poll() is None, worker.log_tail()
        time.sleep(0.3)
    pytest.fail(f"batch #{batch.pk} is still {batch.status} after {timeout} s\n{worker.log_tail()}")


def assert_counted_once(batch: IngestBatch) -> None:
    """The summary an uninterrupted run gives, and each skill and problem stored once."""
    assert batch.status == IngestBatchStatus.SUCCEEDED, batch.message
    skills = Skill.objects.filter(batch=batch)
    assert skills.count() == N_SKILLS
    assert skills.values("key").distinct().count() == N_SKILLS
    assert Skill.objects.count() == N_SKILLS  # no second version of anything
    s = batch.summary
    assert (s["discovered"], s["ingested"], s["updated"], s["unchanged"], s["errors"]) == (N_SKILLS, N_SKILLS, 0, 0,
                                                                                          N_BROKEN)
    assert s["accepted"] == skills.filter(status=SkillStatus.ACCEPTED).count()
    duplicates = Verdict.objects.filter(skill__batch=batch, kind__in=[VerdictKind.DUPLICATE,
                                                                      VerdictKind.NEAR_DUPLICATE])
    assert s["duplicates"] == duplicates.values("skill").distinct().count()
    assert IngestProblem.objects.filter(batch=batch).count() == N_BROKEN
    assert batch.processed == batch.total == N_SKILLS + N_BROKEN
    assert f"{N_SKILLS} new, 0 updated, 0 unchanged" in batch.message


@pytest.fixture
def batch(tmp_path):
    from skills import services

    return services.create_batch(path=write_corpus(tmp_path / "corpus"), origin="cli")


@pytest.fixture(params=["filesystem", "redis"])
def broker(request):
    """The worker's environment for one broker, and how to queue the ingest job on it."""
    if request.param == "filesystem":
        from skills import jobs

        yield {}, lambda batch_id: jobs.ingest_batch.delay(batch_id)
        return
    with redis_broker(REDIS_DB) as (env, sender):
        yield env, lambda batch_id: sender.send_task("skills.jobs.ingest_batch", args=[batch_id], queue="default")


def test_killing_the_pool_process_mid_ingest_resumes_the_batch_in_the_same_worker(batch, tmp_path, settings,
                                                                                  broker):
    env, enqueue = broker
    # no beat: the redelivered message alone must bring the batch to the end
    worker = start_worker(tmp_path, settings, "pool-kill", beat=False, **env)
    try:
        enqueue(batch.pk)
        wait_until_mid_batch(batch, worker)
        (pool,) = worker.children()
        os.kill(pool, signal.SIGKILL)
        assert Skill.objects.filter(batch=batch).count() < N_SKILLS
        assert_counted_once(wait_finished(batch, worker))
    finally:
        worker.stop()


def test_killing_the_whole_worker_mid_ingest_is_resumed_by_a_new_worker(batch, tmp_path, settings, broker):
    env, enqueue = broker
    first = start_worker(tmp_path, settings, "first", beat=False, **env)
    try:
        enqueue(batch.pk)
        wait_until_mid_batch(batch, first)
    finally:
        first.kill()
    assert Skill.objects.filter(batch=batch).count() < N_SKILLS
    batch.refresh_from_db()
    assert batch.status == IngestBatchStatus.RUNNING  # stuck, until a worker with beat looks
    # on the filesystem broker the message died with the worker: the new worker's beat finds the
    # batch by its silent heartbeat; on Redis the unacknowledged message may come back first
    second = start_worker(tmp_path, settings, "second", beat=True, **env)
    try:
        assert_counted_once(wait_finished(batch, second))
    finally:
        second.stop()
