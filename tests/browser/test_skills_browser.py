"""What a reviewer sees in a real browser: Playwright driving Debian's chromium against a live server."""
import os
import shutil

import pytest

from skills import services
from tests.conftest import DEMO_CORPUS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Playwright's sync API keeps an event loop in this thread; the ORM calls made by the test
# itself (fixtures) are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM:
        if os.environ.get("CI") or os.environ.get("FACET_REQUIRE_BROWSER"):
            pytest.fail("Debian's chromium is not installed (make test installs it as root)")
        pytest.skip("Debian's chromium is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"],
        )
        yield b
        b.close()


@pytest.fixture
def page(browser, live_server, users):
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


def login(page, role):
    page.goto("/")
    assert "/login/" in page.url
    page.fill("input[name=username]", f"{role}-user")
    page.fill("input[name=password]", f"{role}-password-1")
    page.click("button[type=submit]")
    page.wait_for_url("**/")


def test_a_reviewer_searches_the_corpus_and_overrides_a_category(page):
    services.ingest_path(DEMO_CORPUS, label="demo")
    login(page, "reviewer")
    page.click("text=Skills")
    page.fill("input[name=q]", "sqlite")
    # htmx swaps the results in place as the reviewer types
    page.wait_for_function("!document.querySelector('#results').innerText.includes('markdown-toc')")
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
