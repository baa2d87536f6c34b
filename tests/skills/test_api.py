"""The JSON API through HTTP, authenticated with per-user tokens."""
import io
import zipfile

import pytest

from skills import services
from skills.models import Category, IngestBatch, Skill
from tests.conftest import write_skill

from .samples import CSV_SKILL, SQLITE_SKILL, UNSAFE_SKILL

pytestmark = pytest.mark.django_db


@pytest.fixture
def ingested(tmp_path):
    root = tmp_path / "c"
    write_skill(root, "csv", CSV_SKILL)
    write_skill(root, "sqlite", SQLITE_SKILL)
    write_skill(root, "unsafe", UNSAFE_SKILL)
    services.ingest_path(root, label="c")
    return {s.name: s for s in Skill.objects.all()}


def auth(secret):
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def test_it_refuses_requests_without_a_token(client, ingested):
    response = client.get("/api/skills")
    assert response.status_code == 401


def test_it_refuses_a_revoked_token(client, users, ingested):
    from facet_site.models import ApiToken

    token, secret = ApiToken.issue(user=users["viewer"], name="t")
    assert client.get("/api/skills", **auth(secret)).status_code == 200
    token.revoke()
    assert client.get("/api/skills", **auth(secret)).status_code == 401


def test_it_lists_and_filters_skills(client, token_for, ingested):
    secret = token_for("viewer")
    data = client.get("/api/skills", **auth(secret)).json()
    assert data["count"] == 3
    assert {i["name"] for i in data["items"]} == {"csv-dedupe", "sqlite-report", "disk-reclaimer"}
    rejected = client.get("/api/skills", {"status": "rejected"}, **auth(secret)).json()
    assert [i["name"] for i in rejected["items"]] == ["disk-reclaimer"]
    assert rejected["items"][0]["verdicts"] == ["unsafe"]
    searched = client.get("/api/skills", {"q": "sqlite"}, **auth(secret)).json()
    assert [i["name"] for i in searched["items"]] == ["sqlite-report"]


def test_it_shows_a_skill_with_files_verdicts_and_neighbours(client, token_for, ingested):
    skill = ingested["disk-reclaimer"]
    data = client.get(f"/api/skills/{skill.pk}", **auth(token_for("viewer"))).json()
    assert data["verdict_details"][0]["kind"] == "unsafe"
    assert len(data["neighbours"]) == 2
    assert data["versions"] == [skill.pk]


def test_unknown_skill_is_404(client, token_for, db):
    assert client.get("/api/skills/999999", **auth(token_for("viewer"))).status_code == 404


def test_categories_come_with_live_counts(client, token_for, ingested):
    data = client.get("/api/categories", **auth(token_for("viewer"))).json()
    assert len([c for c in data if c["parent"] is None]) == 5
    assert len([c for c in data if c["parent"]]) == 34
    assert sum(c["skills"] for c in data if c["parent"] is None) == Skill.objects.current().accepted().count()


def test_a_viewer_cannot_override_a_category_through_the_api(client, token_for, ingested):
    skill = ingested["csv-dedupe"]
    target = Category.objects.filter(parent__isnull=False).exclude(pk=skill.category_id).first()
    response = client.put(f"/api/skills/{skill.pk}/category", {"category": target.slug},
                          content_type="application/json", **auth(token_for("viewer")))
    assert response.status_code == 403


def test_a_reviewer_overrides_a_category_through_the_api(client, token_for, ingested):
    skill = ingested["csv-dedupe"]
    target = Category.objects.filter(parent__isnull=False).exclude(pk=skill.category_id).first()
    response = client.put(f"/api/skills/{skill.pk}/category", {"category": target.slug},
                          content_type="application/json", **auth(token_for("reviewer")))
    assert response.status_code == 200 and response.json()["category"]["slug"] == target.slug
    bad = client.put(f"/api/skills/{skill.pk}/category", {"category": "no-such"},
                     content_type="application/json", **auth(token_for("reviewer")))
    assert bad.status_code == 422 and "no-such" in bad.json()["detail"]


def test_ingest_through_the_api(client, token_for, db, django_capture_on_commit_callbacks):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a/SKILL.md", CSV_SKILL)
    buf.seek(0)
    buf.name = "skills.zip"
    secret = token_for("reviewer")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post("/api/skills/ingest", {"file": buf}, **auth(secret))
    assert response.status_code == 202
    batch_id = response.json()["id"]
    assert response.json()["status"] == "queued" and len(callbacks) == 1
    services.execute_batch(batch_id)  # what the worker does with the queued job
    data = client.get(f"/api/skills/ingest/{batch_id}", **auth(secret)).json()
    assert data["status"] == "succeeded" and data["summary"]["ingested"] == 1


def test_a_viewer_cannot_ingest_through_the_api(client, token_for, db):
    buf = io.BytesIO(b"PK")
    buf.name = "x.zip"
    assert client.post("/api/skills/ingest", {"file": buf}, **auth(token_for("viewer"))).status_code == 403
    assert not IngestBatch.objects.exists()


def test_openapi_docs_need_a_login_and_describe_the_routes(client, client_as):
    assert client.get("/api/docs").status_code == 302
    schema = client_as("viewer").get("/api/openapi.json").json()
    assert "/api/skills" in schema["paths"] and "/api/skills/ingest" in schema["paths"]


# Every route of the site's API, as its clients know it: mounting one router per resource under
# its own prefix must neither move nor drop one.
API_ROUTES = {
    "/api/analytics/{table}": {"get"}, "/api/audit": {"get"}, "/api/audit/{event_id}/undo": {"post"},
    "/api/categories": {"get"}, "/api/exports": {"get", "post"}, "/api/exports/{export_id}": {"get"}, "/api/exports/{export_id}/retry": {"post"},
    "/api/exports/{export_id}/archive": {"get"}, "/api/funnel": {"get"}, "/api/imports": {"get", "post"},
    "/api/imports/{import_id}": {"get"}, "/api/imports/{import_id}/retry": {"post"}, "/api/pairs": {"get"}, "/api/pairs/export": {"get"},
    "/api/pairs/import": {"post"}, "/api/pairs/{pair_id}": {"get"}, "/api/queue/next": {"post"},
    "/api/rollouts": {"get", "post"}, "/api/rollouts/import": {"post"}, "/api/rollouts/{batch_id}": {"get"},
    "/api/rollouts/{batch_id}/cancel": {"post"}, "/api/rollouts/{batch_id}/resume": {"post"}, "/api/rollouts/{batch_id}/trajectories": {"get"},
    "/api/runs": {"get", "post"}, "/api/runs/{run_id}": {"get"}, "/api/runs/{run_id}/cancel": {"post"}, "/api/runs/{run_id}/retry": {"post"},
    "/api/scenarios": {"get"}, "/api/scenarios/{scenario_id}": {"get"}, "/api/skills": {"get"},
    "/api/skills/ingest": {"post"}, "/api/skills/ingest/{batch_id}": {"get"}, "/api/skills/ingest/{batch_id}/retry": {"post"}, "/api/skills/{skill_id}": {"get"},
    "/api/skills/{skill_id}/category": {"put"}, "/api/tasks": {"get"}, "/api/tasks/bulk-decisions": {"post"},
    "/api/tasks/{task_id}": {"get"}, "/api/tasks/{task_id}/decisions": {"get", "post"},
    "/api/tasks/{task_id}/lock": {"delete"}, "/api/tasks/{task_id}/retry": {"post"}, "/api/tasks/{task_id}/validate": {"post"},
    "/api/trajectories/{trajectory_id}": {"get"},
    # review by several reviewers (docs/review.md, "Review by several reviewers")
    "/api/team/adjudication": {"get"}, "/api/team/agreement": {"get"}, "/api/team/assignments": {"post"},
    "/api/team/gold": {"get", "post"}, "/api/team/gold/accuracy": {"get"}, "/api/team/gold/{task_id}": {"delete"},
    "/api/team/guidelines": {"get", "post"}, "/api/team/policies": {"get", "post"},
    "/api/team/policies/{policy_id}/next": {"post"}, "/api/team/reviewers": {"get"},
    "/api/team/tasks/{task_id}/adjudication": {"post"}, "/api/team/tasks/{task_id}/consensus": {"get"},
    "/api/team/tasks/{task_id}/lock": {"delete"},
}


def test_every_api_route_keeps_its_path_and_methods(client_as):
    schema = client_as("viewer").get("/api/openapi.json").json()
    assert {path: set(ops) for path, ops in schema["paths"].items()} == API_ROUTES
    operation_ids = [op["operationId"] for ops in schema["paths"].values() for op in ops.values()]
    assert len(operation_ids) == len(set(operation_ids))
