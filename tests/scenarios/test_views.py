"""The run and repository pages as an admin, a reviewer or a viewer sees them."""
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from scenarios.models import CandidatePair, PairSource, RunStatus, Stage, SynthesisRun, WorkStatus
from tests.html_safety import active_content

from .conftest import jsonl_lines

pytestmark = pytest.mark.django_db


def page_urls(repo) -> list[str]:
    return [
        reverse("scenarios:runs"),
        reverse("scenarios:run", args=[repo.run.pk]),
        reverse("scenarios:repository"),
        reverse("scenarios:pair", args=[repo.accepted.pk]),
        reverse("scenarios:pair", args=[repo.unjudged.pk]),
        reverse("scenarios:scenario", args=[repo.scenario.pk]),
        reverse("scenarios:import"),
    ]


def test_every_page_needs_a_login(client, repo):
    for url in page_urls(repo) + [reverse("scenarios:export")]:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), url


@pytest.mark.parametrize("role", ["admin", "reviewer", "viewer"])
def test_every_role_can_read_every_page(client_as, repo, role):
    c = client_as(role)
    for url in page_urls(repo):
        assert c.get(url).status_code == 200, url


@pytest.mark.parametrize("role", ["admin", "reviewer", "viewer"])
def test_model_text_never_runs_as_script(client_as, repo, role):
    c = client_as(role)
    for url in page_urls(repo):
        html = c.get(url).content.decode()
        assert active_content(html) == [], url
    scenario_page = c.get(reverse("scenarios:scenario", args=[repo.scenario.pk])).content.decode()
    assert "&lt;script&gt;alert" in scenario_page  # shown as text, not dropped silently


def test_the_nav_links_to_runs_and_repository(client_as, db):
    html = client_as("viewer").get(reverse("home")).content.decode()
    assert f'href="{reverse("scenarios:runs")}"' in html and f'href="{reverse("scenarios:repository")}"' in html


# --- runs -----------------------------------------------------------------------------------------


def test_the_runs_list_shows_status_stage_usage_and_creator(client_as, repo):
    html = client_as("viewer").get(reverse("scenarios:runs")).content.decode()
    assert "nightly" in html and "reviewer-user" in html
    assert "Finished" in html and "4. Reconstruction" not in html and "Done" in html
    assert "3,000 / 600" in html  # three calls of 1,000 in and 200 out
    assert "$0.0036" in html
    assert 'value="100"' in html  # a finished run's bar is full


def test_the_runs_list_shows_how_far_a_live_run_is(client_as, repo):
    from scenarios.models import RunSkill

    live = SynthesisRun.objects.create(name="live", status=RunStatus.RUNNING)
    RunSkill.objects.create(run=live, skill=repo.skills["csv"], status=WorkStatus.DONE)
    RunSkill.objects.create(run=live, skill=repo.skills["sqlite"], status=WorkStatus.RUNNING)
    html = client_as("viewer").get(reverse("scenarios:runs")).content.decode()
    assert 'value="50" title="50%"' in html


def test_viewers_see_no_start_form(client_as, repo):
    assert 'id="start-run"' not in client_as("viewer").get(reverse("scenarios:runs")).content.decode()
    assert 'id="start-run"' in client_as("reviewer").get(reverse("scenarios:runs")).content.decode()


def test_a_viewer_cannot_start_a_run(client_as, corpus):
    response = client_as("viewer").post(reverse("scenarios:runs"), {"name": "sneaky", "strategy": "forward"})
    assert response.status_code == 403
    assert not SynthesisRun.objects.exists()


def test_a_reviewer_starts_a_run(client_as, corpus, users, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client_as("reviewer").post(reverse("scenarios:runs"), {
            "name": "weekly", "strategy": "reverse", "max_skills": "5", "max_pairs": "20", "max_tokens": "100000",
            "model": "qwen-test", "categories": [],
        })
    run = SynthesisRun.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("scenarios:run", args=[run.pk])
    assert run.created_by == users["reviewer"] and run.strategy == "reverse"
    assert run.config["skills"]["max_skills"] == 5 and run.config["limits"]["max_pairs"] == 20
    assert run.config["limits"]["max_tokens"] == 100000 and run.config["llm"]["model"] == "qwen-test"
    assert run.config["limits"]["k"] == 10  # what the form does not ask keeps its default
    assert run.run_skills.count() == 3 and len(callbacks) == 1  # queued once the transaction commits


def test_a_config_error_is_shown_on_its_field(client_as, corpus):
    response = client_as("reviewer").post(reverse("scenarios:runs"), {"name": "tiny", "strategy": "forward", "max_skills": "1"})
    html = response.content.decode()
    assert response.status_code == 400
    assert 'data-field="max_skills">skills.max_skills: must be an integer of at least 2' in html
    assert not SynthesisRun.objects.exists()
    response = client_as("reviewer").post(reverse("scenarios:runs"), {"name": "t", "strategy": "forward", "max_pairs": "0"})
    assert 'data-field="max_pairs">limits.max_pairs: must be a positive integer' in response.content.decode()


def test_an_empty_selection_is_reported_on_the_categories(client_as, corpus):
    from skills.models import Category

    empty = Category.objects.filter(parent__isnull=False).exclude(skills__isnull=False).first()
    response = client_as("reviewer").post(reverse("scenarios:runs"), {"name": "t", "strategy": "forward", "categories": [empty.slug]})
    assert 'data-field="categories">skills: fewer than two accepted skills match' in response.content.decode()


def test_starting_a_run_needs_csrf(users, corpus):
    c = Client(enforce_csrf_checks=True)
    c.force_login(users["reviewer"])
    assert c.post(reverse("scenarios:runs"), {"name": "x", "strategy": "forward"}).status_code == 403
    assert not SynthesisRun.objects.exists()


def test_the_runs_list_polls_only_while_a_run_is_active(client_as, repo):
    c = client_as("viewer")
    done = c.get(reverse("scenarios:runs"), HTTP_HX_REQUEST="true")
    assert done.status_code == 286 and "<html" not in done.content.decode()
    SynthesisRun.objects.create(name="live", status=RunStatus.RUNNING)
    live = c.get(reverse("scenarios:runs"), HTTP_HX_REQUEST="true")
    assert live.status_code == 200 and 'hx-trigger="every 2s"' in live.content.decode()


def test_run_detail_shows_config_progress_usage_and_links(client_as, repo):
    html = client_as("viewer").get(reverse("scenarios:run", args=[repo.run.pk])).content.decode()
    assert "1. Scenario hypotheses" in html and "3. Judge" in html
    assert "reconstruct.dimensions" in html and "$0.0012" in html
    assert f'{reverse("scenarios:repository")}?run={repo.run.pk}' in html
    assert "&quot;max_pairs&quot;: 500" in html  # the config, escaped JSON
    assert "LLM calls (3)" in html  # the other run's call is not this run's


def test_run_progress_polls_until_the_run_finishes(client_as, repo):
    c = client_as("viewer")
    SynthesisRun.objects.filter(pk=repo.run.pk).update(status=RunStatus.RUNNING, stage=Stage.JUDGE)
    repo.unjudged.status = WorkStatus.FAILED
    repo.unjudged.error = "judge output was not JSON <b>oops</b>"
    repo.unjudged.save()
    running = c.get(reverse("scenarios:run", args=[repo.run.pk]), HTTP_HX_REQUEST="true")
    html = running.content.decode()
    assert running.status_code == 200 and 'id="progress"' in html and "<html" not in html
    assert 'hx-trigger="every 2s"' in html
    assert "judge output was not JSON &lt;b&gt;oops&lt;/b&gt;" in html  # recent errors, escaped
    SynthesisRun.objects.filter(pk=repo.run.pk).update(status=RunStatus.SUCCEEDED, stage=Stage.DONE)
    finished = c.get(reverse("scenarios:run", args=[repo.run.pk]), HTTP_HX_REQUEST="true")
    assert finished.status_code == 286 and "every 2s" not in finished.content.decode()


def test_the_calls_table_pages_as_a_fragment(client_as, repo, monkeypatch):
    from scenarios import views

    monkeypatch.setattr(views, "CALLS_PAGE_SIZE", 2)
    c = client_as("viewer")
    html = c.get(reverse("scenarios:run", args=[repo.run.pk])).content.decode()
    assert "Page 1 of 2" in html
    fragment = c.get(reverse("scenarios:run", args=[repo.run.pk]), {"calls_page": 2}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="calls")
    body = fragment.content.decode()
    assert fragment.status_code == 200 and 'id="calls"' in body and 'id="progress"' not in body and "Page 2 of 2" in body


def test_a_viewer_cannot_cancel_a_run(client_as, repo):
    run = SynthesisRun.objects.create(name="live", status=RunStatus.RUNNING)
    assert client_as("viewer").post(reverse("scenarios:cancel-run", args=[run.pk])).status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


def test_a_reviewer_cancels_a_run(client_as, repo):
    run = SynthesisRun.objects.create(name="live", status=RunStatus.RUNNING)
    c = client_as("reviewer")
    assert "Cancel the run" in c.get(reverse("scenarios:run", args=[run.pk])).content.decode()
    response = c.post(reverse("scenarios:cancel-run", args=[run.pk]), follow=True)
    assert "Cancellation of run" in response.content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert "Cancel the run" not in c.get(reverse("scenarios:run", args=[run.pk])).content.decode()


def test_cancelling_a_finished_run_says_so(client_as, repo):
    response = client_as("reviewer").post(reverse("scenarios:cancel-run", args=[repo.run.pk]), follow=True)
    assert "has already finished" in response.content.decode()


def test_cancelling_needs_csrf_and_post(users, repo):
    run = SynthesisRun.objects.create(name="live", status=RunStatus.RUNNING)
    c = Client(enforce_csrf_checks=True)
    c.force_login(users["reviewer"])
    assert c.post(reverse("scenarios:cancel-run", args=[run.pk])).status_code == 403
    assert c.get(reverse("scenarios:cancel-run", args=[run.pk])).status_code == 405
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


# --- repository -------------------------------------------------------------------------------------


def _pair_ids(html: str, repo) -> set[str]:
    return {name for name, pair in (("accepted", repo.accepted), ("rejected", repo.rejected), ("unjudged", repo.unjudged))
            if f'href="{reverse("scenarios:pair", args=[pair.pk])}"' in html}


def test_the_repository_lists_pairs_with_skills_scores_and_counts(client_as, repo):
    html = client_as("viewer").get(reverse("scenarios:repository")).content.decode()
    assert _pair_ids(html, repo) == {"accepted", "rejected", "unjudged"}
    assert "<b>3</b> pairs" in html and "1 accepted · 1 rejected · 1 not judged yet" in html
    assert f'href="{reverse("skills:detail", args=[repo.skills["csv"].pk])}"' in html
    assert "5 / 4 / 4 / 5" in html and "4.50" in html and "0.820" in html


def test_the_repository_filters(client_as, repo):
    c = client_as("viewer")
    url = reverse("scenarios:repository")
    assert _pair_ids(c.get(url, {"verdict": "accepted"}).content.decode(), repo) == {"accepted"}
    assert _pair_ids(c.get(url, {"verdict": "unjudged"}).content.decode(), repo) == {"unjudged"}
    assert _pair_ids(c.get(url, {"min_score": "4"}).content.decode(), repo) == {"accepted"}
    assert _pair_ids(c.get(url, {"min_score": "2"}).content.decode(), repo) == {"accepted", "rejected"}
    assert _pair_ids(c.get(url, {"q": "sqlite revenue"}).content.decode(), repo) == {"accepted"}
    assert _pair_ids(c.get(url, {"run": repo.run.pk + 1000}).content.decode(), repo) == set()
    assert _pair_ids(c.get(url, {"run": repo.run.pk}).content.decode(), repo) == {"accepted", "rejected", "unjudged"}
    assert _pair_ids(c.get(url, {"category": "no-such-category"}).content.decode(), repo) == set()


def test_the_repository_filters_by_a_skill_category_or_its_family(client_as, repo):
    c = client_as("viewer")
    sqlite = repo.skills["sqlite"]
    assert sqlite.category is not None
    by_category = _pair_ids(c.get(reverse("scenarios:repository"), {"category": sqlite.category.slug}).content.decode(), repo)
    by_family = _pair_ids(c.get(reverse("scenarios:repository"), {"category": sqlite.category.parent.slug}).content.decode(), repo)
    assert {"accepted", "unjudged"} <= by_category <= by_family


def test_htmx_requests_get_only_the_results_fragment(client_as, repo):
    response = client_as("viewer").get(reverse("scenarios:repository"), {"verdict": "rejected", "run": repo.run.pk}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert 'id="results"' in html and "<html" not in html and _pair_ids(html, repo) == {"rejected"}
    # the export link follows the filters
    assert 'hx-swap-oob="true"' in html and f"run={repo.run.pk}&amp;verdict=rejected" in html


def test_the_repository_pages(client_as, repo, monkeypatch):
    from scenarios import views

    monkeypatch.setattr(views, "PAIRS_PAGE_SIZE", 2)
    html = client_as("viewer").get(reverse("scenarios:repository"), {"page": 2}).content.decode()
    assert "Page 2 of 2" in html and _pair_ids(html, repo) == {"unjudged"}  # by similarity, highest first


def test_pair_detail_shows_skills_hypotheses_evidence_and_judgement(client_as, repo):
    html = client_as("viewer").get(reverse("scenarios:pair", args=[repo.accepted.pk])).content.decode()
    assert f'href="{reverse("skills:detail", args=[repo.skills["sqlite"].pk])}"' in html
    assert "Deduplicate orders before the revenue report" in html
    assert "<b>cosine</b>: <code>0.82</code>" in html
    for label in ("Relevance", "Complementarity", "Non-redundancy", "Executability"):
        assert label in html
    assert "they chain" in html and "runs in a terminal" in html
    assert f'href="{reverse("scenarios:scenario", args=[repo.scenario.pk])}"' in html
    assert "You are a judge." in html and "other run&#x27;s call" not in html


def test_an_unjudged_pair_says_so(client_as, repo):
    html = client_as("viewer").get(reverse("scenarios:pair", args=[repo.unjudged.pk])).content.decode()
    assert "Not judged yet" in html


def test_unknown_records_are_404(client_as, repo):
    c = client_as("viewer")
    for name in ("scenarios:run", "scenarios:pair", "scenarios:scenario"):
        assert c.get(reverse(name, args=[999999])).status_code == 404


def test_scenario_detail_shows_dimensions_references_modules_and_calls(client_as, repo):
    html = client_as("viewer").get(reverse("scenarios:scenario", args=[repo.scenario.pk])).content.decode()
    for label in ("Goal", "Context", "Capability", "State", "Inputs/outputs and tools"):
        assert f"<dt>{label}</dt>" in html
    assert "Produce report.tsv with revenue per month" in html
    assert "<h1>Revenue</h1>" in html and "<strong>orders</strong>" in html  # rendered Markdown, sanitised
    assert "<li>dedupe the CSV</li>" in html and "<li>keep the header</li>" in html and "Write report.tsv" in html
    assert "Consistent" in html and "Outcome: report.tsv" in html
    assert "<summary>Skill analysis</summary>" in html and "<summary>Evolution and recovery</summary>" in html
    assert "reconstruct.dimensions@2" in html
    # both the pair's calls (named by skill keys) and the scenario's (named by id), not the other run's
    assert "You are a judge." in html and "Write the five dimensions" in html and "other run&#x27;s call" not in html
    assert "hypotheses please" not in html


# --- import and export --------------------------------------------------------------------------------


GOOD_LINE = {"pair_id": "ref-1", "skill_ids": ["csv-dedupe", "html-report-writer"], "skill_summaries": ["a", "b"],
             "scenario_texts": ["Turn a CSV into an HTML report"], "quality": {"overall_status": "ACCEPTED"}}


def test_a_viewer_cannot_import(client_as, repo):
    before = CandidatePair.objects.count()
    response = client_as("viewer").post(reverse("scenarios:import"), {
        "run": repo.run.pk, "file": SimpleUploadedFile("pairs.jsonl", jsonl_lines(GOOD_LINE))})
    assert response.status_code == 403 and CandidatePair.objects.count() == before


def test_a_reviewer_imports_pairs_and_sees_each_bad_line(client_as, corpus, users):
    run = SynthesisRun.objects.create(name="imports", created_by=users["reviewer"])
    body = jsonl_lines(GOOD_LINE, "{not json", {"skill_ids": ["only-one"]},
                       {**GOOD_LINE, "pair_id": "ref-2", "quality": {"overall_status": "REJECTED"}})
    response = client_as("reviewer").post(reverse("scenarios:import"), {"run": run.pk, "file": SimpleUploadedFile("pairs.jsonl", body)})
    html = response.content.decode()
    assert response.status_code == 200
    assert '<b>1</b><span>created</span>' in html and '<b>1</b><span>skipped</span>' in html
    assert '<td class="num">2</td><td>line 2: not valid JSON' in html
    assert '<td class="num">3</td><td>line 3: skill_ids must list two or three skills' in html
    pair = CandidatePair.objects.get(run=run)
    assert pair.source == PairSource.IMPORTED and pair.external_id == "ref-1"


def test_import_asks_for_a_run_and_a_file(client_as, repo):
    c = client_as("reviewer")
    assert "run: choose the run" in c.post(reverse("scenarios:import"), {"file": SimpleUploadedFile("p.jsonl", b"")}).content.decode()
    assert "file: choose a .jsonl" in c.post(reverse("scenarios:import"), {"run": repo.run.pk}).content.decode()


def test_import_needs_csrf(users, repo):
    c = Client(enforce_csrf_checks=True)
    c.force_login(users["reviewer"])
    response = c.post(reverse("scenarios:import"), {"run": repo.run.pk, "file": SimpleUploadedFile("p.jsonl", jsonl_lines(GOOD_LINE))})
    assert response.status_code == 403


def test_export_downloads_jsonl_honouring_run_and_verdict(client_as, repo):
    c = client_as("viewer")
    response = c.get(reverse("scenarios:export"), {"run": repo.run.pk})
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="facet-pairs-run-{repo.run.pk}-accepted.jsonl"'
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [line["quality"]["overall_status"] for line in lines] == ["ACCEPTED"]
    everything = c.get(reverse("scenarios:export"), {"run": repo.run.pk, "verdict": "all"})
    assert len(b"".join(everything.streaming_content).decode().splitlines()) == 3
    rejected = c.get(reverse("scenarios:export"), {"verdict": "rejected"})
    assert [json.loads(x)["quality"]["overall_status"] for x in b"".join(rejected.streaming_content).decode().splitlines()] == ["REJECTED"]
    assert c.get(reverse("scenarios:export"), {"verdict": "maybe"}).status_code == 400
    assert c.get(reverse("scenarios:export"), {"run": 999999}).status_code == 404


def test_the_repository_export_link_carries_the_filters(client_as, repo):
    html = client_as("viewer").get(reverse("scenarios:repository"), {"run": repo.run.pk}).content.decode()
    assert f'{reverse("scenarios:export")}?run={repo.run.pk}&amp;verdict=all' in html
