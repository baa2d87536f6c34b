"""A synthesis run through a real Celery worker process, replaying a cassette recorded over HTTP."""
import pytest

from demo import scripted_llm
from scenarios import services
from scenarios.models import CandidatePair, LLMCall, RunStatus, Scenario, ScenarioHypothesis
from skills import services as skill_services
from tests.conftest import DEMO_CORPUS
from tests.workers import wait_for_run


@pytest.mark.django_db(transaction=True)
def test_a_run_started_from_the_api_service_finishes_on_a_worker(celery_worker, tmp_path):
    skill_services.ingest_path(DEMO_CORPUS, label="demo")
    cassette = tmp_path / "demo.cassette.jsonl"
    with scripted_llm.ScriptedLLMServer() as url:
        recorded = services.start_run(name="record", enqueue=False, trusted=True, config={
            "limits": {"max_pairs": 8}, "llm": {"provider": "openai", "base_url": url, "model": "scripted", "record": str(cassette)}})
        recorded = services.execute_run_inline(recorded.pk)
    assert recorded.status == RunStatus.SUCCEEDED

    run = services.start_run(name="on a worker", trusted=True, config={
        "limits": {"max_pairs": 8}, "llm": {"provider": "replay", "cassette": str(cassette), "model": "scripted"},
        "construction": {"auto": False},  # this test stops at the repository; tests/tasks covers construction
    })
    wait_for_run(run, celery_worker)
    assert run.status == RunStatus.SUCCEEDED, (run.status, run.stage, run.message, celery_worker.log_tail())
    assert ScenarioHypothesis.objects.filter(run=run).count() == ScenarioHypothesis.objects.filter(run=recorded).count()
    assert (sorted(CandidatePair.objects.filter(run=run).values_list("skill_set", "verdict"))
            == sorted(CandidatePair.objects.filter(run=recorded).values_list("skill_set", "verdict")))
    assert Scenario.objects.filter(run=run, consistency="consistent").count() == Scenario.objects.filter(run=recorded).count()
    assert LLMCall.objects.filter(run=run).count() == LLMCall.objects.filter(run=recorded).count()
