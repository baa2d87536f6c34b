"""Every kind of job survives the death of its worker (docs/operations.md):
real `facet worker` processes are killed with SIGKILL in the middle of a synthesis run, a task
import and a dataset export, on the filesystem broker and on Redis; a new worker with beat finishes
the work with the counts an uninterrupted run gives, no row stored twice and no LLM answer paid
for twice (what a dead worker was paid for comes back from the request cache). Ingest has its own
tests in tests/test_recovery.py; the Docker-bound kinds are in tests/test_recovery_kills_docker.py.

Leases are short here (FACET_JOB_LEASE_S=5) so a dead worker is noticed in seconds.
"""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Callable

import pytest
from django.db.models import Count

from demo.scripted_llm import ScriptedLLMServer
from scenarios import services as synthesis
from scenarios.models import (CandidatePair, Judgement, LLMCacheEntry, LLMCall, RunSkill, RunStatus, Scenario,
                              ScenarioHypothesis, Stage, SynthesisRun, WorkStatus)
from skills import services as skill_services
from tasks import exports, imports
from tasks.models import Export, ExportStatus, Task, TaskImport, TaskVersion
from tests.conftest import DEMO_CORPUS
from tests.tasks.dataset_fixtures import multimedia_task
from tests.workers import WorkerProcess, redis_broker, wait_until, worker_env

FAST_RECOVERY = {"FACET_JOB_LEASE_S": "5", "FACET_JOB_HEARTBEAT_S": "1", "FACET_RESUME_WAITING_S": "2"}
REDIS_DB = 9  # these tests' own Redis database, emptied before and after
LLM_THREADS = 4

pytestmark = pytest.mark.django_db(transaction=True)  # worker processes see only committed rows


@dataclass
class Broker:
    name: str
    env: dict
    send: Callable[..., object]  # send(job name, args): onto this broker, routed like the services do


@pytest.fixture(params=["filesystem", "redis"])
def broker(request):
    from facet_site.celery import app

    if request.param == "filesystem":
        yield Broker("filesystem", {}, lambda name, args: app.send_task(name, args=args))
        return
    with redis_broker(REDIS_DB) as (env, sender):
        yield Broker("redis", env, lambda name, args: sender.send_task(name, args=args))


def start_worker(tmp_path, settings, broker: Broker, name: str, *, queues: str, beat: bool) -> WorkerProcess:
    env = worker_env(settings.BROKER_DIR.parent, **FAST_RECOVERY, **broker.env,
                     FACET_LLM_CONCURRENCY=str(LLM_THREADS))
    return WorkerProcess(name=f"{name}-{uuid.uuid4().hex[:6]}", queues=queues, log_path=tmp_path / f"{name}.log",
                         env=env, beat=beat)


# --- synthesis: the four stages, killed mid-reconstruction ----------------------------------------


def run_config(url: str) -> dict:
    return {"limits": {"max_pairs": 6}, "construction": {"auto": False},
            "llm": {"provider": "openai", "base_url": url, "model": "scripted"}}


def paid_by_item(run) -> dict[tuple[str, str], int]:
    """Answers paid for (from the server, not the cache), by stage and the item they served."""
    return {(stage, subject): n for stage, subject, n in LLMCall.objects.filter(run=run, status="ok").values_list(
        "stage", "subject").annotate(n=Count("id")).values_list("stage", "subject", "n")}


def answered_by_stage(run) -> dict[str, set[str]]:
    """The items (subjects) whose request was answered, by the server or the cache, by stage."""
    stages: dict[str, set[str]] = {}
    for stage, subject in LLMCall.objects.filter(run=run, status__in=["ok", "cached"]).values_list("stage", "subject"):
        stages.setdefault(stage, set()).add(subject)
    return stages


def test_a_synthesis_run_whose_worker_is_killed_mid_stage_finishes_with_every_answer_paid_once(
        tmp_path, settings, broker):
    skill_services.ingest_path(DEMO_CORPUS, label="demo")
    # what an uninterrupted run makes, in this process; its answers must not be in the cache after
    with ScriptedLLMServer() as url:
        reference = synthesis.execute_run_inline(
            synthesis.start_run(name="reference", enqueue=False, trusted=True, config=run_config(url)).pk)
    assert reference.status == RunStatus.SUCCEEDED
    assert Scenario.objects.filter(run=reference).count() >= 2, "too few scenarios to kill one mid-way"
    LLMCacheEntry.objects.all().delete()

    server = ScriptedLLMServer(latency=0.4)  # a model's think time: the kill lands with calls in flight
    with server as url:
        run = synthesis.start_run(name="killed", enqueue=False, trusted=True, config=run_config(url))
        first = start_worker(tmp_path, settings, broker, "first", queues="default,llm", beat=False)
        try:
            broker.send("scenarios.jobs.advance_run", [run.pk])

            def mid_reconstruction():
                run.refresh_from_db()
                scenarios = Scenario.objects.filter(run=run)
                return (run.stage == Stage.RECONSTRUCTION and scenarios.filter(status=WorkStatus.DONE).exists()
                        and scenarios.filter(status=WorkStatus.RUNNING).exists())

            wait_until(mid_reconstruction, workers=[first], timeout=300, what="a scenario mid-reconstruction",
                       every=0.05)
        finally:
            first.kill()
        run.refresh_from_db()
        assert run.status == RunStatus.RUNNING
        dead_items = Scenario.objects.filter(run=run, status=WorkStatus.RUNNING).count()
        assert dead_items >= 1  # held by the dead worker: only a lease that runs out frees them

        second = start_worker(tmp_path, settings, broker, "second", queues="default,llm", beat=True)
        try:
            wait_until(lambda: SynthesisRun.objects.get(pk=run.pk).is_finished, workers=[second], timeout=300,
                       what="the run to finish after the kill")
        finally:
            second.stop()
        server_answered = server.requests

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.message == "Finished.", run.message
    # the counts of the uninterrupted run, each row once. Which skill sets become pairs is not
    # compared: retrieval breaks exact ties by hypothesis id, and concurrent workers number the
    # hypotheses in another order than one process does
    for model in (ScenarioHypothesis, CandidatePair):
        assert model.objects.filter(run=run).count() == model.objects.filter(run=reference).count()
    pairs = CandidatePair.objects.filter(run=run)
    assert Judgement.objects.filter(pair__run=run).count() == pairs.count()
    assert not pairs.filter(verdict="").exists() and not pairs.exclude(status=WorkStatus.DONE).exists()
    scenarios = Scenario.objects.filter(run=run)
    assert scenarios.count() == pairs.filter(verdict="accepted").count()
    assert not scenarios.exclude(status=WorkStatus.DONE).exists() and not scenarios.filter(consistency="").exists()
    # every item got the answers it needed: each skill its hypotheses, each pair its judgement,
    # each scenario every reconstruction step, in the stages an uninterrupted run asks
    answered = answered_by_stage(run)
    assert set(answered) == set(answered_by_stage(reference))
    for stage, hashes in answered.items():
        items = {"hypotheses": RunSkill.objects.filter(run=run).count(), "judge": pairs.count()}.get(
            stage, scenarios.count() if stage.startswith("reconstruct.") else None)
        if items is not None:
            assert len(hashes) == items, stage
    # and none was paid for twice: what the dead worker had been paid for came from the cache
    assert [item for item, n in paid_by_item(run).items() if n > 1] == []
    # the server answered no more than that, but for the calls in flight when the worker died
    paid = sum(paid_by_item(run).values())
    assert paid <= server_answered <= paid + LLM_THREADS


# --- task import and dataset export --------------------------------------------------------------

N_TASKS = 120
FINISHED = (ExportStatus.DONE, ExportStatus.FAILED)


def sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_an_import_and_an_export_whose_worker_is_killed_mid_job_finish_with_every_task_once(
        tmp_path, settings, broker):
    dataset = tmp_path / "dataset"
    for i in range(N_TASKS):
        multimedia_task(dataset / f"task-{i:03d}", n=i)

    task_import = imports.create_import(path=dataset, source="dataset", queue=False)
    first = start_worker(tmp_path, settings, broker, "import-first", queues="default", beat=False)
    try:
        broker.send("tasks.jobs.run_import", [task_import.pk, False])
        wait_until(lambda: 0 < Task.objects.count() < N_TASKS // 2, workers=[first], timeout=300,
                   what="the import mid-way", every=0.02)
    finally:
        first.kill()
    assert TaskImport.objects.get(pk=task_import.pk).status == ExportStatus.RUNNING
    stored_before = Task.objects.count()
    assert 0 < stored_before < N_TASKS

    second = start_worker(tmp_path, settings, broker, "second", queues="default", beat=True)
    try:
        wait_until(lambda: TaskImport.objects.get(pk=task_import.pk).status in FINISHED, workers=[second],
                   timeout=300, what="the import to finish after the kill")
        task_import.refresh_from_db()
        assert task_import.status == ExportStatus.DONE, task_import.problems
        # the tasks the dead worker stored count as imported by this import, not as skipped
        assert (task_import.imported, task_import.skipped, task_import.problems) == (N_TASKS, 0, [])
        assert Task.objects.count() == TaskVersion.objects.count() == task_import.tasks.count() == N_TASKS
        assert TaskVersion.objects.values("content_hash").distinct().count() == N_TASKS

        # the export of what was imported, killed while it writes its archive
        export = exports.create_export(query="origin=imported", parts=["harbor", "manifest"], queue=False)
        second.stop()
        third = start_worker(tmp_path, settings, broker, "export-first", queues="default", beat=False)
        try:
            broker.send("tasks.jobs.run_export", [export.pk])

            def writing():
                e = Export.objects.get(pk=export.pk)
                return e.status == ExportStatus.RUNNING and e.total == N_TASKS

            wait_until(writing, workers=[third], timeout=300, what="the export writing its archive", every=0.01)
        finally:
            third.kill()
        assert Export.objects.get(pk=export.pk).status == ExportStatus.RUNNING
        fourth = start_worker(tmp_path, settings, broker, "export-second", queues="default", beat=True)
        try:
            wait_until(lambda: Export.objects.get(pk=export.pk).status in FINISHED, workers=[fourth],
                       timeout=300, what="the export to finish after the kill")
        finally:
            fourth.stop()
    finally:
        second.stop()
    export.refresh_from_db()
    assert export.status == ExportStatus.DONE, export.error
    assert (export.summary["tasks"], export.done, export.total) == (N_TASKS, N_TASKS, N_TASKS)
    # byte for byte the archive an uninterrupted export writes
    reference = exports.write_archive(tmp_path / "reference.tar.gz", query="origin=imported",
                                      parts=["harbor", "manifest"])
    assert sha256(export.archive_path) == reference.sha256 == export.archive_sha256
