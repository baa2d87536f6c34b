"""Jobs started in the browser run: a reviewer clicks Validate and starts an export; while no worker
runs, every page says so instead of leaving them "Queued"; once a worker with beat starts (what
`facet serve` and `make demo` run beside the site), both finish and the pages show it."""
import os
import time

import pytest
from django.conf import settings

from tasks.models import Export, Validation, ValidationStatus
from tests.tasks.conftest import engine, make_run, skills  # noqa: F401 (fixtures)
from tests.tasks.test_list_detail import build_task_with_repairs
from tests.workers import WorkerProcess, worker_env

from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.django_db(transaction=True)]

FINISHED = (ValidationStatus.DONE, ValidationStatus.ERROR)


def test_a_validation_and_an_export_started_from_the_pages_finish_once_a_worker_runs(
        page, make_run, engine, tmp_path):  # noqa: F811
    task = build_task_with_repairs(make_run(""))
    login(page, "reviewer")
    page.goto(f"/tasks/{task.pk}/")
    page.click("text=Validate v3")
    page.wait_for_url(f"**/tasks/{task.pk}/")
    notice = page.locator(".worker-notice")
    assert "No worker is running: 1 job waits on the docker queue" in notice.inner_text()
    assert "facet worker" in notice.inner_text()
    validation = Validation.objects.filter(version__task=task).order_by("-id").first()
    assert validation.status == ValidationStatus.QUEUED

    worker = WorkerProcess(name=f"test-pages-{os.getpid()}", queues="default,docker", concurrency=2,
                           log_path=tmp_path / "worker.log", env=worker_env(settings.BROKER_DIR.parent))
    try:
        page.goto(f"/tasks/exports/new/?ids={task.pk}")
        page.click("button:has-text('Export 1 task')")
        page.wait_for_url("**/tasks/exports/*/")
        export = Export.objects.order_by("-id").first()
        # the export page polls its status; a worker picks the export up and it reads "Done"
        page.wait_for_selector("#progress .badge.st-done", timeout=240_000)
        export.refresh_from_db()
        assert export.status == "done", (export.status, export.error, worker.log_tail())

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            validation.refresh_from_db()
            if validation.status in FINISHED:
                break
            assert worker.poll() is None, worker.log_tail()
            time.sleep(1)
        assert validation.status in FINISHED, (validation.status, worker.log_tail())
        page.goto(f"/tasks/{task.pk}/?tab=validation")
        heading = page.locator(f"#validation-{validation.pk} h2").inner_text()
        assert "Queued" not in heading and "Running" not in heading
        assert page.locator(".worker-notice").count() == 0  # a worker was seen: no warning
    finally:
        worker.stop()
