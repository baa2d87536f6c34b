"""A reviewer browses the scenario repository that a replayed synthesis run produced."""
import pytest

from scenarios import services
from tests.conftest import replay_demo_synthesis

from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_bundled_demo_run_replays_and_its_scenarios_can_be_read(page):
    run = replay_demo_synthesis()
    progress = services.run_progress(run)
    assert run.message == "Finished." and progress["accepted_pairs"] == 8 and progress["consistent_scenarios"] == 8

    login(page, "reviewer")
    page.click("nav >> text=Runs")
    page.click(f"text={run.name}")
    assert page.is_visible("text=4. Reconstruction")
    page.click("nav >> text=Repository")
    page.locator("a[href*='/repository/scenarios/']").first.click()
    assert page.is_visible("text=Five dimensions") and page.is_visible("text=Consistency check")
    page.click("text=Skill analysis")  # a module's output unfolds
    assert page.locator("details[open]").count() >= 1
