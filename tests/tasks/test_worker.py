"""Construction through a real Celery worker (LLM and Docker queues), replaying a cassette that was
recorded over HTTP from the scripted model: the recorded responses drive real builds and trials."""
import time

import pytest
from django.db import transaction

from scenarios.models import LLMCall
from tasks import jobs, services
from tasks.models import Task, TaskStatus

pytestmark = pytest.mark.docker


@pytest.mark.django_db(transaction=True)
def test_construction_replayed_from_a_cassette_finishes_on_a_worker(engine, make_run, llm_url, docker_worker, tmp_path):
    cassette = tmp_path / "construction.cassette.jsonl"
    recorded = make_run("nop-pass", url=llm_url)
    recorded.config["llm"]["record"] = str(cassette)
    recorded.save(update_fields=["config"])
    services.construct_run(recorded.pk)
    assert Task.objects.get(run=recorded).status == TaskStatus.VALIDATED

    run = make_run("nop-pass")
    run.config["llm"] = {"provider": "replay", "cassette": str(cassette), "model": "scripted"}
    run.save(update_fields=["config"])
    with transaction.atomic():
        services.create_tasks(run)
        transaction.on_commit(lambda: jobs.advance_construction.delay(run.pk))
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
