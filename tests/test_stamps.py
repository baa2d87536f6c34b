"""Cached aggregates follow their data: a change to the records shows on the next request."""
import re

from scenarios.models import RunStatus, Stage, SynthesisRun
from tasks.funnel import funnel
from tasks.models import Task, TaskStatus


def test_the_funnel_follows_a_task_that_moves(db, settings):
    settings.FACET_PAGE_CACHE_S = 60
    run = SynthesisRun.objects.create(name="r", status=RunStatus.SUCCEEDED, stage=Stage.DONE)
    task = Task.objects.create(name="t", run=run, status=TaskStatus.VALIDATING)
    count = lambda: {r["stage"]: r["count"] for r in funnel(run)}["final_validated"]  # noqa: E731
    assert count() == 0 and count() == 0  # the second answer comes from the cache
    task.move_to("done", status=TaskStatus.VALIDATED)
    assert count() == 1


def test_the_taxonomy_follows_an_override(client_as, tmp_path, settings):
    from skills import services as skill_services
    from skills.models import Category, Skill
    from tests.conftest import write_skill
    from tests.skills.samples import CSV_SKILL

    settings.FACET_PAGE_CACHE_S = 60
    write_skill(tmp_path / "c", "csv", CSV_SKILL)
    skill_services.ingest_path(tmp_path / "c", label="c")
    client = client_as("reviewer")
    skill = Skill.objects.get()
    target = Category.objects.get(slug="audio-speech-and-music")
    def page():  # without the per-response CSRF token
        html = client.get("/skills/taxonomy/").content.decode()
        return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", re.sub(r'"X-CSRFToken": "[^"]*"', "", html))

    before = page()
    assert page() == before
    skill_services.override_category(skill=skill, category=target, user=None)
    assert page() != before


def test_a_cache_with_a_time_limit_of_its_own_ignores_the_page_setting(db, settings):
    from django.core.cache import cache

    from facet_site import stamps

    cache.clear()
    settings.FACET_PAGE_CACHE_S = 0
    calls: list[int] = []

    def compute():
        calls.append(1)
        return len(calls)

    assert stamps.cached("t", stamps.ANALYTICS_STAMP, compute, ttl=60) == 1
    assert stamps.cached("t", stamps.ANALYTICS_STAMP, compute, ttl=60) == 1  # kept: its own limit
    assert stamps.cached("t", stamps.ANALYTICS_STAMP, compute) == 2  # the page setting, 0: computed again
    assert stamps.cached("t", stamps.ANALYTICS_STAMP, compute, ttl=0) == 3
    cache.clear()
