"""What a reviewer sees in a real browser: Playwright driving Debian's chromium against a live server."""
import pytest

from skills import services
from tests.conftest import DEMO_CORPUS

from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

def test_a_reviewer_searches_the_corpus_and_overrides_a_category(page):
    services.ingest_path(DEMO_CORPUS, label="demo")
    login(page, "reviewer")
    page.click("text=Skills")
    page.fill("input[name=q]", "sqlite")
    # htmx swaps the results in place as the reviewer types
    page.wait_for_function("() => !document.querySelector('#results').innerText.includes('markdown-toc')")
    assert "csv-to-sqlite-report" in page.inner_text("#results")
    assert "q=sqlite" in page.url  # the filtered list is a shareable URL
    page.click("text=csv-to-sqlite-report")
    assert page.is_visible("text=Nearest skills")
    page.select_option("select[name=category]", label="Data, analysis, and research › CSV, Excel, and spreadsheets")
    page.click("text=Override category")
    assert page.is_visible("text=Category set to “CSV, Excel, and spreadsheets”")
    assert page.is_visible("text=Set by reviewer-user")


def test_the_taxonomy_chart_opens_the_filtered_list(page):
    services.ingest_path(DEMO_CORPUS, label="demo")
    login(page, "viewer")
    page.goto("/skills/taxonomy/")
    page.wait_for_selector("#bars .bars path", state="attached")  # plotly drew the bars from our own static plotly.js
    assert page.locator("#sunburst .slice").count() >= 5
    # Click where a user would: plotly finds the bar under the pointer (its drag layer covers the bars).
    box = page.locator("#bars .bars path").last.bounding_box()  # the longest bar: sorted by count
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_url("**/skills/?category=*")
    assert page.locator("table.skills tbody tr").count() >= 1


def test_a_viewer_sees_no_override_control(page):
    services.ingest_path(DEMO_CORPUS, label="demo")
    login(page, "viewer")
    page.goto("/skills/")
    page.locator("table.skills a").first.click()
    assert page.locator("text=Override category").count() == 0
