"""Pages keep working under the Content-Security-Policy (our own origin, no inline script), with no
CSP violation in the browser's console: htmx, plotly, the review keys, Swagger UI from our static
files, and a skill's remote image shown as a link that the browser never fetches."""
import pytest

from skills import services
from tests.conftest import DEMO_CORPUS

from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def violations(page):
    """CSP violations the console reports, and every URL the browser asked for."""
    seen, requested = [], []
    page.on("console", lambda msg: seen.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.on("request", lambda request: requested.append(request.url))
    return seen, requested


def test_pages_work_under_the_policy_without_violations(page, violations, live_server):
    seen, requested = violations
    services.ingest_path(DEMO_CORPUS, label="demo")
    login(page, "reviewer")
    page.click("text=Skills")
    page.fill("input[name=q]", "sqlite")  # htmx swaps the results in as the reviewer types
    page.wait_for_function("() => !document.querySelector('#results').innerText.includes('markdown-toc')")
    page.goto("/skills/taxonomy/")
    page.wait_for_selector("#bars .bars path", state="attached")  # plotly from our static files
    page.goto("/tasks/")
    page.goto("/api/docs")
    page.wait_for_selector("#swagger-ui .info", state="visible")  # Swagger UI drew the document
    assert page.is_visible("text=facet API")
    assert seen == [], seen
    assert [url for url in requested if not url.startswith(live_server.url)] == []


def test_a_remote_image_in_a_skill_is_a_link_the_browser_does_not_fetch(page, violations, live_server, tmp_path):
    from tests.conftest import write_skill

    seen, requested = violations
    write_skill(tmp_path / "c", "pixel", "---\nname: pixel-skill\ndescription: Report a CSV file as a table\n---\n"
                "# Pixel\n\n![tracking pixel](http://127.0.0.1:9/pixel.png)\n\n1. Read the CSV.\n2. Write the table.\n")
    services.ingest_path(tmp_path / "c", label="pixel")
    login(page, "reviewer")
    page.goto("/skills/?q=pixel")
    page.click("text=pixel-skill")
    assert page.is_visible("a.image-link:has-text('[image: tracking pixel]')")
    assert page.locator("img[src*='pixel.png']").count() == 0
    assert not [url for url in requested if "pixel.png" in url]
    assert seen == [], seen
