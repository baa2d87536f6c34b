"""Review records made through the ORM (no Docker, no LLM) for the review tests and others: runs,
tasks with validated versions, the summary check, the newest audit entry, and running work in
threads for the PostgreSQL races. The fixtures run, task and selection are in conftest.py."""
import threading
import uuid

import pytest
from django.db import connection

from scenarios.models import RunStatus, SynthesisRun
from tasks import summary
from tasks.models import (
    AuditEvent,
    Environment,
    EnvironmentBuild,
    Step,
    Task,
    TaskStatus,
    TaskVersion,
    TestResult,
    Trial,
    Validation,
    ValidationStatus,
)


XSS = "<script>alert('pwned')</script>"


def make_run(name="run one") -> SynthesisRun:
    return SynthesisRun.objects.create(name=name, status=RunStatus.SUCCEEDED)


def add_version(task: Task, *, accepted: bool | None = True, instruction: str = "Sum the paid orders.",
                current: bool = True) -> TaskVersion:
    number = task.versions.count() + 1
    version = TaskVersion.objects.create(
        task=task, number=number, content_hash=f"sha256:{uuid.uuid4().hex}",
        files={"instruction.md": instruction, "task.toml": "version = '1.0'\n",
               "tests/test_outputs.py": "def test_report():\n    assert open('/app/out/report.csv').read()\n"})
    if accepted is not None:
        validation = Validation.objects.create(version=version, status=ValidationStatus.DONE, accepted=accepted,
                                               failure="" if accepted else "oracle_failed")
        oracle = Trial.objects.create(validation=validation, version=version, kind="oracle", reward=1.0 if accepted else 0.0,
                                      passed=accepted, failure="" if accepted else "oracle_failed")
        TestResult.objects.create(trial=oracle, name="test_report", outcome="passed" if accepted else "failed")
        Trial.objects.create(validation=validation, version=version, kind="nop", reward=0.0, passed=True)
    if current:
        Task.objects.filter(pk=task.pk).update(current_version=version)
        summary.refresh_summary(task)
    return version


def make_task(run=None, *, name="Paid orders per customer", status=TaskStatus.VALIDATED, version=True,
              accepted=True, first_build_ok=True, imported=False, instruction="Sum the paid orders.") -> Task:
    env = Environment.objects.create(status="built" if first_build_ok else "failed")
    EnvironmentBuild.objects.create(environment=env, attempt=1, outcome="succeeded" if first_build_ok else "build_failed")
    task = Task.objects.create(run=run, environment=env, name=name, status=status, step=Step.DONE, imported=imported)
    if version:
        add_version(task, accepted=accepted, instruction=instruction)
    task.refresh_from_db()
    return task


def refreshed(task: Task) -> Task:
    return Task.objects.select_related("current_version").get(pk=task.pk)


def assert_summary_agrees(task: Task):
    task = refreshed(task)
    assert task.review_state == summary.expected_summary(task)["review_state"]


def last_event(task=None, action="decide") -> AuditEvent:
    qs = AuditEvent.objects.filter(action=action)
    if task is not None:
        qs = qs.filter(task=task)
    return qs.order_by("-id").first()


postgres_only = pytest.mark.skipif(connection.vendor != "postgresql",
                                   reason="SQLite serialises every writer; the race needs PostgreSQL")


def _in_threads(n, work):
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def run(i):
        from django.db import connections

        try:
            barrier.wait()
            results[i] = work(i)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results, errors
