"""The review API: decisions, the audit log and undo, bulk decisions and the queue, through the
test client with tokens (and once with a session, for CSRF)."""
import pytest
from django.test import Client

from tasks import review, review_queue
from tasks.models import AuditEvent, Decision, ReviewLock, ReviewState, Task, TaskStatus
from tests.tasks.review_records import XSS, make_run, make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def run():
    return make_run()


@pytest.fixture
def task(run):
    return make_task(run)


@pytest.fixture
def as_role(client, token_for):
    def call(role):
        header = {"HTTP_AUTHORIZATION": f"Bearer {token_for(role)}"}

        class Api:
            def get(self, url, **params):
                return client.get(url, params, **header)

            def post(self, url, payload=None):
                return client.post(url, payload or {}, content_type="application/json", **header)

            def delete(self, url):
                return client.delete(url, **header)

        return Api()

    return call


def test_a_reviewer_decides_through_the_api_and_a_viewer_may_not(task, as_role):
    url = f"/api/tasks/{task.pk}/decisions"
    assert as_role("viewer").post(url, {"verdict": "approve"}).status_code == 403
    response = as_role("reviewer").post(url, {"verdict": "reject", "reason": "flaky", "comment": XSS,
                                              "content_hash": task.current_version.content_hash})
    assert response.status_code == 201
    body = response.json()
    assert body["verdict"] == "reject" and body["reason"] == "flaky" and body["comment"] == XSS
    assert body["author"] == "reviewer-user" and body["standing"] is True and body["version"] == 1
    assert Task.objects.get(pk=task.pk).review_state == ReviewState.REJECTED
    listing = as_role("viewer").get(url).json()
    assert [d["id"] for d in listing] == [body["id"]]
    assert Client().get(url).status_code == 401


def test_refusals_come_back_as_409_and_bad_input_as_422(run, task, as_role):
    url = f"/api/tasks/{task.pk}/decisions"
    reviewer = as_role("reviewer")
    assert reviewer.post(url, {"verdict": "reject"}).status_code == 422  # no reason
    assert reviewer.post(url, {"verdict": "reject", "reason": "boring"}).status_code == 422
    assert reviewer.post(url, {"verdict": "sure"}).status_code == 422
    assert reviewer.post(url, {"verdict": "approve", "content_hash": "sha256:stale"}).status_code == 409
    failed = make_task(run, status=TaskStatus.FAILED, accepted=False)
    refused = reviewer.post(f"/api/tasks/{failed.pk}/decisions", {"verdict": "approve"})
    assert refused.status_code == 409 and "not validated" in refused.json()["detail"]
    assert reviewer.post(f"/api/tasks/{failed.pk}/decisions", {"verdict": "approve", "force": True}).status_code == 409
    forced = as_role("admin").post(f"/api/tasks/{failed.pk}/decisions", {"verdict": "approve", "force": True})
    assert forced.status_code == 201
    empty = make_task(run, version=False, status=TaskStatus.FAILED)
    assert reviewer.post(f"/api/tasks/{empty.pk}/decisions", {"verdict": "reject", "reason": "infeasible"}).status_code == 409
    assert reviewer.post("/api/tasks/999999/decisions", {"verdict": "approve"}).status_code == 404


def test_the_audit_log_and_undo_through_the_api(task, users, as_role):
    review.decide(task, user=users["reviewer"], verdict="approve")
    review.decide(task, user=users["reviewer"], verdict="needs_fix", reason="under_specified")
    log = as_role("viewer").get("/api/audit", task=task.pk, action="decide").json()
    assert log["count"] == 2 and log["items"][0]["after"]["review_state"] == "needs_fix"
    assert log["items"][0]["before"]["review_state"] == "approved"
    assert as_role("viewer").get("/api/audit", actor="admin-user").json()["count"] == 0
    newest = log["items"][0]["id"]
    assert as_role("viewer").post(f"/api/audit/{newest}/undo").status_code == 403
    undone = as_role("reviewer").post(f"/api/audit/{newest}/undo")
    assert undone.status_code == 201 and undone.json()["undoes_id"] == newest
    assert Task.objects.get(pk=task.pk).review_state == ReviewState.APPROVED
    again = as_role("admin").post(f"/api/audit/{newest}/undo")
    assert again.status_code == 409 and "already been undone" in again.json()["detail"]
    assert as_role("reviewer").post(f"/api/audit/{undone.json()['id']}/undo").status_code == 409
    decisions = as_role("viewer").get(f"/api/tasks/{task.pk}/decisions").json()
    assert [d["withdrawn"] for d in decisions] == [False, True, False]
    assert decisions[0]["withdraws_id"] == decisions[1]["id"] and decisions[2]["standing"]


def test_a_reviewer_may_not_undo_someone_elses_entry_through_the_api(task, users, as_role):
    review.decide(task, user=users["admin"], verdict="approve")
    event = AuditEvent.objects.get(action="decide")
    assert as_role("reviewer").post(f"/api/audit/{event.pk}/undo").status_code == 403


def test_bulk_decisions_say_what_would_happen_then_apply(run, as_role):
    tasks = [make_task(run, name=f"bulk {i}") for i in range(3)]
    make_task(run, name="broken", status=TaskStatus.DISCARDED, accepted=False)
    payload = {"query": f"run={run.pk}", "verdict": "approve"}
    assert as_role("viewer").post("/api/tasks/bulk-decisions", payload).status_code == 403
    plan = as_role("reviewer").post("/api/tasks/bulk-decisions", payload).json()
    assert plan["applied"] is False and plan["total"] == 4 and plan["eligible"] == 3
    assert plan["skipped"] == [{"why": "not validated: only validated tasks can be approved", "count": 1}]
    assert sorted(plan["sample"]) == sorted(t.pk for t in tasks) and not Decision.objects.exists()
    stale = as_role("reviewer").post("/api/tasks/bulk-decisions", payload | {"confirm": True, "expected": 7})
    assert stale.status_code == 409 and not Decision.objects.exists()
    done = as_role("reviewer").post("/api/tasks/bulk-decisions", payload | {"confirm": True, "expected": 3}).json()
    assert done["applied"] is True and done["decided"] == 3
    assert Decision.objects.filter(bulk=True).count() == 3
    assert AuditEvent.objects.get(pk=done["audit_event_id"]).action == "bulk_decide"
    bad = as_role("reviewer").post("/api/tasks/bulk-decisions", {"query": "status=nonsense", "verdict": "approve"})
    assert bad.status_code == 422 and "status: unknown value" in bad.json()["detail"]
    no_reason = as_role("reviewer").post("/api/tasks/bulk-decisions", {"query": f"run={run.pk}", "verdict": "reject"})
    assert no_reason.status_code == 422


def test_the_queue_api_hands_out_locked_tasks_one_reviewer_each(run, users, as_role):
    first, second = make_task(run, name="q1"), make_task(run, name="q2")
    assert as_role("viewer").post("/api/queue/next").status_code == 403
    assert as_role("reviewer").get("/api/queue/next").status_code == 405  # taking a lock is never a GET
    got = as_role("reviewer").post("/api/queue/next").json()
    assert got["task_id"] == second.pk and got["position"] == 1 and got["total"] == 2
    assert got["queue"] == review_queue.DEFAULT_QUEUE and got["content_hash"] == second.current_version.content_hash
    other = as_role("admin").post("/api/queue/next").json()
    assert other["task_id"] == first.pk
    assert as_role("reviewer").post("/api/queue/next", {"after": second.pk}).status_code == 204  # the only other is locked
    assert ReviewLock.objects.get(task=second).holder == users["reviewer"]
    assert as_role("reviewer").delete(f"/api/tasks/{second.pk}/lock").status_code == 204
    assert not ReviewLock.objects.filter(task=second).exists()
    assert as_role("viewer").delete(f"/api/tasks/{second.pk}/lock").status_code == 403
    custom = as_role("reviewer").post("/api/queue/next", {"query": "status=validated&sort=id"}).json()
    assert custom["task_id"] == second.pk and custom["queue"] == "status=validated&sort=id"


def test_session_posts_to_the_api_need_the_csrf_token(task, users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["reviewer"])
    response = client.post(f"/api/tasks/{task.pk}/decisions", {"verdict": "approve"}, content_type="application/json")
    assert response.status_code == 403 and not Decision.objects.exists()
    assert client.get(f"/api/tasks/{task.pk}/decisions").status_code == 200


def test_taking_the_next_queue_task_with_a_session_needs_the_csrf_token(task, users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["reviewer"])
    assert client.get("/api/queue/next").status_code == 405
    refused = client.post("/api/queue/next", {}, content_type="application/json")
    assert refused.status_code == 403 and not ReviewLock.objects.exists()
    client.get("/tasks/queue/")  # any page sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    taken = client.post("/api/queue/next", {}, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert taken.status_code == 200 and ReviewLock.objects.get().holder == users["reviewer"]
