"""The scenario prompts as a model receives them: what each reconstruction module is shown (read
back from the requests a run over real HTTP stored), the output contracts (a description on every
field), and the intended difficulty flowing from the dimensions answer to the scenario page and API."""
import json
from pathlib import Path

import pytest
from django.urls import reverse

from demo import scripted_llm
from scenarios import llm, outputs, services
from scenarios.models import LLMCall, RunStatus, Scenario
from skills import services as skill_services
from skills.models import Skill
from tests.conftest import DEMO_CORPUS

pytestmark = pytest.mark.django_db

CASSETTE = Path(__file__).resolve().parents[2] / "scenarios" / "fixtures" / "demo.cassette.jsonl"
SCENARIO_STAGES = ["hypotheses", "judge"] + [f"reconstruct.{name}" for name, _ in outputs.RECONSTRUCTION_STEPS]


@pytest.fixture
def reconstructed(db, tmp_path):
    """A run over the demo corpus against the scripted server, kept small: two candidate pairs."""
    skill_services.ingest_path(DEMO_CORPUS, label="demo")
    assert Skill.objects.current().accepted().count() >= 2
    with scripted_llm.ScriptedLLMServer() as url:
        run = services.start_run(name="prompts", enqueue=False, trusted=True, config={
            "limits": {"max_pairs": 2},
            "llm": {"provider": "openai", "base_url": url, "model": "scripted"},
        })
        run = services.execute_run_inline(run.pk)
    assert run.status == RunStatus.SUCCEEDED, run.message
    scenario = Scenario.objects.filter(run=run).exclude(integrated="").select_related("pair").first()
    assert scenario is not None, "the run reconstructed no scenario"
    return scenario


def user_text(call: LLMCall) -> str:
    return "\n".join(m["content"] for m in call.messages if m.get("role") == "user")


def calls_of(scenario: Scenario) -> dict[str, LLMCall]:
    subject = services.pair_subject(scenario.pair)
    calls = LLMCall.objects.filter(run=scenario.run, subject=subject, stage__startswith="reconstruct.").order_by("id")
    return {c.stage: c for c in calls}


def test_every_call_records_the_prompt_version_the_code_loads(reconstructed, client_as):
    calls = LLMCall.objects.filter(run=reconstructed.run)
    seen = set(calls.values_list("stage", flat=True))
    assert {"hypotheses", "judge"} | {f"reconstruct.{n}" for n, _ in outputs.RECONSTRUCTION_STEPS} <= seen
    for call in calls:
        assert call.prompt_version == llm.prompt(call.stage).version, call.stage
    # and the scenario page lists them per stage, linked for admins to the prompt at that version
    version = llm.prompt("reconstruct.information_expansion").version
    assert reconstructed.prompt_versions["information_expansion"] == version
    link = f'href="{reverse("prompt", args=["reconstruct.information_expansion"])}?version={version}"'
    assert link in client_as("admin").get(reverse("scenarios:scenario", args=[reconstructed.pk])).content.decode()
    assert link not in client_as("viewer").get(reverse("scenarios:scenario", args=[reconstructed.pk])).content.decode()


def test_information_expansion_sees_the_skills_and_the_setting_not_only_the_workflow(reconstructed):
    calls = calls_of(reconstructed)
    text = user_text(calls["reconstruct.information_expansion"])
    skills = reconstructed.pair.ordered_skills()
    for skill in skills:
        assert skill.name in text and json.dumps(skill.description, ensure_ascii=False)[1:-1][:60] in text
    chosen_title = reconstructed.modules["association_filtering"]["chosen_setting"]
    assert chosen_title in text
    first_action = reconstructed.modules["evolution_recovery"]["workflow"][0]["action"]
    assert first_action in text
    # what the environment will need: the container rules, and no answers among the inputs
    assert "NO network" in text or "NO network" in calls["reconstruct.information_expansion"].messages[0]["content"]
    assert "must not contain the answers" in text


def test_later_modules_see_what_the_earlier_ones_found(reconstructed):
    calls = calls_of(reconstructed)
    expansion = calls["reconstruct.information_expansion"].parsed
    references = user_text(calls["reconstruct.references"])
    for resource in expansion["resources"]:
        assert resource["path"] in references  # R_S and R_I are written against the concrete resources
    consistency = user_text(calls["reconstruct.consistency"])
    assert reconstructed.title in consistency  # the check sees the scenario, not only R_S and R_I
    dimensions = user_text(calls["reconstruct.dimensions"])
    for skill in reconstructed.pair.ordered_skills():
        assert skill.name in dimensions
    assert '"easy"' in dimensions and '"hard"' in dimensions  # the difficulty scale it must choose from


def test_the_difficulty_the_dimensions_stage_gives_is_kept_and_shown(reconstructed, client_as, token_for):
    dims = calls_of(reconstructed)["reconstruct.dimensions"].parsed
    assert dims["difficulty"] in ("easy", "medium", "hard")
    assert reconstructed.difficulty == dims["difficulty"]
    assert reconstructed.difficulty_rationale == dims["difficulty_rationale"] != ""
    page = client_as("viewer").get(reverse("scenarios:scenario", args=[reconstructed.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert f'>{reconstructed.get_difficulty_display()}</span>' in html
    assert f"Why {reconstructed.difficulty}: {reconstructed.difficulty_rationale}" in html
    api = client_as("viewer").get(f"/api/scenarios/{reconstructed.pk}",
                                  HTTP_AUTHORIZATION=f"Bearer {token_for('viewer')}")
    assert api.status_code == 200 and api.json()["difficulty"] == reconstructed.difficulty
    assert api.json()["difficulty_rationale"] == reconstructed.difficulty_rationale


def test_a_scenario_without_a_difficulty_says_so(repo, client_as):
    page = client_as("viewer").get(reverse("scenarios:scenario", args=[repo.scenario.pk])).content.decode()
    assert repo.scenario.difficulty == ""
    assert "difficulty: <span class=\"muted\">not given</span>" in " ".join(page.split())


def _fields_without_description(schema: dict) -> list[str]:
    missing = []
    definitions = {"#": schema, **{f"#/$defs/{k}": v for k, v in schema.get("$defs", {}).items()}}
    for where, node in definitions.items():
        for name, prop in (node.get("properties") or {}).items():
            if not (prop.get("description") or "").strip():
                missing.append(f"{node.get('title', where)}.{name}")
    return missing


@pytest.mark.parametrize("schema", [outputs.HypothesesOut, outputs.JudgeOut] + [s for _, s in outputs.RECONSTRUCTION_STEPS],
                         ids=lambda s: s.__name__)
def test_every_output_field_tells_the_model_what_it_means(schema):
    assert _fields_without_description(schema.model_json_schema()) == []


def test_answers_recorded_before_the_new_fields_still_parse():
    recorded = [json.loads(line) for line in CASSETTE.read_text().splitlines() if line.strip()]
    by_stage = {}
    for entry in recorded:
        by_stage.setdefault(entry["stage"], []).append(entry)
    schemas = {"hypotheses": outputs.HypothesesOut, "judge": outputs.JudgeOut,
               **{f"reconstruct.{n}": s for n, s in outputs.RECONSTRUCTION_STEPS}}
    for stage, schema in schemas.items():
        assert by_stage.get(stage), f"the demo cassette has no {stage} answer"
        for entry in by_stage[stage]:
            answer = json.loads(entry["response_text"])
            # the answer as it was before the v2 fields existed
            for key in ("difficulty", "difficulty_rationale", "cross_file_relations"):
                answer.pop(key, None)
            parsed = schema.model_validate(answer)
            if schema is outputs.DimensionsOut:
                assert parsed.difficulty is None  # stored as blank: "not given"


def test_an_outsized_skill_is_quoted_within_its_caps():
    from scenarios import prompt_inputs

    huge = Skill(name="huge", description="d" * 9000, required_tools=[f"tool{i}" for i in range(40)],
                 inputs=["i" * 1000], outputs=[], steps=[f"step {i} " + "s" * 900 for i in range(30)])
    quoted = json.loads(prompt_inputs.skill_json(huge))
    assert len(quoted["description"]) == prompt_inputs.SKILL_DESCRIPTION_CHARS
    assert len(quoted["required_tools"]) == 20 and len(quoted["steps"]) == 15
    assert all(len(s) == prompt_inputs.SKILL_ITEM_CHARS for s in quoted["steps"] + quoted["inputs"])
    ordinary = Skill(name="small", description="Remove duplicate rows", required_tools=["python3"],
                     inputs=["orders.csv"], outputs=["clean.csv"], steps=["read", "dedupe", "write"])
    assert json.loads(prompt_inputs.skill_json(ordinary))["description"] == "Remove duplicate rows"  # whole when short


def test_the_models_reason_for_a_difficulty_is_shown_as_text(repo, client_as):
    from tests.html_safety import active_content

    from .conftest import XSS

    Scenario.objects.filter(pk=repo.scenario.pk).update(difficulty="hard", difficulty_rationale=f"many joins {XSS}")
    html = client_as("viewer").get(reverse("scenarios:scenario", args=[repo.scenario.pk])).content.decode()
    assert ">Hard</span>" in html and "Why hard: many joins &lt;script&gt;" in html
    assert active_content(html) == []
