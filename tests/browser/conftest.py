"""Playwright driving Debian's chromium against pytest-django's live server."""
import os
import shutil

import pytest

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


