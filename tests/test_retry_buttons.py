"""Retry and Resume from the pages and the API for what had no button yet (docs/operations.md,
"Retry and resume by hand"): a synthesis run that finished with failed items, a run that stopped
moving. Each button is offered only on a failed or stalled record and only to reviewers and
admins, is a POST with CSRF, acts once however often it is clicked, and says what it did. The
worker tests run the resumed and the retried run to the end on a real `facet worker`."""
from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scenarios.models import CandidatePair, LLMCall, RunSkill, RunStatus, Scenario, Stage, SynthesisRun, WorkStatus
from scenarios.run_config import DEFAULT_CONFIG
from skills import services as skill_services
from tests.conftest import DEMO_CORPUS
from tests.tasks.conftest import skills  # noqa: F401  (a fixture)
from tests.workers import wait_for_run


def long_ago():
    return timezone.now() - timedelta(hours=2)  # past the default stale window of 30 minutes


def make_run(skills, *, status, stage, item_status=WorkStatus.DONE, claimed_at=None, **fields) -> SynthesisRun:
    run = SynthesisRun.objects.create(name="nightly", status=status, stage=stage, config=DEFAULT_CONFIG, **fields)
    for skill in skills:
        RunSkill.objects.create(run=run, skill=skill, status=item_status, claimed_at=claimed_at)
    SynthesisRun.objects.filter(pk=run.pk).update(created_at=long_ago())
    run.refresh_from_db()
    return run


def failed_run(skills) -> SynthesisRun:
    """Finished, with one hypotheses item and one judge item failed (the endpoint answered nonsense)."""
    run = make_run(skills, status=RunStatus.SUCCEEDED, stage=Stage.DONE, started_at=long_ago(),
                   finished_at=long_ago(), message="Finished with 2 failed items.",
                   retrieval_claimed_at=long_ago())
    RunSkill.objects.filter(run=run, skill=skills[0]).update(status=WorkStatus.FAILED, error="InvalidOutput: not JSON")
    CandidatePair.objects.create(run=run, skill_set=",".join(str(s.pk) for s in skills), scenario_text="x",
                                 status=WorkStatus.FAILED, error="PermanentLLMError: 400")
    return run


def stalled_run(skills) -> SynthesisRun:
    """Running, its hypotheses claimed by a worker that died two hours ago."""
    return make_run(skills, status=RunStatus.RUNNING, stage=Stage.HYPOTHESES, item_status=WorkStatus.RUNNING,
                    claimed_at=long_ago(), started_at=long_ago())


def page_of(run):
    return reverse("scenarios:run", args=[run.pk])


def retry_url(run):
    return reverse("scenarios:retry-run", args=[run.pk])


def flash(response) -> str:
    return " ".join(str(m) for m in response.context["messages"])


# --- who sees the button, and where ----------------------------------------------------------------


def test_a_run_with_failed_items_offers_retry_to_reviewers_only(client_as, skills):
    run = failed_run(skills)
    assert retry_url(run) not in client_as("viewer").get(page_of(run)).content.decode()
    assert client_as("viewer").post(retry_url(run)).status_code == 403
    assert RunSkill.objects.filter(run=run, status=WorkStatus.FAILED).count() == 1
    html = client_as("reviewer").get(page_of(run)).content.decode()
    assert retry_url(run) in html and "Retry the 2 failed items" in html and "csrfmiddlewaretoken" in html
    assert client_as("reviewer").get(retry_url(run)).status_code == 405  # never a change on GET


def test_a_stalled_run_says_so_and_offers_resume(client_as, skills):
    run = stalled_run(skills)
    html = client_as("reviewer").get(page_of(run)).content.decode()
    assert "No sign of life since" in html and ">Resume<" in html
    viewer_html = client_as("viewer").get(page_of(run)).content.decode()
    assert "No sign of life since" in viewer_html and ">Resume<" not in viewer_html
    # the polled progress fragment carries the button too
    fragment = client_as("reviewer").get(page_of(run), HTTP_HX_REQUEST="true").content.decode()
    assert retry_url(run) in fragment


def test_runs_that_move_finished_cleanly_or_were_cancelled_offer_nothing(client_as, skills):
    moving = make_run(skills, status=RunStatus.RUNNING, stage=Stage.HYPOTHESES, item_status=WorkStatus.RUNNING,
                      claimed_at=timezone.now(), started_at=long_ago())
    clean = make_run(skills, status=RunStatus.SUCCEEDED, stage=Stage.DONE)
    cancelled = failed_run(skills)
    SynthesisRun.objects.filter(pk=cancelled.pk).update(status=RunStatus.CANCELLED)
    for run in (moving, clean, cancelled):
        html = client_as("reviewer").get(page_of(run)).content.decode()
        assert retry_url(run) not in html and "No sign of life" not in html
        response = client_as("reviewer").post(retry_url(run), follow=True)
        assert "nothing to retry or resume" in flash(response)
    assert RunSkill.objects.get(run=moving, skill=skills[0]).status == WorkStatus.RUNNING
    assert SynthesisRun.objects.get(pk=cancelled.pk).status == RunStatus.CANCELLED


def test_the_retry_form_needs_a_csrf_token(users, skills):
    run = failed_run(skills)
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["reviewer"])
    assert client.post(retry_url(run)).status_code == 403
    assert SynthesisRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED


# --- what a click does -----------------------------------------------------------------------------


def test_retry_queues_the_failed_items_again_from_their_earliest_stage_once(client_as, skills,
                                                                            django_capture_on_commit_callbacks):
    run = failed_run(skills)
    with django_capture_on_commit_callbacks() as queued:
        response = client_as("reviewer").post(retry_url(run), follow=True)
    assert "2 items that failed are queued again" in flash(response)
    assert len(queued) == 1  # one advance of the run
    run.refresh_from_db()
    assert (run.status, run.stage, run.finished_at) == (RunStatus.RUNNING, Stage.HYPOTHESES, None)
    assert run.retrieval_claimed_at is None  # retrieval runs again over the new hypotheses
    assert "Retrying 2 failed items (by reviewer-user)" in run.message
    assert not RunSkill.objects.filter(run=run, status=WorkStatus.FAILED).exists()
    pair = CandidatePair.objects.get(run=run)
    assert (pair.status, pair.error) == (WorkStatus.PENDING, "")
    # the page now shows a running run without the button
    assert retry_url(run) not in client_as("reviewer").get(page_of(run)).content.decode()

    with django_capture_on_commit_callbacks() as again:  # the double click
        response = client_as("reviewer").post(retry_url(run), follow=True)
    assert "nothing to retry or resume" in flash(response) and again == []


def test_resume_gives_stale_items_back_and_advances_the_run_once(client_as, skills,
                                                                 django_capture_on_commit_callbacks):
    run = stalled_run(skills)
    with django_capture_on_commit_callbacks() as queued:
        response = client_as("reviewer").post(retry_url(run), follow=True)
    assert f"Run #{run.pk} is resumed" in flash(response) and "2 items" in flash(response)
    assert len(queued) == 1
    assert set(RunSkill.objects.filter(run=run).values_list("status", flat=True)) == {WorkStatus.PENDING}
    assert "No sign of life" not in client_as("reviewer").get(page_of(run)).content.decode()
    with django_capture_on_commit_callbacks() as again:
        response = client_as("reviewer").post(retry_url(run), follow=True)
    assert "nothing to retry or resume" in flash(response) and again == []


def test_the_api_retries_and_resumes_runs_for_reviewers(client, token_for, skills,
                                                        django_capture_on_commit_callbacks):
    run = failed_run(skills)
    url = f"/api/runs/{run.pk}/retry"
    viewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('viewer')}"}
    reviewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('reviewer')}"}
    assert client.post(url, **viewer).status_code == 403
    with django_capture_on_commit_callbacks() as queued:
        response = client.post(url, **reviewer)
    assert response.status_code == 200 and len(queued) == 1
    body = response.json()
    assert body["status"] == "running" and body["stage"] == "hypotheses"
    again = client.post(url, **reviewer)
    assert again.status_code == 409 and "nothing to retry or resume" in again.json()["detail"]

    stalled = stalled_run(skills)
    response = client.post(f"/api/runs/{stalled.pk}/retry", **reviewer)
    assert response.status_code == 200 and response.json()["status"] == "running"
    assert client.post(f"/api/runs/{stalled.pk}/retry", **reviewer).status_code == 409
    assert client.post("/api/runs/999999/retry", **reviewer).status_code == 404


# --- on a real worker --------------------------------------------------------------------------------


def _record_cassette(tmp_path, services):
    """A run recorded over HTTP from the scripted model: the cassette later runs replay."""
    from demo import scripted_llm

    skill_services.ingest_path(DEMO_CORPUS, label="demo")
    cassette = tmp_path / "full.cassette.jsonl"
    with scripted_llm.ScriptedLLMServer() as url:
        recorded = services.start_run(name="record", enqueue=False, trusted=True, config={
            "limits": {"max_pairs": 6}, "construction": {"auto": False},
            "llm": {"provider": "openai", "base_url": url, "model": "scripted", "record": str(cassette)}})
        recorded = services.execute_run_inline(recorded.pk)
    assert recorded.status == RunStatus.SUCCEEDED and recorded.message == "Finished."
    return recorded, cassette


def _failures(run) -> list:
    from scenarios import services

    return services.run_progress(run)["errors"]


def _same_repository(run, recorded):
    assert (sorted(CandidatePair.objects.filter(run=run).values_list("skill_set", "verdict"))
            == sorted(CandidatePair.objects.filter(run=recorded).values_list("skill_set", "verdict")))
    assert (Scenario.objects.filter(run=run, consistency="consistent").count()
            == Scenario.objects.filter(run=recorded, consistency="consistent").count())


@pytest.mark.django_db(transaction=True)
def test_a_failed_judge_stage_is_retried_from_the_page_and_finishes_on_a_worker(tmp_path, users, celery_worker):
    from scenarios import services

    recorded, full = _record_cassette(tmp_path, services)
    # the endpoint answered the hypotheses, then refused every judge call: replay knows no judge answer
    partial = tmp_path / "replay.cassette.jsonl"
    lines = full.read_text().splitlines()
    partial.write_text("".join(line + "\n" for line in lines if json.loads(line)["stage"] == "hypotheses"))
    run = services.start_run(name="judge down", enqueue=False, trusted=True, config={
        "limits": {"max_pairs": 6}, "construction": {"auto": False},
        "llm": {"provider": "replay", "cassette": str(partial), "model": "scripted"}})
    run = services.execute_run_inline(run.pk)
    failed = CandidatePair.objects.filter(run=run, status=WorkStatus.FAILED).count()
    assert run.status == RunStatus.SUCCEEDED and failed > 0 and f"{failed} failed item" in run.message

    partial.write_text(full.read_text())  # the endpoint is back
    client = Client()
    client.force_login(users["reviewer"])
    assert f"Retry the {failed} failed item" in client.get(page_of(run)).content.decode()
    response = client.post(retry_url(run), follow=True)
    assert f"{failed} items that failed are queued again" in flash(response)
    assert "nothing to retry" in flash(client.post(retry_url(run), follow=True))  # the double click

    run = wait_for_run(run, celery_worker, timeout=300)
    assert (run.status, run.message) == (RunStatus.SUCCEEDED, "Finished."), _failures(run)
    _same_repository(run, recorded)
    # each pair judged once by the model after the retry; the hypotheses were not asked again
    assert (LLMCall.objects.filter(run=run, stage="judge", status__in=["ok", "cached", "replayed"]).count()
            == CandidatePair.objects.filter(run=run).count())
    assert (LLMCall.objects.filter(run=run, stage="hypotheses").count()
            == LLMCall.objects.filter(run=recorded, stage="hypotheses").count())


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_first_message_was_lost_is_resumed_from_the_page_and_finishes(tmp_path, users, celery_worker):
    from demo import scripted_llm
    from scenarios import services

    skill_services.ingest_path(DEMO_CORPUS, label="demo")
    with scripted_llm.ScriptedLLMServer() as url:  # the worker calls it over HTTP
        run = services.start_run(name="lost", enqueue=False, trusted=True, config={  # no message ever sent
            "limits": {"max_pairs": 6}, "construction": {"auto": False},
            "llm": {"provider": "openai", "base_url": url, "model": "scripted"}})
        SynthesisRun.objects.filter(pk=run.pk).update(created_at=long_ago())
        time.sleep(3)
        assert SynthesisRun.objects.get(pk=run.pk).status == RunStatus.QUEUED  # the worker knows nothing of it

        client = Client()
        client.force_login(users["reviewer"])
        html = client.get(page_of(run)).content.decode()
        assert "No sign of life since" in html and ">Resume<" in html
        assert f"Run #{run.pk} is resumed" in flash(client.post(retry_url(run), follow=True))
        assert "nothing to retry" in flash(client.post(retry_url(run), follow=True))
        run = wait_for_run(run, celery_worker, timeout=300)

    assert (run.status, run.message) == (RunStatus.SUCCEEDED, "Finished."), _failures(run)
    skills = RunSkill.objects.filter(run=run)
    assert skills.count() >= 2 and not skills.exclude(status=WorkStatus.DONE).exists()
    # each skill's hypotheses asked for once: the resumed run was handed out once
    assert LLMCall.objects.filter(run=run, stage="hypotheses").count() == skills.count()
    pairs = CandidatePair.objects.filter(run=run)
    assert pairs.exists() and not pairs.exclude(status=WorkStatus.DONE).exists()
    assert Scenario.objects.filter(run=run, consistency="consistent").exists()


# --- a task's construction ---------------------------------------------------------------------------


def constructed_task(*, status, step, message="", claimed_at=None, imported=False):
    from tasks.models import Task
    from tasks.versions import create_version

    run = SynthesisRun.objects.create(name="built", status=RunStatus.SUCCEEDED, stage=Stage.DONE, config=DEFAULT_CONFIG)
    task = Task.objects.create(name="revenue report", run=run, status=status, step=step, message=message,
                               claimed_at=claimed_at, imported=imported)
    version = create_version(task, {"instruction.md": f"Write report {task.pk}.\n", "task.toml": 'version = "1.0"\n'})
    Task.objects.filter(pk=task.pk).update(current_version=version)
    task.refresh_from_db()
    return task


def test_a_task_whose_construction_failed_goes_back_to_its_step_once(client_as, users,
                                                                     django_capture_on_commit_callbacks):
    from tasks.models import Step, Task, TaskStatus

    task = constructed_task(status=TaskStatus.FAILED, step=Step.DONE,
                            message="artifacts: InvalidOutput: the model's answer was not JSON")
    page, retry = reverse("tasks:detail", args=[task.pk]), reverse("tasks:construction-retry", args=[task.pk])
    assert retry not in client_as("viewer").get(page).content.decode()
    assert client_as("viewer").post(retry).status_code == 403
    html = client_as("reviewer").get(page).content.decode()
    assert retry in html and ">Retry<" in html
    assert client_as("reviewer").get(retry).status_code == 405

    with django_capture_on_commit_callbacks() as queued:
        response = client_as("reviewer").post(retry, follow=True)
    assert "goes back to instruction, solution, verifier" in flash(response)
    assert len(queued) == 1  # the run's construction advance, which queues the step
    task.refresh_from_db()
    assert (task.status, task.step, task.claimed_at) == (TaskStatus.CONSTRUCTING, Step.ARTIFACTS, None)
    assert "Retrying artifacts (by reviewer-user)" in task.message
    with django_capture_on_commit_callbacks() as again:
        response = client_as("reviewer").post(retry, follow=True)
    assert "nothing to retry or resume" in flash(response) and again == []
    assert Task.objects.get(pk=task.pk).step == Step.ARTIFACTS


def test_a_task_failed_by_its_validations_infrastructure_error_is_validated_again(db):
    from tasks import task_recovery
    from tasks.models import Step, TaskStatus

    task = constructed_task(status=TaskStatus.FAILED, step=Step.DONE, message="validation: engine gone mid-trial")
    assert task_recovery.retry_construction(task=task) == task_recovery.RETRY
    assert (task.status, task.step) == (TaskStatus.VALIDATING, Step.VALIDATE)


def test_a_task_whose_step_worker_died_is_resumed_once_and_a_live_one_is_left_alone(
        client_as, django_capture_on_commit_callbacks):
    from tasks.models import Step, TaskStatus

    dead = constructed_task(status=TaskStatus.CONSTRUCTING, step=Step.BUILD, claimed_at=long_ago())
    alive = constructed_task(status=TaskStatus.CONSTRUCTING, step=Step.BUILD, claimed_at=timezone.now())
    html = client_as("reviewer").get(reverse("tasks:detail", args=[dead.pk])).content.decode()
    assert "Its worker stopped answering" in html and ">Resume<" in html
    assert ">Resume<" not in client_as("reviewer").get(reverse("tasks:detail", args=[alive.pk])).content.decode()
    with django_capture_on_commit_callbacks() as queued:
        response = client_as("reviewer").post(reverse("tasks:construction-retry", args=[dead.pk]), follow=True)
    assert f"Task #{dead.pk} is resumed" in flash(response) and len(queued) == 1
    dead.refresh_from_db()
    assert dead.claimed_at is None and dead.step == Step.BUILD
    with django_capture_on_commit_callbacks() as again:
        client_as("reviewer").post(reverse("tasks:construction-retry", args=[dead.pk]))
        client_as("reviewer").post(reverse("tasks:construction-retry", args=[alive.pk]))
    assert again == []
    alive.refresh_from_db()
    assert alive.claimed_at is not None


def test_an_imported_task_offers_no_construction_retry(client_as):
    from tasks.models import Step, TaskStatus

    task = constructed_task(status=TaskStatus.FAILED, step=Step.DONE, message="validation: x", imported=True)
    retry = reverse("tasks:construction-retry", args=[task.pk])
    assert retry not in client_as("reviewer").get(reverse("tasks:detail", args=[task.pk])).content.decode()
    assert "nothing to retry or resume" in flash(client_as("reviewer").post(retry, follow=True))


def test_the_api_retries_a_failed_task_for_reviewers(client, token_for):
    from tasks.models import Step, TaskStatus

    task = constructed_task(status=TaskStatus.FAILED, step=Step.DONE, message="build: DockerEngineError: boom")
    url = f"/api/tasks/{task.pk}/retry"
    assert client.post(url, HTTP_AUTHORIZATION=f"Bearer {token_for('viewer')}").status_code == 403
    response = client.post(url, HTTP_AUTHORIZATION=f"Bearer {token_for('reviewer')}")
    assert response.status_code == 202 and (response.json()["status"], response.json()["step"]) == ("constructing", "build")
    assert client.post(url, HTTP_AUTHORIZATION=f"Bearer {token_for('reviewer')}").status_code == 409


# --- the API for the buttons the pages had already ---------------------------------------------------


def test_the_api_retries_failed_ingests_exports_and_imports_once(client, token_for,
                                                                 django_capture_on_commit_callbacks):
    from skills.models import IngestBatch, IngestBatchStatus
    from tasks.models import Export, ExportStatus, TaskImport

    batch = IngestBatch.objects.create(source_label="c", source_path="/nowhere", status=IngestBatchStatus.FAILED)
    export = Export.objects.create(name="e", status=ExportStatus.FAILED, error="disk full")
    task_import = TaskImport.objects.create(source="x", status=ExportStatus.FAILED)
    viewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('viewer')}"}
    reviewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('reviewer')}"}
    for url in (f"/api/skills/ingest/{batch.pk}/retry", f"/api/exports/{export.pk}/retry",
                f"/api/imports/{task_import.pk}/retry"):
        assert client.post(url, **viewer).status_code == 403
        with django_capture_on_commit_callbacks() as queued:
            response = client.post(url, **reviewer)
        assert response.status_code == 202 and response.json()["status"] == "queued" and len(queued) == 1, url
        with django_capture_on_commit_callbacks() as again:
            second = client.post(url, **reviewer)
        assert second.status_code == 409 and "can be retried" in second.json()["detail"] and again == [], url
    assert client.post("/api/exports/999999/retry", **reviewer).status_code == 404


def open_batch_with_pending_trajectories(n=2):
    from tasks.models import RolloutBatch, RolloutBatchStatus, Step, TaskStatus, Trajectory

    task = constructed_task(status=TaskStatus.VALIDATED, step=Step.DONE)
    batch = RolloutBatch.objects.create(name="open", status=RolloutBatchStatus.RUNNING)
    for attempt in range(n):  # their messages were lost with a filesystem-broker worker
        Trajectory.objects.create(batch=batch, task=task, version=task.current_version, attempt=attempt)
    return batch


def test_the_api_resumes_an_open_rollout_batch_once_and_not_a_finished_one(client, token_for,
                                                                           django_capture_on_commit_callbacks):
    from tasks.models import RolloutBatch, RolloutBatchStatus

    batch = open_batch_with_pending_trajectories()
    done = RolloutBatch.objects.create(name="done", status=RolloutBatchStatus.DONE)
    reviewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('reviewer')}"}
    assert client.post(f"/api/rollouts/{batch.pk}/resume",
                       HTTP_AUTHORIZATION=f"Bearer {token_for('viewer')}").status_code == 403
    with django_capture_on_commit_callbacks() as queued:
        response = client.post(f"/api/rollouts/{batch.pk}/resume", **reviewer)
    assert response.status_code == 200 and response.json() == {"batch": batch.pk, "queued": 2} and len(queued) == 2
    with django_capture_on_commit_callbacks() as again:
        assert client.post(f"/api/rollouts/{batch.pk}/resume", **reviewer).status_code == 409
    assert again == []
    assert client.post(f"/api/rollouts/{done.pk}/resume", **reviewer).status_code == 409


def test_a_double_click_on_a_rollout_batchs_resume_queues_its_trajectories_once(client_as,
                                                                               django_capture_on_commit_callbacks):
    batch = open_batch_with_pending_trajectories(3)
    url = reverse("tasks:rollout-resume", args=[batch.pk])
    assert client_as("viewer").post(url).status_code == 403
    with django_capture_on_commit_callbacks() as queued:
        first = client_as("reviewer").post(url, follow=True)
        second = client_as("reviewer").post(url, follow=True)
    assert "3 trajectories of batch" in flash(first) and "resumed a moment ago" in flash(second)
    assert len(queued) == 3


def test_a_double_click_on_retry_of_a_validations_infrastructure_error_validates_once(client_as):
    from tasks.models import Step, TaskStatus, Validation, ValidationStatus

    task = constructed_task(status=TaskStatus.VALIDATED, step=Step.DONE)
    failed = Validation.objects.create(version=task.current_version, status=ValidationStatus.ERROR, reason="gone")
    retry = reverse("tasks:validation-retry", args=[failed.pk])
    client_as("reviewer").post(retry)
    response = client_as("reviewer").post(retry, follow=True)
    assert "was retried already" in flash(response)
    assert Validation.objects.filter(version=task.current_version).exclude(pk=failed.pk).count() == 1


def test_the_cli_retries_a_run_and_a_task_as_the_buttons_do(skills):
    from io import StringIO

    from django.core.management import CommandError, call_command

    from tasks.models import Step, Task, TaskStatus

    run = failed_run(skills)
    task = constructed_task(status=TaskStatus.FAILED, step=Step.DONE, message="build: boom")
    out = StringIO()
    call_command("resume", "run", str(run.pk), stdout=out)
    call_command("resume", "task", str(task.pk), stdout=out)
    assert f"run #{run.pk} is queued again" in out.getvalue() and f"task #{task.pk} is queued again" in out.getvalue()
    assert SynthesisRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
    assert Task.objects.get(pk=task.pk).step == Step.BUILD
    with pytest.raises(CommandError, match="can be retried"):
        call_command("resume", "run", str(run.pk), stdout=out)


def test_a_rechecks_try_again_now_queues_it_once(client_as, django_capture_on_commit_callbacks):
    from tasks import rechecks
    from tasks.models import Recheck, RecheckStatus, Step, TaskStatus, Validation, ValidationStatus

    task = constructed_task(status=TaskStatus.VALIDATED, step=Step.DONE)
    recheck = rechecks.request_recheck(task.current_version, kind="flakiness", runs=2)
    Validation.objects.filter(recheck=recheck).update(status=ValidationStatus.WAITING_FOR_DOCKER,
                                                      reason="no Docker engine answers")
    url = reverse("tasks:recheck-resume", args=[recheck.pk])
    assert client_as("viewer").post(url).status_code == 403
    with django_capture_on_commit_callbacks() as queued:
        first = client_as("reviewer").post(url, follow=True)
        second = client_as("reviewer").post(url, follow=True)
    assert "back on the Docker queue" in flash(first) and "queued already" in flash(second)
    assert len(queued) == 1
    assert set(Validation.objects.filter(recheck=recheck).values_list("status", flat=True)) == {ValidationStatus.QUEUED}
    Recheck.objects.filter(pk=recheck.pk).update(status=RecheckStatus.DONE)
    assert "over already" in flash(client_as("reviewer").post(url, follow=True))
