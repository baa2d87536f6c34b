"""A small repository built directly through the ORM: one finished run with an accepted pair and its
scenario, a rejected pair, an unjudged pair, and the LLM calls behind them. Model text carries
script, event-handler and javascript: payloads, so every page that shows it is an XSS test too."""
from dataclasses import dataclass

import pytest

from scenarios import services
from scenarios.models import (
    CandidatePair,
    Consistency,
    Judgement,
    LLMCall,
    PairSkill,
    PairVerdict,
    RunSkill,
    RunStatus,
    Scenario,
    ScenarioHypothesis,
    Stage,
    SynthesisRun,
    WorkStatus,
)
from scenarios.run_config import DEFAULT_CONFIG
from skills import services as skill_services
from skills.models import Skill
from tests.conftest import write_skill
from tests.skills.samples import CSV_SKILL, SQLITE_SKILL, XSS_SKILL

XSS = "<script>alert('pwned')</script> <img src=x onerror=\"alert(1)\"> [click](javascript:alert(2))"


@dataclass
class Repo:
    run: SynthesisRun
    accepted: CandidatePair
    rejected: CandidatePair
    unjudged: CandidatePair
    scenario: Scenario
    skills: dict


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    write_skill(root, "csv", CSV_SKILL)
    write_skill(root, "sqlite", SQLITE_SKILL)
    write_skill(root, "xss", XSS_SKILL)
    skill_services.ingest_path(root, label="corpus")
    return {s.name: s for s in Skill.objects.all()}


def make_pair(run, skills, *, text, score=None, verdict="", status=WorkStatus.PENDING, evidence=None):
    ids = sorted(s.pk for s in skills)
    pair = CandidatePair.objects.create(run=run, skill_set=",".join(map(str, ids)), scenario_text=text, score=score,
                                        verdict=verdict, status=status, evidence=evidence or [])
    PairSkill.objects.bulk_create([PairSkill(pair=pair, skill=s, position=i) for i, s in enumerate(skills)])
    return pair


def judge(pair, scores, verdict, rationale=""):
    return Judgement.objects.create(
        pair=pair, relevance=scores[0], complementarity=scores[1], non_redundancy=scores[2], executability=scores[3],
        rationales={"relevance": f"relevant {rationale}", "complementarity": "they chain", "non_redundancy": "distinct",
                    "executability": "runs in a terminal"},
        verdict=verdict, summary="Judged.", prompt_version="judge@1")


@pytest.fixture
def repo(corpus, users):
    csv, sqlite, xss = corpus["csv-dedupe"], corpus["sqlite-report"], corpus["html-report-writer"]
    run = SynthesisRun.objects.create(
        name=f"nightly {XSS}", created_by=users["reviewer"], status=RunStatus.SUCCEEDED, stage=Stage.DONE,
        config=DEFAULT_CONFIG, message="All stages done.")
    for skill in (csv, sqlite, xss):
        RunSkill.objects.create(run=run, skill=skill, status=WorkStatus.DONE)
    hypothesis = ScenarioHypothesis.objects.create(
        run=run, skill=csv, position=0, application_context="a sales team's nightly export",
        user_goal=f"Deduplicate orders before the revenue report {XSS}", initial_state="orders.csv with duplicates",
        desired_final_state="a clean CSV", prompt_version="hypotheses@1")

    accepted = make_pair(run, [csv, sqlite], text=f"Clean the orders CSV, then load it into SQLite for a monthly revenue report {XSS}",
                         score=0.82, verdict=PairVerdict.ACCEPTED, status=WorkStatus.DONE,
                         evidence=[{"hypothesis": hypothesis.pk, "neighbour": sqlite.name, "cosine": 0.82, "note": XSS}])
    accepted.hypotheses.add(hypothesis)
    judge(accepted, [5, 4, 4, 5], PairVerdict.ACCEPTED, rationale=XSS)
    rejected = make_pair(run, [csv, xss], text="Write an HTML page about CSV files", score=0.51,
                         verdict=PairVerdict.REJECTED, status=WorkStatus.DONE)
    judge(rejected, [2, 1, 3, 2], PairVerdict.REJECTED)
    unjudged = make_pair(run, [sqlite, xss], text="Report revenue as an HTML page", score=0.47)

    scenario = Scenario.objects.create(
        pair=accepted, run=run, status=WorkStatus.DONE, title="Monthly revenue from messy orders",
        modules={"skill_analysis": {"skills": [{"name": "csv-dedupe", "role": XSS}]},
                 "evolution_recovery": {"workflow": [{"step": 1, "skill": "csv-dedupe", "action": "dedupe", "produces": "clean.csv"}]}},
        goal="Produce report.tsv with revenue per month", context=f"A small shop {XSS}", capability="csv and sqlite3",
        state="orders.csv has duplicate rows", io_tools="sqlite3, sort",
        integrated=f"# Revenue\n\nThe shop exports **orders**. {XSS}",
        solution_reference={"setup_actions": ["create data/orders.csv"], "workflow": ["dedupe the CSV", f"import into SQLite {XSS}"],
                            "state_transitions": ["orders.csv → clean.csv"]},
        instruction_reference={"goal": "Write report.tsv", "inputs": ["data/orders.csv"], "outputs": ["report.tsv"],
                               "constraints": ["keep the header"]},
        consistency=Consistency.CONSISTENT, consistency_notes="Initial state: orders.csv\nOutcome: report.tsv",
        prompt_versions={"skill_analysis": "reconstruct.skill_analysis@1", "dimensions": "reconstruct.dimensions@2"})

    call = dict(run=run, model="test-model", status="ok", tokens_in=1000, tokens_out=200, latency_ms=850, cost_usd=0.0012)
    LLMCall.objects.create(stage="hypotheses", subject=services.skill_subject(csv), prompt_version="hypotheses@1",
                           messages=[{"role": "user", "content": "hypotheses please"}], response_text="{}", **call)
    LLMCall.objects.create(stage="judge", subject=services.pair_subject(accepted), prompt_version="judge@1",
                           messages=[{"role": "system", "content": "You are a judge."}, {"role": "user", "content": f"Judge {XSS}"}],
                           response_text=f'{{"verdict": "accept", "summary": "{XSS}"}}', parsed={"verdict": "accept"}, **call)
    LLMCall.objects.create(stage="reconstruct.dimensions", subject=f"scenario:{scenario.pk}", prompt_version="reconstruct.dimensions@2",
                           messages=[{"role": "user", "content": "Write the five dimensions"}], response_text="dimensions reply", **call)
    # the same skills paired in another run: its calls are not this pair's
    other_run = SynthesisRun.objects.create(name="other", status=RunStatus.SUCCEEDED, stage=Stage.DONE)
    LLMCall.objects.create(stage="judge", subject=services.pair_subject(accepted), prompt_version="judge@1",
                           messages=[{"role": "user", "content": "other run's call"}], response_text="elsewhere",
                           **{**call, "run": other_run})
    return Repo(run=run, accepted=accepted, rejected=rejected, unjudged=unjudged, scenario=scenario,
                skills={"csv": csv, "sqlite": sqlite, "xss": xss})


def jsonl_lines(*objects) -> bytes:
    import json

    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects).encode()
