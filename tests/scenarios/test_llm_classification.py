"""The optional LLM classification stage of a synthesis run: over real HTTP against the scripted
model on PostgreSQL, replayed from its cassette, with answers outside the taxonomy, reviewer
overrides, and the category reaching task labels and the analytics grouped by them."""
import pytest
from django.urls import reverse

from demo import scripted_llm
from scenarios import classifying, services
from scenarios.models import (
    ClassificationOutcome,
    LLMCall,
    RunStatus,
    SkillClassification,
    Stage,
    WorkStatus,
)
from scenarios.run_config import RunConfigError
from skills import llm_categories
from skills import services as skill_services
from skills.models import Category, CategorySource, Skill
from tests.conftest import DEMO_CORPUS
from tests.workers import wait_for_run

pytestmark = pytest.mark.django_db

STAGE = classifying.LLM_STAGE
MAX_SKILLS = 6


@pytest.fixture
def corpus(db):
    skill_services.ingest_path(DEMO_CORPUS, label="demo")
    return list(Skill.objects.current().accepted().exclude(embedding=None).order_by("id")[:MAX_SKILLS])


def start(llm: dict, *, classify=True, **limits):
    return services.start_run(name="classify", enqueue=False, trusted=True, config={
        "skills": {"max_skills": MAX_SKILLS, "llm_classification": classify},
        "limits": {"max_pairs": 3, "hypotheses_per_skill": 1, **limits},
        "construction": {"auto": False}, "llm": llm,
    })


def over_http(url, cassette, **kw):
    return start({"provider": "openai", "base_url": url, "model": "scripted", "record": str(cassette)}, **kw)


def categories_of(skills) -> dict:
    return {s.key: tuple(Skill.objects.filter(pk=s.pk).values_list("category__slug", "category_source",
                                                                     "category_confidence").get()) for s in skills}


def test_the_stage_asks_once_per_skill_before_the_hypotheses_and_stores_the_llm_category(corpus, tmp_path, client_as):
    classifier_guess = {s.key: (s.category.slug, s.category_confidence, s.category_runner_up.slug) for s in corpus}
    with scripted_llm.ScriptedLLMServer() as url:
        run = over_http(url, tmp_path / "run.cassette.jsonl")
        assert run.stage == Stage.CLASSIFICATION
        run = services.execute_run_inline(run.pk)
    assert run.status == RunStatus.SUCCEEDED, run.message

    calls = LLMCall.objects.filter(run=run, stage=STAGE)
    assert sorted(calls.values_list("subject", flat=True)) == sorted(f"skill:{s.key}" for s in corpus)
    assert set(calls.values_list("status", flat=True)) <= {"ok", "cached"}
    # every classification call was made before the first hypotheses call
    assert calls.order_by("-id").first().id < LLMCall.objects.filter(run=run, stage="hypotheses").order_by("id").first().id
    for skill in corpus:
        skill.refresh_from_db()
        item = SkillClassification.objects.get(run=run, skill=skill)
        assert item.status == WorkStatus.DONE and item.outcome == ClassificationOutcome.LLM
        assert item.llm_call.stage == STAGE and item.prompt_version == "v1"
        assert skill.category_source == CategorySource.LLM
        assert (skill.category_id, skill.category_confidence) == (item.category_id, item.confidence)
        assert item.llm_call.parsed["category"] == skill.category.slug
        assert item.llm_call.parsed["confidence"] == skill.category_confidence
        guess, guess_confidence, guess_runner_up = classifier_guess[skill.key]
        # the model picks one of the classifier's two guesses; the other one is kept as the runner-up
        assert skill.category.slug in (guess, guess_runner_up)
        assert skill.category_runner_up.slug == (guess_runner_up if skill.category.slug == guess else guess)
        # the hypotheses were written from the category the model chose
        hypotheses_call = LLMCall.objects.get(run=run, stage="hypotheses", subject=f"skill:{skill.key}")
        assert f'"category": "{skill.category.name}"' in hypotheses_call.messages[-1]["content"]

    progress = services.run_progress(run)
    assert progress["stages"][0] == {"stage": "classification", "label": "0. Skill categories (LLM)",
                                     "total": len(corpus), "done": len(corpus), "failed": 0, "skipped": 0, "open": 0}
    assert progress["calls_by_stage"][STAGE]["calls"] == len(corpus)
    assert progress["calls"] == LLMCall.objects.filter(run=run).count()

    viewer = client_as("viewer")
    run_page = viewer.get(reverse("scenarios:run", args=[run.pk])).content.decode()
    assert "0. Skill categories (LLM)" in run_page and STAGE in run_page
    skill = corpus[0]
    page = viewer.get(reverse("skills:detail", args=[skill.pk])).content.decode()
    assert "LLM (the classification stage of a synthesis run), confidence" in page
    assert f"{skill.category_confidence:.2f}" in page

    # the low-confidence queue lists the LLM's unsure answers, saying where they came from
    taxonomy = viewer.get(reverse("skills:taxonomy")).content.decode()
    queue = taxonomy[taxonomy.index('id="low-confidence"'):]
    unsure = [s for s in corpus if s.category_confidence < 0.5]
    sure = [s for s in corpus if s.category_confidence >= 0.5]
    assert unsure and sure, "the scripted model gives both sure and unsure answers for the demo skills"
    for s in unsure:
        assert f'{reverse("skills:detail", args=[s.pk])}"' in queue
    for s in sure:
        assert f'{reverse("skills:detail", args=[s.pk])}"' not in queue
    assert '<td class="category-source">LLM</td>' in queue
    listing = viewer.get(reverse("skills:list")).content.decode()
    assert listing.count('title="chosen by the LLM classification stage">LLM</span>') == len(corpus)


def test_a_replay_from_the_recorded_cassette_makes_no_http_call(corpus, tmp_path):
    cassette = tmp_path / "run.cassette.jsonl"
    with scripted_llm.ScriptedLLMServer() as url:
        first = services.execute_run_inline(over_http(url, cassette).pk)
    recorded = categories_of(corpus)
    assert all(source == CategorySource.LLM for _, source, _ in recorded.values())
    # back to the classifier's answers, so the replay has something to change
    for s in corpus:
        llm_categories.store_category(skill_id=s.pk, answer=llm_categories.classifier_answer(Skill.objects.get(pk=s.pk)),
                                      source=CategorySource.CLASSIFIER)
    assert categories_of(corpus) != recorded

    server = scripted_llm.ScriptedLLMServer()
    with server:  # listening, so a request the replay made would be counted
        replay = services.execute_run_inline(start({"provider": "replay", "cassette": str(cassette), "model": "scripted"}).pk)
    assert server.requests == 0
    assert first.status == replay.status == RunStatus.SUCCEEDED
    calls = LLMCall.objects.filter(run=replay, stage=STAGE)
    assert calls.count() == len(corpus) and set(calls.values_list("status", flat=True)) == {"replayed"}
    assert categories_of(corpus) == recorded

    # `facet reclassify` keeps the LLM's answers, as it keeps reviewer overrides
    import io

    from django.core.management import call_command

    out = io.StringIO()
    call_command("reclassify", stdout=out)
    assert f"{len(corpus):6d}  kept: LLM answer" in out.getvalue()
    assert categories_of(corpus) == recorded


def test_an_answer_outside_the_taxonomy_keeps_the_classifiers_category_and_is_recorded(corpus, tmp_path, monkeypatch):
    odd, malformed = corpus[1], corpus[3]
    scripted = scripted_llm.RESPONDERS["LLMCategory"]

    def answer(user):  # the model invents a category for one skill and answers another out of range
        if f"Name: {odd.name}\n" in user:
            return {"category": "finance", "confidence": 0.9}
        if f"Name: {malformed.name}\n" in user:
            return {**scripted(user), "confidence": 7}
        return scripted(user)

    monkeypatch.setitem(scripted_llm.RESPONDERS, "LLMCategory", answer)
    guess = (odd.category_id, odd.category_confidence)
    malformed_guess = (malformed.category_id, malformed.category_confidence)
    with scripted_llm.ScriptedLLMServer() as url:
        run = services.execute_run_inline(over_http(url, tmp_path / "run.cassette.jsonl").pk)
    assert run.status == RunStatus.SUCCEEDED

    odd.refresh_from_db()
    assert (odd.category_id, odd.category_confidence, odd.category_source) == (*guess, CategorySource.CLASSIFIER)
    item = SkillClassification.objects.get(run=run, skill=odd)
    assert item.status == WorkStatus.DONE and item.outcome == ClassificationOutcome.FALLBACK
    assert "'finance' is not a taxonomy slug" in item.note and item.category_id == guess[0]
    call = LLMCall.objects.get(run=run, stage=STAGE, subject=f"skill:{odd.key}")
    assert item.llm_call == call and call.status == "invalid_output" and "finance" in call.error
    assert '"finance"' in call.response_text
    # asked once more with the validation error, then the classifier's answer was kept
    malformed.refresh_from_db()
    assert (malformed.category_id, malformed.category_confidence, malformed.category_source) == (
        *malformed_guess, CategorySource.CLASSIFIER)
    assert SkillClassification.objects.get(run=run, skill=malformed).outcome == ClassificationOutcome.FALLBACK
    assert list(LLMCall.objects.filter(run=run, stage=STAGE, subject=f"skill:{malformed.key}")
                .values_list("status", flat=True)) == ["invalid_output", "invalid_output"]
    # the other skills took the model's answers
    others = Skill.objects.filter(pk__in=[s.pk for s in corpus if s.pk not in (odd.pk, malformed.pk)])
    assert set(others.values_list("category_source", flat=True)) == {CategorySource.LLM}
    assert services.run_progress(run)["stages"][0]["failed"] == 0


def test_a_reviewers_override_is_never_replaced(corpus, tmp_path, users, monkeypatch):
    overridden, racing = corpus[0], corpus[2]
    target = Category.objects.exclude(parent=None).exclude(pk=overridden.category_id).first()
    skill_services.override_category(skill=overridden, category=target, user=users["reviewer"])
    with scripted_llm.ScriptedLLMServer() as url:
        run = over_http(url, tmp_path / "run.cassette.jsonl")
        services.advance_run(run.pk)  # hands the items out; their jobs wait for a commit that never comes here
        for item in SkillClassification.objects.filter(run=run).exclude(skill=racing).order_by("id"):
            assert classifying.classify_skill(item.pk) == WorkStatus.DONE
        # an override saved while the model answers for another skill: the answer is not stored over it
        racing_item = SkillClassification.objects.get(run=run, skill=racing)
        real_store = llm_categories.store_category

        def override_first(**kw):
            skill_services.override_category(skill=Skill.objects.get(pk=racing.pk), category=target, user=users["admin"])
            return real_store(**kw)

        monkeypatch.setattr(llm_categories, "store_category", override_first)
        assert classifying.classify_skill(racing_item.pk) == WorkStatus.DONE

    overridden.refresh_from_db()
    assert (overridden.category_id, overridden.category_source) == (target.pk, CategorySource.OVERRIDE)
    item = SkillClassification.objects.get(run=run, skill=overridden)
    assert item.outcome == ClassificationOutcome.OVERRIDE and item.llm_call is None
    assert not LLMCall.objects.filter(run=run, subject=f"skill:{overridden.key}").exists()  # no call paid for it
    racing.refresh_from_db()
    assert (racing.category_id, racing.category_source) == (target.pk, CategorySource.OVERRIDE)
    racing_item.refresh_from_db()
    assert racing_item.outcome == ClassificationOutcome.OVERRIDE and racing_item.llm_call.stage == STAGE
    assert "override arrived first" in racing_item.note


def test_a_redelivered_job_asks_the_model_once(corpus, tmp_path):
    with scripted_llm.ScriptedLLMServer() as url:
        run = over_http(url, tmp_path / "run.cassette.jsonl")
        services.advance_run(run.pk)
        item = SkillClassification.objects.filter(run=run).first()
        assert classifying.classify_skill(item.pk) == WorkStatus.DONE
        assert classifying.classify_skill(item.pk) == ""  # already done: the duplicate message is a no-op
    assert LLMCall.objects.filter(run=run, stage=STAGE).count() == 1
    # nothing else moves until the stage is over: the hypotheses wait
    assert Skill.objects.get(pk=item.skill_id).category_source == CategorySource.LLM
    run.refresh_from_db()
    assert run.stage == Stage.CLASSIFICATION


def test_the_stage_is_off_by_default_and_needs_an_endpoint(corpus, settings):
    import dataclasses

    run = start({"provider": "replay", "cassette": "/nonexistent"}, classify=False)
    assert run.stage == Stage.HYPOTHESES and not SkillClassification.objects.filter(run=run).exists()
    assert services.start_run(name="plain", enqueue=False, trusted=True, config={
        "llm": {"provider": "replay", "cassette": "/nonexistent"}}).config["skills"]["llm_classification"] is False
    settings.FACET_LLM = dataclasses.replace(settings.FACET_LLM, base_url="", provider="openai", cassette_path=None)
    with pytest.raises(RunConfigError, match="skills.llm_classification: no LLM endpoint is configured"):
        services.start_run(name="nowhere", enqueue=False, config={"skills": {"llm_classification": True}})
    with pytest.raises(RunConfigError, match="skills.llm_classification: expected true or false"):
        start({"provider": "replay", "cassette": "/x"}, classify="yes")


def test_the_estimate_counts_one_call_per_skill_for_the_stage(corpus):
    from scenarios.estimate import estimate_config

    llm = {"provider": "replay", "cassette": "/nonexistent"}
    without = estimate_config({"skills": {"max_skills": MAX_SKILLS}, "llm": llm}, trusted=True)
    with_stage = estimate_config({"skills": {"max_skills": MAX_SKILLS, "llm_classification": True}, "llm": llm},
                                 trusted=True)
    row = with_stage["stages"][0]
    assert row["stage"] == "Categories (LLM)" and row["calls"] == MAX_SKILLS
    assert with_stage["calls"] == without["calls"] + MAX_SKILLS
    assert with_stage["tokens"] == without["tokens"] + row["tokens"] > without["tokens"]
    assert "Categories (LLM)" not in [s["stage"] for s in without["stages"]]


def test_the_run_form_the_api_and_the_cli_switch_the_stage_on(corpus, client, client_as, token_for, tmp_path, settings):
    import dataclasses
    import io

    from django.core.management import call_command

    from scenarios.models import SynthesisRun

    reviewer = client_as("reviewer")
    assert 'name="llm_classification"' in reviewer.get(reverse("scenarios:runs")).content.decode()
    fields = {"name": "from the form", "strategy": "forward", "max_skills": MAX_SKILLS, "llm_classification": "on"}
    settings.FACET_LLM = dataclasses.replace(settings.FACET_LLM, provider="openai", base_url="", cassette_path=None)
    response = reviewer.post(reverse("scenarios:runs"), fields)
    assert response.status_code == 400 and not SynthesisRun.objects.exists()
    assert ('data-field="llm_classification">skills.llm_classification: no LLM endpoint is configured'
            in response.content.decode())
    settings.FACET_LLM = dataclasses.replace(settings.FACET_LLM, base_url="http://127.0.0.1:9/v1")
    assert reviewer.post(reverse("scenarios:runs"), fields).status_code == 302
    run = SynthesisRun.objects.get(name="from the form")
    assert run.config["skills"]["llm_classification"] is True and run.stage == Stage.CLASSIFICATION

    response = client.post("/api/runs", {"name": "api", "config": {"skills": {"llm_classification": True,
                                                                             "max_skills": MAX_SKILLS}}},
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token_for('reviewer')}")
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["config"]["skills"]["llm_classification"] is True
    assert data["progress"]["stages"][0]["stage"] == "classification"
    assert data["progress"]["stages"][0]["total"] == MAX_SKILLS

    out = io.StringIO()
    call_command("run", "start", "--name", "cli", "--provider", "replay", "--cassette", str(tmp_path / "c.jsonl"),
                 "--max-skills", str(MAX_SKILLS), "--llm-classification", stdout=out)
    cli_run = SynthesisRun.objects.get(pk=int(out.getvalue().strip()))
    assert cli_run.config["skills"]["llm_classification"] is True and cli_run.stage == Stage.CLASSIFICATION
    assert SkillClassification.objects.filter(run=cli_run).count() == MAX_SKILLS


def test_the_llm_category_and_a_later_override_reach_task_labels_and_the_analytics(
        corpus, users, client_as, settings, django_capture_on_commit_callbacks):
    import csv
    import io

    from django.core.cache import cache

    from facet_site.celery import app
    from scenarios.models import CandidatePair, PairSkill, PairVerdict, Scenario, SynthesisRun
    from skills.classification import Classification
    from tasks import summary
    from tasks.models import RolloutBatch, RolloutBatchStatus, Task, TaskVersion, Trajectory, TrajectoryStatus

    a, b = corpus[0], corpus[1]
    taken = {a.category_id, b.category_id}
    llm_pick, override = Category.objects.exclude(parent=None).exclude(pk__in=taken).order_by("id")[:2]
    run = SynthesisRun.objects.create(name="built", status=RunStatus.SUCCEEDED, stage=Stage.DONE)
    pair = CandidatePair.objects.create(run=run, skill_set=f"{a.pk},{b.pk}", verdict=PairVerdict.ACCEPTED,
                                        status=WorkStatus.DONE)
    PairSkill.objects.bulk_create([PairSkill(pair=pair, skill=a, position=0), PairSkill(pair=pair, skill=b, position=1)])
    task = Task.objects.create(name="built from a and b", run=run,
                               scenario=Scenario.objects.create(pair=pair, run=run, status=WorkStatus.DONE, title="s"))
    version = TaskVersion.objects.create(task=task, number=1, content_hash="sha256:t", files={"instruction.md": "t"})
    Task.objects.filter(pk=task.pk).update(current_version=version)
    summary.set_labels(task)  # as construction labels a new task
    batch = RolloutBatch.objects.create(name="r", source="builtin", model="m", agent="terminus-2", attempts=3,
                                        status=RolloutBatchStatus.DONE)
    for n, passed in enumerate((True, False, True)):
        Trajectory.objects.create(batch=batch, task=task, version=version, attempt=n, model="m", agent="terminus-2",
                                  status=TrajectoryStatus.DONE, passed=passed, reward=float(passed))

    settings.FACET_ANALYTICS_CACHE_S = 60  # cached, so the data stamp must notice the relabelling
    cache.clear()
    viewer = client_as("viewer")

    def category_rows():
        response = viewer.get(reverse("tasks:analytics-tags") + "?format=csv&table=categories")
        return {row["label"]: (int(row["rollouts"]), int(row["passed"]))
                for row in csv.DictReader(io.StringIO(response.content.decode()))}

    assert category_rows() == {a.category.slug: (3, 2), b.category.slug: (3, 2)}
    app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):  # the LLM stage's answer, as classifying stores it
            llm_categories.store_category(skill_id=a.pk, source=CategorySource.LLM, answer=Classification(
                category=llm_pick.slug, confidence=0.7, runner_up=a.category.slug, runner_up_confidence=0.4))
        assert category_rows() == {llm_pick.slug: (3, 2), b.category.slug: (3, 2)}
        with django_capture_on_commit_callbacks(execute=True):  # then a reviewer overrides it on the Taxonomy page
            response = client_as("reviewer").post(reverse("skills:override-category", args=[a.pk]),
                                                  {"category": override.pk, "next": "taxonomy"})
        assert response.status_code == 302
    finally:
        app.conf.task_always_eager = False
    assert Skill.objects.get(pk=a.pk).category_source == CategorySource.OVERRIDE
    assert category_rows() == {override.slug: (3, 2), b.category.slug: (3, 2)}
    cache.clear()


@pytest.mark.django_db(transaction=True)
def test_the_stage_runs_on_a_real_worker_from_the_recorded_cassette(celery_worker, tmp_path):
    skill_services.ingest_path(DEMO_CORPUS, label="demo")
    cassette = tmp_path / "run.cassette.jsonl"
    with scripted_llm.ScriptedLLMServer() as url:
        recorded = services.execute_run_inline(over_http(url, cassette).pk)
    assert recorded.status == RunStatus.SUCCEEDED
    skills = [item.skill for item in SkillClassification.objects.filter(run=recorded).select_related("skill")]
    recorded_categories = categories_of(skills)
    Skill.objects.filter(pk__in=[s.pk for s in skills]).update(category_source=CategorySource.CLASSIFIER,
                                                              category_confidence=0.01)

    run = services.start_run(name="on a worker", trusted=True, config={  # queued for the worker
        "skills": {"max_skills": MAX_SKILLS, "llm_classification": True},
        "limits": {"max_pairs": 3, "hypotheses_per_skill": 1}, "construction": {"auto": False},
        "llm": {"provider": "replay", "cassette": str(cassette), "model": "scripted"}})
    wait_for_run(run, celery_worker)
    assert run.status == RunStatus.SUCCEEDED, (run.status, run.stage, run.message, celery_worker.log_tail())
    items = SkillClassification.objects.filter(run=run)
    assert items.count() == len(skills) and set(items.values_list("status", flat=True)) == {WorkStatus.DONE}
    calls = LLMCall.objects.filter(run=run, stage=STAGE)
    assert calls.count() == len(skills) and set(calls.values_list("status", flat=True)) == {"replayed"}
    assert categories_of(skills) == recorded_categories
