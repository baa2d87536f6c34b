"""Leases, the periodic resume job and the Retry / Resume buttons (docs/operations.md): every kind
of job whose worker died is found by its silent heartbeat and queued again, once; reviewers (and
only they) retry failed or stalled jobs from their pages, by POST with CSRF. The worker-kill
tests with real processes are in tests/test_recovery.py."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from facet_site import leases, recovery
from skills import services as ingest
from skills.models import IngestBatch, IngestBatchStatus
from tasks import exports, imports, rechecks
from tasks.models import (Export, ExportStatus, Recheck, RecheckStatus, Step, Task, TaskImport, Validation,
                          ValidationStatus)
from tasks.versions import create_version

pytestmark = pytest.mark.django_db


def long_ago():
    return timezone.now() - timedelta(hours=1)


def running_batch(*, heartbeat_at) -> IngestBatch:
    batch = IngestBatch.objects.create(source_label="corpus", source_path="/nowhere", status=IngestBatchStatus.RUNNING)
    IngestBatch.objects.filter(pk=batch.pk).update(heartbeat_at=heartbeat_at)
    batch.refresh_from_db()
    return batch


def test_a_batch_whose_heartbeat_stopped_is_queued_again_once(django_capture_on_commit_callbacks):
    dead = running_batch(heartbeat_at=long_ago())
    alive = running_batch(heartbeat_at=timezone.now())
    assert dead.is_stalled and not alive.is_stalled

    with django_capture_on_commit_callbacks() as queued:
        assert recovery.resume_stalled()["ingest"] == [dead.pk]
    assert len(queued) == 1
    dead.refresh_from_db(), alive.refresh_from_db()
    assert dead.status == IngestBatchStatus.QUEUED and "stopped answering" in dead.message
    assert alive.status == IngestBatchStatus.RUNNING
    # the next beat, a moment later, queues nothing again: the batch waits for its job
    assert recovery.resume_stalled()["ingest"] == []


def test_a_queued_batch_whose_message_was_lost_is_queued_again():
    lost = IngestBatch.objects.create(source_label="corpus", source_path="/nowhere")
    IngestBatch.objects.filter(pk=lost.pk).update(created_at=long_ago())
    fresh = IngestBatch.objects.create(source_label="corpus", source_path="/nowhere")
    assert ingest.resume_stalled() == [lost.pk]
    assert fresh.pk not in ingest.resume_stalled()


def test_a_claim_takes_over_only_a_stalled_batch():
    alive = running_batch(heartbeat_at=timezone.now())
    dead = running_batch(heartbeat_at=long_ago())
    assert not IngestBatch.claim(alive.pk)
    assert IngestBatch.claim(dead.pk)
    assert not IngestBatch.claim(dead.pk)  # its heartbeat is fresh again: one of two workers wins
    assert leases.seconds_left(IngestBatch, alive.pk, running=IngestBatchStatus.RUNNING) > 0


def test_the_heartbeat_stamps_the_row_while_the_job_runs(settings, transactional_db):
    import time

    settings.FACET_JOB_HEARTBEAT_S = 0.05
    batch = running_batch(heartbeat_at=long_ago())
    with leases.heartbeat(IngestBatch, batch.pk, running=IngestBatchStatus.RUNNING):
        time.sleep(0.5)
    batch.refresh_from_db()
    assert not batch.is_stalled


def test_stalled_exports_and_imports_are_queued_again_with_their_options(django_capture_on_commit_callbacks):
    export = Export.objects.create(name="e", status=ExportStatus.RUNNING)
    task_import = TaskImport.objects.create(source="x", status=ExportStatus.RUNNING, validate=True)
    Export.objects.filter(pk=export.pk).update(heartbeat_at=long_ago())
    TaskImport.objects.filter(pk=task_import.pk).update(heartbeat_at=long_ago())
    with django_capture_on_commit_callbacks() as queued:
        resumed = recovery.resume_stalled()
    assert resumed["exports"] == [export.pk] and resumed["imports"] == [task_import.pk]
    assert len(queued) == 2
    assert Export.objects.get().status == TaskImport.objects.get().status == ExportStatus.QUEUED
    from unittest import mock

    with mock.patch("tasks.jobs.run_import.delay_on_commit") as run_import:
        TaskImport.objects.filter(pk=task_import.pk).update(status=ExportStatus.FAILED)
        assert imports.retry_import(TaskImport.objects.get())
    run_import.assert_called_once_with(task_import.pk, True)  # the import validates, as first asked


def _version(name: str):
    task = Task.objects.create(name=name, imported=True, step=Step.DONE)
    return create_version(task, {"instruction.md": f"Do {name}.\n", "task.toml": 'version = "1.0"\n'})


def test_a_stalled_validation_requested_on_its_own_is_queued_again_but_not_constructions():
    mine = Validation.objects.create(version=_version("own"), status=ValidationStatus.RUNNING)
    building = _version("building")
    Task.objects.filter(pk=building.task_id).update(imported=False, step=Step.VALIDATE)
    constructions = Validation.objects.create(version=building, status=ValidationStatus.RUNNING)
    Validation.objects.filter(pk__in=[mine.pk, constructions.pk]).update(heartbeat_at=long_ago())
    assert recovery.resume_stalled()["validations"] == [mine.pk]
    assert Validation.objects.get(pk=mine.pk).status == ValidationStatus.QUEUED
    assert Validation.objects.get(pk=constructions.pk).status == ValidationStatus.RUNNING  # its run resumes it


def test_a_recheck_whose_worker_died_between_two_validations_is_queued_again():
    version = _version("flaky")
    recheck = Recheck.objects.create(version=version, kind="flakiness", runs=2, status=RecheckStatus.RUNNING)
    Validation.objects.create(version=version, recheck=recheck, status=ValidationStatus.DONE,
                              finished_at=long_ago())
    second = Validation.objects.create(version=version, recheck=recheck, status=ValidationStatus.QUEUED)
    assert rechecks.resume_queued() == 1
    # while its worker runs the second validation (a fresh heartbeat), nothing is queued again
    Validation.objects.filter(pk=second.pk).update(status=ValidationStatus.RUNNING, heartbeat_at=timezone.now())
    assert rechecks.resume_queued() == 0


# --- Retry / Resume on the pages ----------------------------------------------------------------


def test_the_batch_page_offers_retry_of_a_failed_batch_to_reviewers_only(client_as):
    batch = IngestBatch.objects.create(source_label="corpus", source_path="/nowhere",
                                       status=IngestBatchStatus.FAILED, message="boom")
    page = reverse("skills:batch", args=[batch.pk])
    retry = reverse("skills:batch-retry", args=[batch.pk])
    assert retry not in client_as("viewer").get(page).content.decode()
    assert client_as("viewer").post(retry).status_code == 403
    html = client_as("reviewer").get(page).content.decode()
    assert retry in html and ">Retry<" in html and "csrfmiddlewaretoken" in html
    assert client_as("reviewer").get(retry).status_code == 405  # never a change on GET
    response = client_as("reviewer").post(retry)
    assert response.status_code == 302
    batch.refresh_from_db()
    assert batch.status == IngestBatchStatus.QUEUED and batch.message == ""
    # a queued batch cannot be retried again
    client_as("reviewer").post(retry, follow=True)
    assert IngestBatch.objects.get(pk=batch.pk).status == IngestBatchStatus.QUEUED


def test_a_stalled_batch_says_so_and_offers_resume(client_as):
    batch = running_batch(heartbeat_at=long_ago())
    html = client_as("reviewer").get(reverse("skills:batch", args=[batch.pk])).content.decode()
    assert "stopped answering" in html and ">Resume<" in html


def test_the_retry_form_needs_a_csrf_token(users):
    from django.test import Client

    batch = IngestBatch.objects.create(source_label="c", source_path="/x", status=IngestBatchStatus.FAILED)
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["reviewer"])
    assert client.post(reverse("skills:batch-retry", args=[batch.pk])).status_code == 403
    assert IngestBatch.objects.get(pk=batch.pk).status == IngestBatchStatus.FAILED


@pytest.mark.parametrize("kind", ["export", "import"])
def test_failed_exports_and_imports_offer_retry_to_reviewers(client_as, kind):
    job = (Export.objects.create(name="e", status=ExportStatus.FAILED, error="disk full") if kind == "export"
           else TaskImport.objects.create(source="x", status=ExportStatus.FAILED))
    page = reverse(f"tasks:{kind}", args=[job.pk])
    retry = reverse(f"tasks:{kind}-retry", args=[job.pk])
    assert retry not in client_as("viewer").get(page).content.decode()
    assert client_as("viewer").post(retry).status_code == 403
    assert ">Retry<" in client_as("reviewer").get(page).content.decode()
    client_as("reviewer").post(retry)
    assert type(job).objects.get(pk=job.pk).status == ExportStatus.QUEUED


def test_a_validation_that_hit_an_infrastructure_error_is_validated_again_from_the_task_page(client_as):
    version = _version("infra")
    Task.objects.filter(pk=version.task_id).update(current_version=version)
    failed = Validation.objects.create(version=version, status=ValidationStatus.ERROR, reason="engine gone")
    retry = reverse("tasks:validation-retry", args=[failed.pk])
    assert client_as("viewer").post(retry).status_code == 403
    assert retry in client_as("reviewer").get(reverse("tasks:detail", args=[version.task_id])).content.decode()
    client_as("reviewer").post(retry)
    again = Validation.objects.exclude(pk=failed.pk).get()
    assert again.version == version and again.status == ValidationStatus.QUEUED


def test_exports_resume_after_a_dead_worker_from_scratch(settings):
    export = exports.create_export(name="all", queue=False)
    Export.objects.filter(pk=export.pk).update(status=ExportStatus.RUNNING, heartbeat_at=long_ago())
    done = exports.run_export(export.pk)  # a redelivered job takes over the stalled export
    assert done.status == ExportStatus.DONE and done.archive_bytes > 0


def test_the_cli_resumes_stalled_jobs_and_retries_one_record():
    from io import StringIO

    from django.core.management import CommandError, call_command

    dead = running_batch(heartbeat_at=long_ago())
    out = StringIO()
    call_command("resume", stdout=out)
    assert f"ingest: queued again #{dead.pk}" in out.getvalue()
    failed = IngestBatch.objects.create(source_label="c", source_path="/x", status=IngestBatchStatus.FAILED)
    call_command("resume", "ingest", str(failed.pk), stdout=out)
    assert IngestBatch.objects.get(pk=failed.pk).status == IngestBatchStatus.QUEUED
    with pytest.raises(CommandError, match="only a failed one"):
        call_command("resume", "ingest", str(failed.pk))
