"""Construction through a real Celery worker (LLM and Docker queues), replaying a cassette that was
recorded over HTTP from the scripted model: the recorded responses drive real builds and trials."""
import time

import pytest
from django.conf import settings
from django.db import transaction

from scenarios.models import LLMCall
from tasks import construction
from tasks.models import Task, TaskStatus

pytestmark = pytest.mark.docker


@pytest.mark.django_db(transaction=True)
def test_construction_replayed_from_a_cassette_finishes_on_a_worker(engine, make_run, llm_url, docker_worker, tmp_path):
    cassette = tmp_path / "construction.cassette.jsonl"
    recorded = make_run("nop-pass", url=llm_url)
    recorded.config["llm"]["record"] = str(cassette)
    recorded.save(update_fields=["config"])
    construction.construct_run(recorded.pk)
    assert Task.objects.get(run=recorded).status == TaskStatus.VALIDATED

    run = make_run("nop-pass")
    run.config["llm"] = {"provider": "replay", "cassette": str(cassette), "model": "scripted"}
    run.save(update_fields=["config"])
    with transaction.atomic():
        construction.start_construction(run)  # queued when the transaction commits
    task = Task.objects.get(run=run)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        task.refresh_from_db()
        if task.is_final:
            break
        assert docker_worker.poll() is None, docker_worker.log_tail()
        time.sleep(0.5)
    assert task.status == TaskStatus.VALIDATED, (task.status, task.step, task.message, docker_worker.log_tail())
    assert task.repairs.get().artifact == "verifier"
    assert set(LLMCall.objects.filter(run=run).values_list("status", flat=True)) == {"replayed"}
    assert LLMCall.objects.filter(run=run).count() == LLMCall.objects.filter(run=recorded).count()


@pytest.fixture
def worker_with_beat(transactional_db, tmp_path):
    """`facet worker` as shipped: all three queues and Celery beat inside, resuming work that waited
    for Docker every 2 s (FACET_RESUME_WAITING_S)."""
    import os
    import signal
    import subprocess
    import sys

    from django.conf import settings

    from tests.conftest import REPO, database_url

    env = dict(os.environ, DATABASE_URL=database_url(), DJANGO_SETTINGS_MODULE="facet_site.test_settings",
               FACET_DATA_DIR=str(settings.BROKER_DIR.parent), FACET_RESUME_WAITING_S="2")
    env.pop("DOCKER_HOST", None)
    log_path = tmp_path / "worker.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "facet_site.cli", "worker", "-c", "1", "-l", "INFO", "-n", f"test-beat-{os.getpid()}@%h"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    proc.log_tail = lambda: log_path.read_text()[-4000:]
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    log.close()


@pytest.mark.django_db(transaction=True)
def test_a_task_that_waited_for_docker_resumes_by_itself_on_a_worker_with_beat(engine, make_run, llm_url,
                                                                               monkeypatch, request):
    # First attempt: no engine answers (a socket that does not exist), so the build step waits.
    engine_host = settings.DOCKER_HOST
    monkeypatch.setattr(settings, "DOCKER_HOST", "unix:///nonexistent/facet-test-docker.sock")
    run = make_run("", url=llm_url)
    construction.construct_run(run.pk)
    task = Task.objects.get(run=run)
    assert task.status == TaskStatus.WAITING_FOR_DOCKER and task.step == "build"
    assert "Docker engine not reachable at unix:///nonexistent/facet-test-docker.sock" in task.message
    monkeypatch.setattr(settings, "DOCKER_HOST", engine_host)
    # Nothing is queued for the task: only the periodic resume job can bring it back.
    worker = request.getfixturevalue("worker_with_beat")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        task.refresh_from_db()
        if task.is_final:
            break
        assert worker.poll() is None, worker.log_tail()
        time.sleep(0.5)
    assert task.status == TaskStatus.VALIDATED, (task.status, task.step, task.message, worker.log_tail())
    # beat's one periodic resume job (facet_site/recovery.py) brought it back
    assert "facet_site.jobs.resume_stalled" in worker.log_tail()
