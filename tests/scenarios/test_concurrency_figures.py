"""What a user sees of LLM work at scale: the estimate before a run starts (run form and `facet run
start --dry-run`), the live figures on a running run's page, and `facet worker` choosing a thread
pool for the llm queue and a process pool for the rest."""
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from facet_site.management.commands import worker as worker_command
from scenarios.models import LLMCall, RunStatus, Stage, SynthesisRun
from scenarios.run_config import DEFAULT_CONFIG

pytestmark = pytest.mark.django_db


def test_the_cli_dry_run_prints_an_estimate_at_the_default_latency_and_starts_nothing(corpus, settings):
    settings.FACET_LLM_CONCURRENCY = 2
    settings.FACET_LLM_DEFAULT_LATENCY_S = 10.0
    out = StringIO()
    call_command("run", "start", "--name", "sized", "--dry-run", "--model", "m", stdout=out)
    text = out.getvalue()
    # 3 skills, default proportions: ceil(3 × 0.75) = 3 pairs, ceil(3 × 0.75) = 3 accepted, 8 calls each
    assert "Estimate for 3 skills → ~3 pairs → ~3 scenarios" in text
    assert "Hypotheses" in text and "Reconstruction" in text and "      24 " in text
    assert "total                  30" in text
    # hypotheses: ceil(3/2) × 10 s, judge: the same, reconstruction: ceil(3/2) × 8 × 10 s = 200 s
    assert " 3 min" in text
    assert "at 10 s per call (FACET_LLM_DEFAULT_LATENCY_S" in text and "2 calls in flight" in text
    assert "cost unknown" in text
    assert not SynthesisRun.objects.exists()


def test_the_estimate_uses_the_measured_latency_and_the_price(corpus, settings):
    from facet_site.lib.llm import LLMSettings

    settings.FACET_LLM = LLMSettings(model="m", prices={"m": [1.0, 2.0]})
    settings.FACET_LLM_ENDPOINTS = {}
    from facet_site.lib.llm.settings import endpoints_from_env

    settings.FACET_LLM_ENDPOINTS = endpoints_from_env({}, settings.FACET_LLM)
    for _ in range(4):
        LLMCall.objects.create(stage="judge", subject="pair:a+b", model="m", prompt_version="1", status="ok",
                               latency_ms=3000, tokens_in=900, tokens_out=100)
    out = StringIO()
    call_command("run", "start", "--name", "sized", "--dry-run", "--workers", "2", stdout=out)
    text = out.getvalue()
    assert "at 3 s per call (4 stored calls)" in text and "2 llm worker(s)" in text
    assert "cost $" in text and "cost unknown" not in text


def test_the_run_form_shows_the_estimate_without_starting_a_run(client_as, corpus):
    response = client_as("reviewer").post(reverse("scenarios:runs"), {
        "name": "weekly", "strategy": "forward", "max_skills": "3", "estimate": "1", "categories": []})
    html = response.content.decode()
    assert response.status_code == 200
    assert 'id="run-estimate"' in html and "Estimate</b> for 3 skills" in html
    assert "Reconstruction" in html and "calls in flight" in html
    assert not SynthesisRun.objects.exists()


def test_a_running_runs_page_shows_calls_in_flight_calls_per_second_throttling_and_errors(client_as, corpus):
    run = SynthesisRun.objects.create(name="live", status=RunStatus.RUNNING, stage=Stage.JUDGE, config=DEFAULT_CONFIG)
    for i in range(30):
        LLMCall.objects.create(run=run, stage="judge", subject=f"pair:{i}", model="m", prompt_version="1",
                               status="ok", tokens_in=100, tokens_out=50)
    LLMCall.objects.create(run=run, stage="judge", subject="pair:x", model="m", prompt_version="1", status="error",
                           error="HTTP 429 from http://e/v1/chat/completions: slow down")
    response = client_as("viewer").get(reverse("scenarios:run", args=[run.pk]), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert 'id="live-llm"' in html
    assert "<dt>Calls/s</dt><dd>1.03 " in html  # 31 calls (30 answered, 1 refused) in the last 30 s
    assert "<dt>Tokens/s</dt><dd>150.0</dd>" in html
    assert "1 call refused (429/503)" in html
    assert "1 in the last 30 s, 1 in all" in html


def test_facet_worker_runs_the_llm_queue_on_threads_and_the_others_on_processes(monkeypatch, settings):
    settings.FACET_LLM_CONCURRENCY = 64
    started = []
    monkeypatch.setattr(worker_command.Command, "_worker", lambda self, argv, *a, **k: started.append(argv))
    monkeypatch.setattr(worker_command.Command, "_both", lambda self, others, threads, *a: started.append((others, threads)))
    call_command("worker", "-Q", "llm")
    call_command("worker", "-Q", "docker", "-c", "3")
    call_command("worker")  # the README's plain command: both kinds, in two processes
    assert started[0] == ["-Q", "llm", "-P", "threads", "-c", "64"]
    assert started[1] == ["-Q", "docker", "-P", "prefork", "-c", "3"]
    assert started[2] == (["default", "docker"], 64)


def test_an_item_refused_a_database_connection_goes_back_to_the_queue_instead_of_failing(corpus, monkeypatch):
    from django.db import OperationalError

    from scenarios import services
    from scenarios.models import RunSkill, WorkStatus

    run = services.start_run(name="busy database", enqueue=False, config={"llm": {"model": "m"}})
    item = RunSkill.objects.filter(run=run).first()

    def refused(*args, **kwargs):
        raise OperationalError("FATAL:  sorry, too many clients already")

    monkeypatch.setattr(services.llm, "client_for", refused)
    with pytest.raises(OperationalError):
        services.extract_hypotheses(item.pk)
    item.refresh_from_db()
    assert item.status == WorkStatus.QUEUED and "too many clients" in item.error
    from scenarios import jobs

    assert OperationalError in jobs.llm_hypotheses.autoretry_for
