"""A reviewer filters the task list, opens a task, walks its tabs and reads a repair diff; no
model text ever runs in the page."""
import re

import pytest

from tasks.models import Task
from tests.tasks.conftest import make_run, skills  # noqa: F401 (fixtures)
from tests.tasks.test_list_detail import build_task_with_repairs

from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_filter_the_list_open_a_task_switch_tabs_and_read_a_diff(page, make_run):  # noqa: F811
    task = build_task_with_repairs(make_run(""))
    Task.objects.create(name="an imported one", imported=True, status="discarded", step="done")
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

    login(page, "reviewer")
    page.goto("/tasks/")
    assert page.locator("table.tasks tbody tr").count() == 2
    # a status chip filters in place (htmx) and the query lands in the URL
    page.locator("#status-chips label", has_text="Validated").click()
    page.wait_for_url(re.compile(r"status=validated"))
    page.wait_for_function("() => document.querySelectorAll('table.tasks tbody tr').length === 1")
    assert page.locator("b.total").inner_text() == "1"
    page.fill("input[name=q]", "paid orders")
    page.wait_for_url(re.compile(r"q=paid\+orders"))
    assert page.locator("table.tasks tbody tr").count() == 1
    # sorting by a header keeps the filter
    page.click("table.tasks th.col-tests a")
    page.wait_for_url(re.compile(r"sort=tests"))
    assert "status=validated" in page.url and page.locator("table.tasks tbody tr").count() == 1

    page.click(f"table.tasks a[href='/tasks/{task.pk}/'] >> nth=1")
    page.wait_for_url(f"**/tasks/{task.pk}/")
    assert page.locator(".markdown.instruction h1").inner_text() == "Paid orders"
    page.click("nav.tabs >> text=Repairs")
    page.wait_for_url(re.compile(r"tab=repairs"))
    assert page.is_visible("text=Repair 1: v1 → v2") and page.is_visible("text=Repair 2: v2 → v3")
    added = page.locator("#r1-diff-tests-test-outputs-py table.diff.unified tr.d-added td.code").first
    assert "def test_y():" in added.inner_text()
    page.click("text=side by side")
    page.wait_for_url(re.compile(r"diff=split"))
    new_side = page.locator("#r1-diff-tests-test-outputs-py table.diff.split td.code.new.ins").first
    assert "def test_y():" in new_side.inner_text()

    page.click("nav.tabs >> text=Environment")
    assert page.locator("#f-environment-Dockerfile .highlight .k").first.inner_text() == "FROM"
    page.click(".file-tree >> text=notes.txt")
    page.wait_for_url(re.compile(r"file=data%2Fnested%2Fnotes.txt"))
    assert "<script>alert('pwned')</script>" in page.locator("#f-environment-data-nested-notes-txt").inner_text()

    page.click("nav.tabs >> text=Validation")
    # the oracle's filesystem diff is open; the nop trial's output unfolds on a click
    assert page.locator("table.fs-diff code", has_text="/app/out/report.csv").first.is_visible()
    assert not page.locator("pre.terminal", has_text="done").first.is_visible()
    page.click("text=solve.sh output")
    assert page.locator("pre.terminal", has_text="done").first.is_visible()
    page.click("nav.tabs >> text=Re-checks")
    assert page.is_visible("text=Re-validate v3")
    assert dialogs == [], "a model's script ran"
