"""Two reviewers on a two-review queue in a real browser (Playwright driving Debian's chromium):
one task they agree on is approved, one they disagree on goes to adjudication and an admin settles
it; the agreement figures update, and the export shows both."""
import io
import json
import tarfile

import pytest

from facet_site.services import ensure_user
from tasks import assignment, exports
from tasks.models import Export, ReviewState, Task
from tests.tasks.review_records import make_run, make_task
from tests.tasks.test_team_review import exportable

from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _as(browser, live_server, username, password):
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto("/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url("**/")
    return context, page


def _review_both(page, policy, verdicts):
    """Take the queue's tasks one after the other and decide as `verdicts` says (by task name)."""
    page.goto(f"/tasks/team/{policy.pk}/")
    assert page.inner_text("#team-mine") == "2"
    page.click("#team-next")
    for _ in range(2):
        page.wait_for_selector("#decision-form")
        assert "2 independent reviews per task" in page.inner_text(".team-bar")
        name = page.inner_text("h1")
        verdict, reason = verdicts[name]
        if reason:
            page.select_option("#decision-reason", reason)
        page.click(f"#decision-form button[data-verdict={verdict}]")
        page.wait_for_load_state()
    assert "Nothing left in this queue for you" in page.inner_text(".messages")


def test_two_reviewers_agree_on_one_task_and_an_admin_adjudicates_the_other(browser, live_server, page, users):
    run = make_run("two reviewers")
    agreed = exportable(make_task(run, name="Agreed task", instruction="Count the paid orders."))
    disputed = exportable(make_task(run, name="Disputed task", instruction="Join the customers."))
    policy = assignment.save_policy(user=users["admin"], name="pairs", required_reviews=2, run_id=run.pk)
    ensure_user(username="reviewer-b", password="reviewer-b-password-1", role="reviewer")

    # before: no task has two reviews
    login(page, "admin")
    page.goto(f"/tasks/overview/?run={run.pk}")
    page.wait_for_selector("table.agreement")
    assert page.inner_text("table.agreement .agreement-items") == "0"

    first, first_page = _as(browser, live_server, "reviewer-user", "reviewer-password-1")
    _review_both(first_page, policy, {"Agreed task": ("approve", ""), "Disputed task": ("approve", "")})
    assert Task.objects.get(pk=agreed.pk).review_state == ReviewState.IN_REVIEW

    second, second_page = _as(browser, live_server, "reviewer-b", "reviewer-b-password-1")
    # blind: the first reviewer's approval is not on the second reviewer's page
    second_page.goto(f"/tasks/team/{policy.pk}/")
    second_page.click("#team-next")
    second_page.wait_for_selector("#decision-form")
    assert "reviewer-user" not in second_page.inner_text("#review-panel")
    _review_both(second_page, policy, {"Agreed task": ("approve", ""), "Disputed task": ("reject", "flaky")})
    assert Task.objects.get(pk=agreed.pk).review_state == ReviewState.APPROVED
    assert Task.objects.get(pk=disputed.pk).review_state == ReviewState.DISPUTED
    # now the first reviewer's page shows both reviews
    second_page.goto(f"/tasks/{disputed.pk}/review/")
    assert "reviewer-user" in second_page.inner_text("#review-panel")

    # agreement figures updated: two tasks with two reviews, one agreed
    page.goto(f"/tasks/overview/?run={run.pk}")
    page.wait_for_selector("table.agreement")
    assert page.inner_text("table.agreement .agreement-items") == "2"
    assert page.inner_text("table.agreement .agreement-raw") == "50%"
    page.goto("/tasks/team/reviewers/?days=all")
    assert page.inner_text("#tasks-agreed") == "1"
    assert "reviewer-b + reviewer-user" in page.inner_text("#agreement-table")

    # the admin settles the disagreement from the adjudication queue
    page.goto("/tasks/team/adjudication/")
    page.click(f"#disputed-{disputed.pk} >> text=Adjudicate")
    page.wait_for_selector("#decision-form")
    assert "your decision adjudicates and settles it" in page.inner_text("#consensus")
    page.select_option("#decision-reason", "flaky")
    page.click("#decision-form button[data-verdict=reject]")
    page.wait_for_load_state()
    assert "2 of 2 reviews; rejected" in page.inner_text(".messages")
    assert Task.objects.get(pk=disputed.pk).review_state == ReviewState.REJECTED
    page.goto("/tasks/team/adjudication/")
    assert page.is_visible("#adjudication-empty")
    page.goto("/tasks/team/reviewers/?days=all")
    assert "100%" in page.inner_text("#reviewer-reviewer-b")  # reviewer-b's reject stood

    # an export of the run shows both tasks with their reviews
    page.goto(f"/tasks/exports/new/?run={run.pk}")
    page.click("form.dataset-form button.primary")
    page.wait_for_url("**/tasks/exports/*/")
    export = Export.objects.order_by("-id").first()
    exports.run_export(export.pk)  # what the Celery worker does
    page.reload()
    assert "1 of 2 tasks with two or more reviews" in page.inner_text("#export-agreement")
    with page.expect_download() as download:
        page.click("text=Download facet-export-")
    data = open(download.value.path(), "rb").read()
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        rows = {r["name"]: r for r in map(json.loads, tf.extractfile("facet-dataset/manifest.jsonl").read().splitlines())}
        card = tf.extractfile("facet-dataset/README.md").read().decode()
    assert rows["Agreed task"]["n_reviews"] == 2 and rows["Agreed task"]["reviews_agree"] is True
    assert rows["Agreed task"]["review_state"] == "approved" and rows["Agreed task"]["adjudication"] is None
    assert rows["Disputed task"]["reviews_agree"] is False
    assert rows["Disputed task"]["adjudication"] == {"verdict": "reject", "reason": "flaky", "reviewer": "admin-user"}
    assert "| Settled by adjudication | 1 |" in card
    first.close()
    second.close()
