"""The runs and repository JSON API through HTTP, authenticated with per-user tokens."""
import io
import json

import pytest

from scenarios.models import CandidatePair, RunStatus, SynthesisRun

from .conftest import jsonl_lines

pytestmark = pytest.mark.django_db


def auth(secret):
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def test_it_refuses_requests_without_a_token(client, repo):
    for url in ("/api/runs", f"/api/runs/{repo.run.pk}", "/api/pairs", f"/api/pairs/{repo.accepted.pk}",
                "/api/scenarios", f"/api/scenarios/{repo.scenario.pk}", "/api/pairs/export"):
        assert client.get(url).status_code == 401, url
    assert client.post("/api/runs", {"name": "x"}, content_type="application/json").status_code == 401


def test_a_session_login_works_too(client_as, repo):
    assert client_as("viewer").get("/api/runs").status_code == 200


def test_it_lists_runs_with_usage(client, token_for, repo):
    data = client.get("/api/runs", **auth(token_for("viewer"))).json()
    assert data["count"] == 2
    run = next(r for r in data["items"] if r["id"] == repo.run.pk)
    assert run["status"] == "succeeded" and run["created_by"] == "reviewer-user"
    assert run["tokens_in"] == 3000 and run["tokens_out"] == 600 and run["cost_usd"] == pytest.approx(0.0036)


def test_it_shows_a_run_with_progress(client, token_for, repo):
    data = client.get(f"/api/runs/{repo.run.pk}", **auth(token_for("viewer"))).json()
    assert data["config"]["limits"]["max_pairs"] == 500 and data["pairs"] == 3 and data["scenarios"] == 1
    stages = {s["stage"]: s for s in data["progress"]["stages"]}
    assert stages["hypotheses"]["done"] == 3 and stages["judge"]["total"] == 3
    by_stage = {u["stage"]: u for u in data["progress"]["calls_by_stage"]}
    assert by_stage["judge"]["calls"] == 1 and data["progress"]["calls"] == 3
    assert client.get("/api/runs/999999", **auth(token_for("viewer"))).status_code == 404


def test_a_viewer_cannot_start_a_run(client, token_for, corpus):
    response = client.post("/api/runs", {"name": "x", "config": {}}, content_type="application/json", **auth(token_for("viewer")))
    assert response.status_code == 403 and not SynthesisRun.objects.exists()


def test_a_reviewer_starts_a_run(client, token_for, corpus, users, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post("/api/runs", {"name": "api run", "config": {"strategy": "joint", "limits": {"max_pairs": 7}}},
                               content_type="application/json", **auth(token_for("reviewer")))
    assert response.status_code == 201, response.content
    data = response.json()
    run = SynthesisRun.objects.get(pk=data["id"])
    assert run.created_by == users["reviewer"] and run.strategy == "joint"
    assert data["config"]["limits"]["max_pairs"] == 7 and data["config"]["limits"]["k"] == 10
    assert data["progress"]["stages"][0]["total"] == 3 and len(callbacks) == 1


def test_a_bad_config_is_422_naming_the_field(client, token_for, corpus):
    secret = token_for("reviewer")
    bad = client.post("/api/runs", {"name": "x", "config": {"limits": {"max_pairs": -1}}}, content_type="application/json", **auth(secret))
    assert bad.status_code == 422 and bad.json()["detail"] == "limits.max_pairs: must be a positive integer"
    unknown = client.post("/api/runs", {"name": "x", "config": {"limits": {"max_pears": 1}}}, content_type="application/json", **auth(secret))
    assert unknown.status_code == 422 and "limits.max_pears" in unknown.json()["detail"]
    assert not SynthesisRun.objects.exists()


def test_cancelling_through_the_api(client, token_for, repo):
    run = SynthesisRun.objects.create(name="live", status=RunStatus.RUNNING)
    assert client.post(f"/api/runs/{run.pk}/cancel", **auth(token_for("viewer"))).status_code == 403
    response = client.post(f"/api/runs/{run.pk}/cancel", **auth(token_for("reviewer")))
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    again = client.post(f"/api/runs/{run.pk}/cancel", **auth(token_for("reviewer")))
    assert again.status_code == 409 and "already finished" in again.json()["detail"]


def test_it_lists_and_filters_pairs(client, token_for, repo):
    secret = token_for("viewer")
    data = client.get("/api/pairs", **auth(secret)).json()
    assert data["count"] == 3
    assert [p["id"] for p in data["items"]] == [repo.accepted.pk, repo.rejected.pk, repo.unjudged.pk]  # by similarity
    accepted = data["items"][0]
    assert accepted["judgement"]["average"] == 4.5 and accepted["scenario"] == repo.scenario.pk
    assert {s["name"] for s in accepted["skills"]} == {"csv-dedupe", "sqlite-report"}
    assert data["items"][2]["judgement"] is None
    ids = lambda **q: [p["id"] for p in client.get("/api/pairs", q, **auth(secret)).json()["items"]]  # noqa: E731
    assert ids(verdict="rejected") == [repo.rejected.pk]
    assert ids(min_score=4) == [repo.accepted.pk]
    assert ids(run=repo.run.pk, q="html") == [repo.rejected.pk, repo.unjudged.pk]
    assert repo.accepted.pk in ids(category=repo.skills["sqlite"].category.parent.slug)
    assert ids(category="no-such") == []


def test_it_shows_a_pair_with_hypotheses_evidence_and_rationales(client, token_for, repo):
    data = client.get(f"/api/pairs/{repo.accepted.pk}", **auth(token_for("viewer"))).json()
    assert data["judgement"]["rationales"]["complementarity"] == "they chain"
    assert data["hypotheses"][0]["application_context"] == "a sales team's nightly export"
    assert data["evidence"][0]["cosine"] == 0.82
    assert client.get("/api/pairs/999999", **auth(token_for("viewer"))).status_code == 404


def test_it_lists_and_shows_scenarios(client, token_for, repo):
    secret = token_for("viewer")
    data = client.get("/api/scenarios", {"run": repo.run.pk, "consistency": "consistent"}, **auth(secret)).json()
    assert [s["id"] for s in data["items"]] == [repo.scenario.pk]
    assert client.get("/api/scenarios", {"consistency": "inconsistent"}, **auth(secret)).json()["count"] == 0
    detail = client.get(f"/api/scenarios/{repo.scenario.pk}", **auth(secret)).json()
    assert detail["instruction_reference"]["outputs"] == ["report.tsv"]
    assert "skill_analysis" in detail["modules"]
    assert {c["stage"] for c in detail["llm_calls"]} == {"judge", "reconstruct.dimensions"}
    assert all(c["subject"] != "other" for c in detail["llm_calls"]) and len(detail["llm_calls"]) == 2


GOOD_LINE = {"pair_id": "ref-9", "skill_ids": ["csv-dedupe", "sqlite-report"], "scenario_texts": ["x"],
             "quality": {"overall_status": "ACCEPTED"}}


def _upload(body: bytes):
    f = io.BytesIO(body)
    f.name = "pairs.jsonl"
    return f


def test_import_through_the_api(client, token_for, corpus, users):
    run = SynthesisRun.objects.create(name="imports")
    response = client.post("/api/pairs/import", {"run": run.pk, "file": _upload(jsonl_lines(GOOD_LINE, "[1, 2]"))},
                           **auth(token_for("reviewer")))
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["created"] == 1 and data["skipped"] == 0
    assert data["errors"] == [{"line": 2, "message": "line 2: expected a JSON object"}]
    assert CandidatePair.objects.get(run=run).external_id == "ref-9"
    missing = client.post("/api/pairs/import", {"run": 999999, "file": _upload(b"")}, **auth(token_for("reviewer")))
    assert missing.status_code == 422 and "run" in missing.json()["detail"]


def test_a_viewer_cannot_import_through_the_api(client, token_for, repo):
    before = CandidatePair.objects.count()
    response = client.post("/api/pairs/import", {"run": repo.run.pk, "file": _upload(jsonl_lines(GOOD_LINE))}, **auth(token_for("viewer")))
    assert response.status_code == 403 and CandidatePair.objects.count() == before


def test_export_through_the_api(client, token_for, repo):
    secret = token_for("viewer")
    response = client.get("/api/pairs/export", {"run": repo.run.pk, "verdict": "all"}, **auth(secret))
    assert response.status_code == 200 and response["Content-Disposition"].startswith("attachment")
    lines = [json.loads(x) for x in b"".join(response.streaming_content).decode().splitlines()]
    assert len(lines) == 3 and all(len(line["skill_ids"]) == 2 for line in lines)
    accepted = client.get("/api/pairs/export", **auth(secret))
    assert len(b"".join(accepted.streaming_content).decode().splitlines()) == 1
    assert client.get("/api/pairs/export", {"verdict": "maybe"}, **auth(secret)).status_code == 422


def test_the_openapi_schema_describes_the_routes(client_as):
    paths = client_as("viewer").get("/api/openapi.json").json()["paths"]
    for path in ("/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/cancel", "/api/pairs", "/api/pairs/{pair_id}",
                 "/api/pairs/import", "/api/pairs/export", "/api/scenarios", "/api/scenarios/{scenario_id}"):
        assert path in paths, path
