"""The review pages: the overview's funnel, reasons and throughput (each count what its link
lists), every page's permissions and CSRF, and deciding, the queue and its locks, bulk decisions
and the audit log through the test client. Records are made through the ORM (no Docker, no LLM)."""
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from tasks import funnel as construction_funnel
from tasks import review, review_numbers, review_queue
from tasks.filters import FUNNEL_STAGES, TaskFilter
from tasks.models import AuditEvent, Decision, EnvironmentBuild, ReviewLock, ReviewState, TaskStatus, Validation
from tests.html_safety import active_content
from tests.tasks.review_records import XSS, add_version, last_event, make_run, make_task, refreshed

pytestmark = pytest.mark.django_db


# --- the funnel ----------------------------------------------------------------------------------------


def test_every_funnel_stage_is_a_task_filter_that_lists_what_it_counts(run, users):
    make_task(run, name="first pass")
    repaired = make_task(run, name="repaired")
    Validation.objects.filter(version__task=repaired).update(accepted=False)  # its first validation failed
    add_version(repaired)  # the repair validated
    env_repaired = make_task(run, name="env repaired")
    EnvironmentBuild.objects.filter(environment=env_repaired.environment).update(outcome="build_failed")
    EnvironmentBuild.objects.create(environment=env_repaired.environment, attempt=2, outcome="succeeded")
    make_task(run, name="never built", first_build_ok=False, status=TaskStatus.FAILED, version=False)
    make_task(run, name="discarded", status=TaskStatus.DISCARDED, accepted=False)
    make_task(None, name="imported", imported=True)
    review.decide(repaired, user=users["reviewer"], verdict="approve")
    rows = review_numbers.funnel(run)
    assert [r["stage"] for r in rows[:-2]] == list(FUNNEL_STAGES) == [s for s, _, _ in construction_funnel.FUNNEL_STAGES]
    for row in rows:
        listed = TaskFilter.from_query(row["query"]).queryset().count()
        assert listed == row["count"], row
    counts = {r["stage"]: r["count"] for r in rows}
    assert counts["seeds"] == 5 and counts["final_validated"] == 3 and counts["task_repair_recovery"] == 1
    assert counts["environment_repair_recovery"] == 1 and counts["reviewed"] == 1 and counts["approved"] == 1
    overall = {r["stage"]: r["count"] for r in review_numbers.funnel()}
    assert overall["seeds"] == 5  # the imported task is not a seed
    assert TaskFilter.from_query("stage=nonsense").errors == ["stage: unknown funnel stage 'nonsense'"]


def test_reasons_and_throughput_count_what_their_links_open(run, users):
    a, b, c = (make_task(run, name=n) for n in "abc")
    review.decide(a, user=users["reviewer"], verdict="reject", reason="flaky")
    review.decide(b, user=users["reviewer"], verdict="needs_fix", reason="flaky")
    review.decide(c, user=users["admin"], verdict="reject", reason="unsafe")
    review.undo(last_event(c), user=users["admin"])
    d = make_task(run, name="d")  # rejected for a reason, then approved: that reason is no longer in force
    review.decide(d, user=users["reviewer"], verdict="reject", reason="flaky")
    review.decide(d, user=users["reviewer"], verdict="approve", reason="other", comment="fine after all")
    rows = {r["reason"]: r for r in review_numbers.reasons(run)}
    assert [cell["count"] for cell in rows["flaky"]["cells"]] == [1, 1, 0] and rows["flaky"]["total"] == 2
    assert rows["unsafe"]["total"] == 0  # undone
    assert [cell["count"] for cell in rows["other"]["cells"]] == [0, 0, 1]
    for row in rows.values():
        for cell in row["cells"]:
            assert TaskFilter.from_query(cell["query"]).queryset().count() == cell["count"]
        assert TaskFilter.from_query(row["query"]).queryset().count() == row["total"]
    data = review_numbers.throughput(run)
    table = {r["reviewer"]: r for r in data["table"]}
    assert table["reviewer-user"]["total"] == 4 and table["admin-user"]["total"] == 1  # the undo is not work
    assert data["series"]["reviewer-user"][-1] == 4 and len(data["days"]) == 30


# --- pages ---------------------------------------------------------------------------------------------

PAGES = ["/tasks/queue/", "/tasks/overview/", "/tasks/audit/"]


@pytest.mark.parametrize("role", ["viewer", "reviewer", "admin"])
def test_every_review_page_is_readable_by_every_role(task, client_as, role):
    client = client_as(role)
    for url in PAGES + [f"/tasks/{task.pk}/review/", f"/tasks/{task.pk}/review/?queue=status%3Dvalidated"]:
        assert client.get(url).status_code == 200, url
    for part in ("summary", "reasons", "throughput"):
        assert client.get(f"/tasks/overview/?part={part}", HTTP_HX_REQUEST="true").status_code == 200


def test_review_pages_need_a_login(task, client):
    for url in PAGES + [f"/tasks/{task.pk}/review/", "/tasks/bulk/?verdict=approve"]:
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url


def test_the_bulk_page_is_for_reviewers_and_admins(task, client_as):
    assert client_as("viewer").get("/tasks/bulk/?verdict=approve").status_code == 403
    assert client_as("viewer").post("/tasks/bulk/?verdict=approve", {"confirm": "1"}).status_code == 403
    assert client_as("reviewer").get("/tasks/bulk/?verdict=approve").status_code == 200
    assert client_as("admin").get("/tasks/bulk/").status_code == 200


def test_viewers_get_403_on_every_review_post(task, users, client_as):
    review.decide(task, user=users["reviewer"], verdict="approve")
    event = last_event(task)
    client = client_as("viewer")
    posts = [(f"/tasks/{task.pk}/decide/", {"verdict": "reject", "reason": "flaky"}),
             (f"/tasks/audit/{event.pk}/undo/", {}), ("/tasks/queue/next/", {}),
             (f"/tasks/{task.pk}/release/", {}), (f"/tasks/{task.pk}/renew/", {}),
             ("/tasks/bulk/?verdict=approve", {"confirm": "1"})]
    for url, data in posts:
        assert client.post(url, data).status_code == 403, url
    assert refreshed(task).review_state == ReviewState.APPROVED and not AuditEvent.objects.filter(action="undo").exists()


def test_every_review_post_needs_the_csrf_token(task, users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["reviewer"])
    for url in (f"/tasks/{task.pk}/decide/", "/tasks/queue/next/", "/tasks/bulk/?verdict=approve",
                f"/tasks/{task.pk}/release/"):
        assert client.post(url, {"verdict": "approve", "confirm": "1"}).status_code == 403, url
    assert not Decision.objects.exists()
    page = client.get(f"/tasks/{task.pk}/review/").content.decode()
    assert 'name="csrfmiddlewaretoken"' in page and "X-CSRFToken" in page  # forms and htmx


def test_a_reviewer_decides_on_the_review_page_and_sees_the_history(task, client_as):
    client = client_as("reviewer")
    page = client.get(f"/tasks/{task.pk}/review/").content.decode()
    assert "Sum the paid orders." in page and "test_report" in page and 'id="decision-form"' in page
    response = client.post(f"/tasks/{task.pk}/decide/", {"verdict": "reject", "reason": "too_strict", "comment": XSS,
                                                         "content_hash": task.current_version.content_hash})
    assert response.status_code == 302 and response["Location"] == f"/tasks/{task.pk}/"
    page = client.get(f"/tasks/{task.pk}/review/").content.decode()
    assert "Verifier too strict" in page and "Rejected" in page
    assert XSS not in page and "&lt;script&gt;" in page and active_content(page) == []


def test_a_refused_decision_is_explained_on_the_page(run, client_as):
    task = make_task(run, status=TaskStatus.DISCARDED, accepted=False)
    client = client_as("reviewer")
    page = client.post(f"/tasks/{task.pk}/decide/", {"verdict": "approve", "next": f"/tasks/{task.pk}/review/"},
                       follow=True).content.decode()
    assert "only a validated task can be approved" in page and not Decision.objects.exists()
    response = client.post(f"/tasks/{task.pk}/decide/", {"verdict": "reject", "next": "https://evil.example/"})
    assert response["Location"] == f"/tasks/{task.pk}/"  # never an outside redirect
    assert "choose why the task is rejected" in client.get(f"/tasks/{task.pk}/review/").content.decode()


def test_the_admin_sees_the_force_option_and_reviewers_do_not(run, client_as):
    task = make_task(run, status=TaskStatus.DISCARDED, accepted=False)
    assert "Force the approval" in client_as("admin").get(f"/tasks/{task.pk}/review/").content.decode()
    assert "Force the approval" not in client_as("reviewer").get(f"/tasks/{task.pk}/review/").content.decode()
    client_as("admin").post(f"/tasks/{task.pk}/decide/", {"verdict": "approve", "force": "1"})
    assert refreshed(task).review_state == ReviewState.APPROVED


def test_the_queue_page_takes_the_next_task_and_deciding_moves_on_and_releases_the_lock(run, client_as, users):
    a, b = make_task(run, name="Queue A"), make_task(run, name="Queue B")
    client = client_as("reviewer")
    page = client.get("/tasks/queue/").content.decode()
    assert "Next task to review" in page and 'id="queue-total">2<' in page
    response = client.post("/tasks/queue/next/", {"queue": ""})
    assert response.status_code == 302 and response["Location"].startswith(f"/tasks/{b.pk}/review/?queue=")
    assert ReviewLock.objects.get(task=b).holder == users["reviewer"]
    page = client.get(response["Location"]).content.decode()
    assert "1 of 2" in page and 'id="queue-next"' in page and "You are reviewing this task" in page
    assert "Resume task" in client.get("/tasks/queue/").content.decode()
    queue = review_queue.DEFAULT_QUEUE
    response = client.post(f"/tasks/{b.pk}/decide/", {"verdict": "approve", "queue": queue})
    assert response["Location"].startswith(f"/tasks/{a.pk}/review/?queue=")
    assert not ReviewLock.objects.filter(task=b).exists() and ReviewLock.objects.get(task=a).holder == users["reviewer"]
    response = client.post(f"/tasks/{a.pk}/decide/", {"verdict": "needs_fix", "reason": "under_specified", "queue": queue})
    assert response["Location"] == f"/tasks/queue/?{queue}" and not ReviewLock.objects.exists()
    page = client.get(response["Location"]).content.decode()
    assert "Nothing left in this queue" in page and 'id="queue-total">0<' in page


def test_another_reviewer_sees_who_holds_the_lock_and_gets_another_task(run, client_as, users):
    a, b = make_task(run, name="Locked A"), make_task(run, name="Free B")
    review_queue.take_lock(b.pk, users["admin"])
    client = client_as("reviewer")
    assert "admin-user</b> is reviewing this task" in client.get(f"/tasks/{b.pk}/review/").content.decode()
    response = client.post("/tasks/queue/next/", {"queue": review_queue.DEFAULT_QUEUE})
    assert response["Location"].startswith(f"/tasks/{a.pk}/review/")
    response = client.post("/tasks/queue/next/", {"queue": review_queue.DEFAULT_QUEUE, "current": str(a.pk)}, follow=True)
    assert "No next task in this queue" in response.content.decode()
    client.post(f"/tasks/{a.pk}/release/", {"queue": review_queue.DEFAULT_QUEUE})
    assert not ReviewLock.objects.filter(task=a).exists()


def test_the_lock_heartbeat_renews_only_ones_own_lock(task, client_as, users):
    ReviewLock.objects.create(task=task, holder=users["admin"], acquired_at=timezone.now() - timedelta(hours=1))
    assert client_as("reviewer").post(f"/tasks/{task.pk}/renew/").status_code == 204
    assert ReviewLock.objects.get(task=task).holder == users["admin"]  # a heartbeat never reclaims


def test_the_bulk_page_confirms_then_applies(selection, run, client_as):
    client = client_as("reviewer")
    page = client.get(f"/tasks/bulk/?verdict=approve&run={run.pk}").content.decode()
    assert f"run={run.pk}" in page and 'id="eligible">3<' in page and "of 5 selected tasks" in page
    assert "Validated 0" in page and "not validated: only validated tasks can be approved" in page
    assert "Discarded one" in page and "No version" in page
    # POST without the confirmation does nothing
    page = client.post(f"/tasks/bulk/?verdict=approve&run={run.pk}", {"expected": "3"}, follow=True).content.decode()
    assert "Tick the confirmation" in page and not Decision.objects.exists()
    response = client.post(f"/tasks/bulk/?verdict=approve&run={run.pk}", {"expected": "3", "confirm": "1",
                                                                         "comment": "looked at all three"})
    assert response.status_code == 302 and response["Location"] == "/tasks/audit/?action=bulk_decide"
    assert Decision.objects.filter(bulk=True, verdict="approve").count() == 3
    page = client.get(response["Location"]).content.decode()
    assert "bulk_decide" in page and "Undo" in page


def test_bulk_reject_needs_a_reason_and_a_stale_confirmation_is_refused(selection, run, client_as):
    client = client_as("admin")
    url = f"/tasks/bulk/?verdict=reject&run={run.pk}"
    page = client.post(url, {"expected": "4", "confirm": "1"}, follow=True).content.decode()
    assert "choose why the task is rejected" in page and not Decision.objects.exists()
    page = client.post(url, {"expected": "9", "confirm": "1", "decision_reason": "duplicate"}, follow=True).content.decode()
    assert "The selection changed" in page and not Decision.objects.exists()
    client.post(url, {"expected": "4", "confirm": "1", "decision_reason": "duplicate"})
    assert Decision.objects.filter(reason="duplicate", bulk=True).count() == 4


def test_the_audit_log_filters_and_undoes(task, run, client_as, users):
    other = make_task(run, name="Other task")
    review.decide(task, user=users["reviewer"], verdict="reject", reason="unsafe", comment=XSS)
    review.decide(other, user=users["admin"], verdict="approve")
    client = client_as("reviewer")
    page = client.get("/tasks/audit/").content.decode()
    assert page.count("<tr id=\"event-") == 2 and XSS not in page and active_content(page) == []
    assert "unreviewed" in page and "rejected" in page  # before and after
    page = client.get(f"/tasks/audit/?task={other.pk}").content.decode()
    assert page.count("<tr id=\"event-") == 1 and "Undo</button>" not in page  # the admin's entry
    assert client.get("/tasks/audit/?actor=reviewer-user&action=decide").content.decode().count("<tr id=\"event-") == 1
    mine = last_event(task)
    response = client.post(f"/tasks/audit/{mine.pk}/undo/", {"next": "/tasks/audit/"}, follow=True)
    page = response.content.decode()
    assert f"Entry #{mine.pk} undone" in page and "undone by #" in page and "an undo cannot be undone" in page
    assert refreshed(task).review_state == ReviewState.UNREVIEWED
    page = client.post(f"/tasks/audit/{mine.pk}/undo/", follow=True).content.decode()
    assert "already been undone" in page
    theirs = last_event(other)
    assert client.post(f"/tasks/audit/{theirs.pk}/undo/").status_code == 403


def test_the_overview_shows_the_funnel_per_run_reasons_and_throughput(run, client_as, users):
    a = make_task(run, name="Overview A")
    make_task(run, name="Overview B")
    other = make_run("second run")
    make_task(other, name="Overview C")
    client = client_as("viewer")
    page = client.get("/tasks/overview/").content.decode()
    assert "Final validated tasks" in page and "Reviewed by a person" in page and "/static/vendor/plotly/plotly.min.js" in page
    assert 'id="funnel-data"' in page and "?stage=final_validated" in page and active_content(page) == []
    assert "By run" in page and f'<a href="?run={other.pk}">#{other.pk} second run</a>' in page
    # reasons and throughput load into the page right after it (htmx)
    assert 'hx-get="/tasks/overview/?part=reasons"' in page and 'hx-get="/tasks/overview/?part=throughput"' in page
    assert "Nobody decided anything" in client.get("/tasks/overview/?part=throughput", HTTP_HX_REQUEST="true").content.decode()
    assert "No decision with a reason yet" in client.get("/tasks/overview/?part=reasons").content.decode()
    review.decide(a, user=users["reviewer"], verdict="reject", reason="leaks_answer", comment=XSS)
    page = client.get(f"/tasks/overview/?run={run.pk}").content.decode()
    assert f'hx-get="/tasks/overview/?part=reasons&amp;run={run.pk}"' in page
    assert page.count('<tr class="stage-') == 11 and "By run" not in page  # one run: no by-run table
    reasons = client.get(f"/tasks/overview/?part=reasons&run={run.pk}", HTTP_HX_REQUEST="true").content.decode()
    assert "Leaks the answer" in reasons and 'id="reasons-data"' in reasons and active_content(reasons) == []
    assert f"/tasks/?run={run.pk}&amp;review=rejected&amp;reason=leaks_answer" in reasons
    throughput = client.get(f"/tasks/overview/?part=throughput&run={run.pk}", HTTP_HX_REQUEST="true").content.decode()
    assert "reviewer-user" in throughput and 'id="throughput-data"' in throughput
    assert "1 decision in the last 30 days" in throughput
    other_run = client.get(f"/tasks/overview/?part=throughput&run={other.pk}").content.decode()
    assert "Nobody decided anything" in other_run
    funnel = {r["stage"]: r["count"] for r in review_numbers.funnel(run)}
    assert funnel["final_validated"] == 2 and funnel["reviewed"] == 1 and funnel["approved"] == 0
    summary_card = client.get("/tasks/overview/?part=summary", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="summary-approved">0<' in summary_card and "reviewed" in summary_card
    home = client.get("/").content.decode()
    assert 'hx-get="/tasks/overview/?part=summary"' in home


def test_the_review_panel_renders_for_the_task_page_with_queue_controls(task, users, rf):
    from django.contrib.messages.storage.fallback import FallbackStorage
    from django.template.loader import render_to_string

    from tasks.review_views import panel_context

    review.decide(task, user=users["reviewer"], verdict="needs_fix", reason="flaky", comment=XSS)
    request = rf.get(f"/tasks/{task.pk}/", {"queue": "status=validated&review=unreviewed"})
    request.user = users["reviewer"]
    request.session = {}
    request._messages = FallbackStorage(request)
    html = render_to_string("tasks/_review_panel.html", panel_context(request, refreshed(task)), request=request)
    assert 'id="decision-form"' in html and "Not in this queue any more" in html and 'id="queue-next"' in html
    assert "Flaky" in html and XSS not in html and active_content(html) == []
    assert '<script src="/static/js/review.js"' in html
    request = rf.get(f"/tasks/{task.pk}/")
    request.user = users["viewer"]
    html = render_to_string("tasks/_review_panel.html", panel_context(request, refreshed(task)), request=request)
    assert 'id="decision-form"' not in html and "Your role reads only" in html and 'id="queue-next"' not in html
