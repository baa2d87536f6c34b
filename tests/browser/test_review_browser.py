"""A reviewer works through the review queue with the keyboard in a real browser (Playwright
driving Debian's chromium), then sees the review state and the funnel change on the overview."""
import re

import pytest

from tasks.models import Decision, ReviewLock, Task
from tests.tasks.review_records import XSS, make_run, make_task

from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_reviewer_works_through_the_queue_with_the_keyboard(page):
    run = make_run("browser run")
    oldest = make_task(run, name="Oldest task", instruction="Count the **paid** orders.")
    middle = make_task(run, name="Middle task", instruction="Join the customers.")
    newest = make_task(run, name=f"Newest task {XSS}", instruction=f"Write the report. {XSS}")
    dialogs = []  # an alert() from task text would land here
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    login(page, "reviewer")
    # the home page's review card comes from the overview (htmx)
    assert page.inner_text("#summary-approved") == "0"

    page.goto(f"/tasks/overview/?run={run.pk}")
    assert page.inner_text("#funnel-table tr.stage-approved td.num >> nth=0") == "0"
    page.wait_for_selector("#funnel-chart .funnellayer path", state="attached")  # plotly drew it from our static files

    page.click("nav >> a:text-is('Review')")  # not "Safety review"
    assert page.inner_text("#queue-total") == "3"
    page.click("#next-task")
    page.wait_for_url(f"**/tasks/{newest.pk}/review/?queue=*")
    assert "1 of 3" in page.inner_text(".queue-position")
    # instruction, verifier result and the decision form side by side; model text stays text
    assert "Write the report. <script>" in page.inner_text(".instruction")
    assert page.is_visible("text=Verifier result") and page.is_visible("#decision-form")

    # ? shows the help; typing in the comment box does not trigger shortcuts
    page.keyboard.press("?")
    assert page.is_visible("#shortcut-help")
    page.keyboard.press("Escape")
    assert not page.is_visible("#shortcut-help")
    page.fill("#decision-comment", "a j k r n typed here")
    page.focus("#decision-comment")
    page.keyboard.type("ajkrn")
    page.wait_for_timeout(400)  # a shortcut would have navigated by now
    assert page.input_value("#decision-comment").endswith("ajkrn") and f"/tasks/{newest.pk}/review/" in page.url
    assert not Decision.objects.exists()
    page.keyboard.press("Escape")  # leaves the field

    # j and k move through the queue
    page.keyboard.press("j")
    page.wait_for_url(f"**/tasks/{middle.pk}/review/?queue=*")
    assert "2 of 3" in page.inner_text(".queue-position")
    page.keyboard.press("k")
    page.wait_for_url(f"**/tasks/{newest.pk}/review/?queue=*")

    # a approves and moves on to the next task
    page.keyboard.press("a")
    page.wait_for_url(f"**/tasks/{middle.pk}/review/?queue=*")
    assert page.is_visible("text=Approve: “Newest task")
    assert "1 of 2" in page.inner_text(".queue-position")
    assert Task.objects.get(pk=newest.pk).review_state == "approved"
    assert ReviewLock.objects.get().task_id == middle.pk  # the approved task's lock was let go

    # r arms a rejection and focuses the reason; Ctrl+Enter submits it
    page.keyboard.press("r")
    assert page.evaluate("document.activeElement.id") == "decision-reason"
    page.select_option("#decision-reason", "under_specified")
    page.keyboard.press("Control+Enter")
    page.wait_for_url(f"**/tasks/{oldest.pk}/review/?queue=*")
    decision = Decision.objects.get(task=middle)
    assert (decision.verdict, decision.reason) == ("reject", "under_specified")

    # n without a reason only arms needs-fix: nothing is sent until a reason is chosen
    page.keyboard.press("n")
    page.keyboard.press("Control+Enter")
    assert page.is_visible("#reason-hint") and not Decision.objects.filter(task=oldest).exists()
    page.keyboard.press("Escape")

    # the task page shows the state; the overview's funnel counts the approval
    page.goto(f"/tasks/{newest.pk}/review/")
    assert page.inner_text("#review-state") == "Approved"
    page.goto(f"/tasks/overview/?run={run.pk}")
    assert page.inner_text("#funnel-table tr.stage-approved td.num >> nth=0") == "1"
    assert page.inner_text("#funnel-table tr.stage-reviewed td.num >> nth=0") == "2"
    # decisions by reason and throughput arrive right after the page, with their charts
    page.wait_for_selector("#reasons-chart .barlayer path", state="attached")
    assert "Under-specified instruction" in page.inner_text("#reasons table.reasons")
    page.wait_for_selector("#throughput-chart .barlayer path", state="attached")
    assert "reviewer-user" in page.inner_text("#throughput table.throughput")
    # clicking a stage of the chart opens the tasks it counts (facet.js follows the customdata)
    page.wait_for_selector("#funnel-chart .funnellayer .point path", state="attached")
    box = page.locator("#funnel-chart .funnellayer .point path").first.bounding_box()  # the seeds
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_url(re.compile(r"/tasks/\?.*stage=seeds"))
    page.go_back()
    page.click("#funnel-table tr.stage-approved a")
    page.wait_for_url(re.compile(r"/tasks/\?.*stage=final_validated"))
    assert "review=approved" in page.url and f"run={run.pk}" in page.url
    assert dialogs == []
