"""The four stages from ingested skills to reconstructed scenarios, over real HTTP and from a cassette."""
import dataclasses
import json

import pytest

from demo import scripted_llm
from scenarios import llm, pairs_jsonl, services
from scenarios.models import (
    CandidatePair,
    Judgement,
    LLMCall,
    PairVerdict,
    RunSkill,
    RunStatus,
    Scenario,
    ScenarioHypothesis,
    Stage,
    WorkStatus,
)
from scenarios.run_config import RunConfigError
from skills import services as skill_services
from skills.models import Skill
from tests.conftest import DEMO_CORPUS

pytestmark = pytest.mark.django_db


@pytest.fixture
def corpus(db):
    skill_services.ingest_path(DEMO_CORPUS, label="demo")
    return list(Skill.objects.current().accepted())


def run_over_http(url, tmp_path, **limits):
    cassette = tmp_path / "run.cassette.jsonl"
    run = services.start_run(name="http", enqueue=False, trusted=True, config={
        "limits": {"max_pairs": 12, **limits},
        "llm": {"provider": "openai", "base_url": url, "model": "scripted", "record": str(cassette)},
    })
    return services.execute_run_inline(run.pk), cassette


def test_a_run_turns_skills_into_judged_pairs_and_reconstructed_scenarios(corpus, tmp_path):
    with scripted_llm.ScriptedLLMServer() as url:
        run, cassette = run_over_http(url, tmp_path)
    assert run.status == RunStatus.SUCCEEDED and run.stage == Stage.DONE, run.message
    assert RunSkill.objects.filter(run=run, status=WorkStatus.DONE).count() == len(corpus)
    assert ScenarioHypothesis.objects.filter(run=run).count() == 3 * len(corpus)
    pairs = CandidatePair.objects.filter(run=run)
    assert 1 <= pairs.count() <= 12
    for pair in pairs:
        assert pair.pair_skills.count() in (2, 3)
        assert pair.evidence and all(-1 <= e["cosine"] <= 1 for e in pair.evidence)
        assert pair.judgement.prompt_version == llm.prompt("judge").version and pair.judgement.llm_call.stage == "judge"
    accepted = pairs.filter(verdict=PairVerdict.ACCEPTED)
    assert accepted.exists() and pairs.filter(verdict=PairVerdict.REJECTED).exists()
    scenarios = Scenario.objects.filter(run=run)
    assert set(scenarios.values_list("pair_id", flat=True)) == set(accepted.values_list("id", flat=True))
    for scenario in scenarios:
        assert scenario.status == WorkStatus.DONE
        assert all(text for _, text in scenario.dimensions) and scenario.integrated
        assert set(scenario.modules) == {"skill_analysis", "scenario_exploration", "association_filtering",
                                         "evolution_recovery", "information_expansion"}
        assert scenario.solution_reference["workflow"] and scenario.instruction_reference["outputs"]
        assert scenario.consistency == "consistent"
        assert set(scenario.prompt_versions) >= {"skill_analysis", "references", "consistency"}
    # every call is stored with what it served, its prompt version and its tokens
    calls = LLMCall.objects.filter(run=run)
    assert calls.count() == len(corpus) + pairs.count() + 8 * scenarios.count()
    # identical requests (the scripted model repeats itself) are answered from the cache, never paid twice
    assert set(calls.values_list("status", flat=True)) <= {"ok", "cached"}
    assert all(c.tokens_in and c.tokens_out for c in calls.filter(status="ok"))
    assert calls.filter(stage="hypotheses", subject=f"skill:{corpus[0].key}").count() == 1
    progress = services.run_progress(run)
    assert progress["calls"] == calls.count() and progress["tokens_in"] > 0
    assert len(cassette.read_text().splitlines()) == calls.count()


def test_a_cassette_replays_the_run_without_the_server(corpus, tmp_path):
    with scripted_llm.ScriptedLLMServer() as url:
        first, cassette = run_over_http(url, tmp_path)
    replayed = services.start_run(name="replay", enqueue=False, trusted=True, config={
        "limits": {"max_pairs": 12}, "llm": {"provider": "replay", "cassette": str(cassette), "model": "scripted"}})
    replayed = services.execute_run_inline(replayed.pk)
    assert replayed.status == RunStatus.SUCCEEDED
    assert (sorted(CandidatePair.objects.filter(run=replayed).values_list("skill_set", "verdict"))
            == sorted(CandidatePair.objects.filter(run=first).values_list("skill_set", "verdict")))
    assert Scenario.objects.filter(run=replayed, consistency="consistent").count() == Scenario.objects.filter(run=first).count()
    assert set(LLMCall.objects.filter(run=replayed).values_list("status", flat=True)) == {"replayed"}


def test_invalid_model_output_fails_the_item_and_keeps_the_raw_response(corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(scripted_llm.RESPONDERS, "JudgeOut", lambda user: {"verdict": "maybe"})
    with scripted_llm.ScriptedLLMServer() as url:
        run, _ = run_over_http(url, tmp_path)
    assert run.status == RunStatus.SUCCEEDED
    pairs = CandidatePair.objects.filter(run=run)
    assert pairs.exists() and not pairs.exclude(status=WorkStatus.FAILED).exists()
    assert "InvalidOutput" in pairs.first().error
    bad = LLMCall.objects.filter(run=run, stage="judge", status="invalid_output")
    assert bad.count() == 2 * pairs.count()  # asked once more with the validation error, then recorded
    assert '"maybe"' in bad.first().response_text
    assert not Judgement.objects.filter(pair__run=run).exists() and not Scenario.objects.filter(run=run).exists()
    assert "failed item" in run.message


def test_an_endpoint_that_is_down_leaves_a_clear_recorded_state(corpus, tmp_path, settings):
    run = services.start_run(name="down", enqueue=False, trusted=True, config={
        "limits": {"max_pairs": 5}, "llm": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}})
    from facet_site.lib.llm import TransientLLMError
    item = RunSkill.objects.filter(run=run).first()
    services.advance_run(run.pk)  # queue the items; their jobs wait for a commit that never comes here
    settings.FACET_LLM = dataclasses.replace(settings.FACET_LLM, max_retries=0)
    with pytest.raises(TransientLLMError):
        services.extract_hypotheses(item.pk)
    item.refresh_from_db()
    assert item.status == WorkStatus.QUEUED and "127.0.0.1:9" in item.error  # back in the queue for a retry
    assert not ScenarioHypothesis.objects.filter(run=run).exists()
    assert LLMCall.objects.filter(run=run, status="error").exists()


def test_a_redelivered_job_makes_no_duplicate_records(corpus, tmp_path):
    with scripted_llm.ScriptedLLMServer() as url:
        run = services.start_run(name="redeliver", enqueue=False, trusted=True, config={
            "llm": {"provider": "openai", "base_url": url, "model": "scripted"}})
        services.advance_run(run.pk)
        item = RunSkill.objects.filter(run=run).first()
        assert services.extract_hypotheses(item.pk) == WorkStatus.DONE
        assert services.extract_hypotheses(item.pk) == ""  # already done: the duplicate message is a no-op
        # a worker died while running it: the item is reset and runs again, replacing its records
        RunSkill.objects.filter(pk=item.pk).update(status=WorkStatus.QUEUED)
        assert services.extract_hypotheses(item.pk) == WorkStatus.DONE
    assert ScenarioHypothesis.objects.filter(run=run, skill_id=item.skill_id).count() == 3


def test_a_cancelled_run_takes_no_more_items(corpus):
    run = services.start_run(name="cancel", enqueue=False, trusted=True, config={"llm": {"provider": "replay", "cassette": "/nonexistent"}})
    services.advance_run(run.pk)
    services.cancel_run(run=run)
    item = RunSkill.objects.filter(run=run).first()
    assert services.extract_hypotheses(item.pk) == ""
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert not RunSkill.objects.filter(run=run, status__in=[WorkStatus.PENDING, WorkStatus.QUEUED]).exists()


def test_a_token_budget_stops_the_run(corpus, tmp_path):
    with scripted_llm.ScriptedLLMServer() as url:
        run, _ = run_over_http(url, tmp_path, max_tokens=2000)
    assert run.status == RunStatus.SUCCEEDED and "token budget" in run.message
    assert RunSkill.objects.filter(run=run, status=WorkStatus.SKIPPED).exists()


@pytest.mark.parametrize("config, message", [
    ({"limits": {"max_pairs": 0}}, "limits.max_pairs: must be a positive integer"),
    ({"limits": {"max_group_size": 4}}, "limits.max_group_size: must be 2 or 3"),
    ({"skills": {"categories": ["nope"]}}, "skills.categories: no category with slug nope"),
    ({"strategy": "sideways"}, "strategy: expected one of"),
    ({"limits": {"colour": 1}}, "limits.colour: unknown setting"),
])
def test_bad_run_configuration_is_refused_naming_the_field(corpus, config, message):
    with pytest.raises(RunConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        services.start_run(name="bad", config=config, enqueue=False)


def test_reference_pair_jsonl_imports_at_the_judge_stage_and_exports(corpus):
    run = services.start_run(name="import", enqueue=False, trusted=True, config={})
    lines = [
        json.dumps({"pair_id": "p1", "skill_ids": [corpus[0].key, corpus[1].key], "skill_summaries": ["a", "b"],
                    "scenario_texts": ["Use both"], "quality": {"overall_status": "ACCEPTED"}}),
        "{not json",
        json.dumps({"pair_id": "p2", "skill_ids": ["elsewhere-1", "elsewhere-2"], "skill_summaries": ["x does X", "y does Y"],
                    "scenario_texts": ["External"], "quality": {"overall_status": "ACCEPTED"}}),
        json.dumps({"pair_id": "p3", "skill_ids": ["only-one"], "scenario_texts": []}),
        json.dumps({"pair_id": "p4", "skill_ids": ["a", "b"], "quality": {"overall_status": "REJECTED"}}),
    ]
    result = pairs_jsonl.import_pairs_jsonl(run=run, stream=lines)
    assert result.created == 2 and result.skipped == 1
    assert [n for n, _ in result.errors] == [2, 4]
    assert "line 2: not valid JSON" in result.errors[0][1] and "two or three" in result.errors[1][1]
    imported = CandidatePair.objects.get(run=run, external_id="p2")
    assert [s.description for s in imported.ordered_skills()] == ["x does X", "y does Y"]
    CandidatePair.objects.filter(run=run).update(verdict=PairVerdict.ACCEPTED)
    exported = [json.loads(x) for x in pairs_jsonl.export_pairs_jsonl(run=run)]
    assert {e["pair_id"] for e in exported} == {"p1", "p2"}
    first = next(e for e in exported if e["pair_id"] == "p1")
    assert first["skill_ids"] == sorted([corpus[0].key, corpus[1].key]) or set(first["skill_ids"]) == {corpus[0].key, corpus[1].key}
    assert first["quality"]["overall_status"] == "ACCEPTED" and first["scenario_texts"] == ["Use both"]


def test_a_stage_profile_overrides_the_model_for_that_stage(corpus, tmp_path):
    with scripted_llm.ScriptedLLMServer() as url:
        run = services.start_run(name="profiles", enqueue=False, trusted=True, config={
            "limits": {"max_pairs": 3},
            "llm": {"provider": "openai", "base_url": url, "model": "small-model",
                    "profiles": {"judge": {"model": "strong-model"}}}})
        run = services.execute_run_inline(run.pk)
    assert set(LLMCall.objects.filter(run=run, stage="judge").values_list("model", flat=True)) == {"strong-model"}
    assert set(LLMCall.objects.filter(run=run, stage="hypotheses").values_list("model", flat=True)) == {"small-model"}


def test_a_run_finished_on_the_workers_hands_its_id_to_the_job_the_settings_name(
        corpus, monkeypatch, settings, django_capture_on_commit_callbacks):
    from facet_site.celery import app
    from scenarios import jobs

    sent = []
    monkeypatch.setattr(app, "send_task", lambda name, args=None, kwargs=None, **options: sent.append((name, list(args))))
    settings.FACET_CONSTRUCTION_JOB = "elsewhere.jobs.build"
    run = services.start_run(name="auto", enqueue=False, trusted=True, config={"construction": {"auto": True}})
    run.status = RunStatus.SUCCEEDED
    run.save(update_fields=["status"])
    with django_capture_on_commit_callbacks(execute=True):
        jobs.advance_run(run.pk)
        assert sent == []  # not before the commit
    assert sent == [("elsewhere.jobs.build", [run.pk])]
    opted_out = services.start_run(name="manual", enqueue=False, trusted=True, config={"construction": {"auto": False}})
    opted_out.status = RunStatus.SUCCEEDED
    opted_out.save(update_fields=["status"])
    with django_capture_on_commit_callbacks(execute=True):
        jobs.advance_run(opted_out.pk)
    assert sent == [("elsewhere.jobs.build", [run.pk])]


def test_the_construction_job_the_settings_name_is_registered():
    from django.conf import settings as django_settings

    from facet_site.celery import app

    app.loader.import_default_modules()
    assert django_settings.FACET_CONSTRUCTION_JOB in app.tasks


def test_advancing_a_run_queues_one_job_per_item_after_the_commit(corpus, monkeypatch, django_capture_on_commit_callbacks):
    from scenarios import jobs

    queued = []
    monkeypatch.setattr(jobs.llm_hypotheses, "apply_async", lambda args=None, kwargs=None, **kw: queued.append(args[0]))
    run = services.start_run(name="queue", enqueue=False, trusted=True, config={"llm": {"provider": "replay", "cassette": "/nonexistent"}})
    with django_capture_on_commit_callbacks(execute=True):
        services.advance_run(run.pk)
        assert queued == []
    items = sorted(RunSkill.objects.filter(run=run).values_list("id", flat=True))
    assert sorted(queued) == items and not RunSkill.objects.filter(run=run).exclude(status=WorkStatus.QUEUED).exists()