"""Images without a registry (issue 17), against the real Docker engine: a `docker save` archive loaded
with `facet images load` lets an imported task FROM that image validate; a task whose image is not
here waits for it (never Discarded) and runs once it is loaded; an exported generated task, rewritten
to a pinned public Debian base, builds from a local copy of that image."""
from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from facet_site.lib import docker_engine as de
from facet_site.lib import validation as val
from tasks import imports, validating
from tasks.models import Task, TaskStatus, Validation, ValidationStatus
from tests.tasks import dataset_fixtures as fx

pytestmark = pytest.mark.docker

PUBLIC_NAME = "python:3.11-slim"


def _untag(client, name: str) -> None:
    try:
        client.images.remove(name, noprune=True)
    except Exception:  # not there: nothing to undo
        pass


@pytest.fixture
def saved_python_image(engine, tmp_path):
    """facet's debootstrap base saved under the public name python:3.11-slim, as a user would bring
    it on a USB stick; the name is removed from the engine again so that loading is what brings it."""
    base = engine.images.get("facet-base:bookworm")
    existing = de.find_image(engine, PUBLIC_NAME)
    if existing is not None and existing.id != base.id:
        pytest.skip(f"the engine has a real {PUBLIC_NAME}; not touching it")
    base.tag(PUBLIC_NAME)
    archive = tmp_path / "python-3.11-slim.tar"
    subprocess.run(["docker", "save", PUBLIC_NAME, "-o", str(archive)], check=True, timeout=300)
    packed = tmp_path / "python-3.11-slim.tar.gz"
    with open(archive, "rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst)
    archive.unlink()
    _untag(engine, PUBLIC_NAME)
    yield packed
    _untag(engine, PUBLIC_NAME)


def test_a_task_waits_for_its_image_then_validates_once_the_image_is_loaded(db, tmp_path, engine,
                                                                            saved_python_image, capsys):
    fx.multimedia_task(tmp_path / "ds" / "audio")
    imp = imports.import_path(tmp_path / "ds", validate=True)
    task = Task.objects.get()
    [validation] = Validation.objects.filter(version=task.current_version)
    assert imp.imported == 1

    validating.run_requested(validation.pk)
    validation.refresh_from_db()
    task.refresh_from_db()
    assert validation.status == ValidationStatus.WAITING_FOR_IMAGE
    assert task.status == TaskStatus.WAITING_FOR_IMAGE  # not Discarded: the task did nothing wrong
    assert PUBLIC_NAME in task.message and "facet images load" in task.message

    call_command("images", "load", str(saved_python_image))
    out = capsys.readouterr().out
    assert f"Loaded {saved_python_image}: {PUBLIC_NAME}" in out and "queued again" in out
    call_command("images", "list")
    assert PUBLIC_NAME in capsys.readouterr().out

    validation.refresh_from_db()
    assert validation.status == ValidationStatus.QUEUED
    validating.run_requested(validation.pk)
    validation.refresh_from_db()
    task.refresh_from_db()
    assert validation.accepted, (validation.failure, validation.reason)
    assert task.status == TaskStatus.VALIDATED


def test_a_mapped_image_validates_on_the_local_stand_in(db, tmp_path, engine, settings):
    settings.FACET_IMAGE_MAP = {"example.invalid/never-pulled:1": "facet-base:bookworm"}
    root = fx.multimedia_task(tmp_path / "ds" / "mapped")
    (root / "environment" / "Dockerfile").write_text(
        "FROM example.invalid/never-pulled:1\nWORKDIR /app\nCOPY in.wav cover.png /app/\n")
    imports.import_path(tmp_path / "ds", validate=True)
    [validation] = Validation.objects.all()
    validating.run_requested(validation.pk)
    validation.refresh_from_db()
    assert validation.accepted, (validation.failure, validation.reason)


def test_a_dockerfile_lint_names_the_image_and_the_fix():
    [problem] = de.lint_dockerfile("FROM ubuntu:24.04\n", "facet-base:bookworm")
    assert "ubuntu:24.04" in problem and "facet images load" in problem and "FACET_IMAGE_MAP" in problem


def test_an_exported_generated_task_builds_from_a_local_copy_of_its_public_base(db, tmp_path, engine, settings):
    public = settings.FACET_EXPORT_BASE_IMAGE
    tagged = de.find_image(engine, public) is None
    if tagged:
        engine.images.get("facet-base:bookworm").tag(public)  # the "locally loaded copy"
    request_cleanup = (lambda: _untag(engine, public)) if tagged else (lambda: None)
    try:
        _build_exported(db, tmp_path, engine, public)
    finally:
        request_cleanup()


def _build_exported(db, tmp_path, engine, public):
    from tasks import exports

    fx.facet_made_task()
    target = tmp_path / "out.tar.gz"
    exports.write_archive(target, query="status=validated", parts=["harbor"])
    shutil.unpack_archive(target, tmp_path / "x")
    [task_dir] = (tmp_path / "x" / "facet-dataset" / "tasks").iterdir()
    assert f"FROM {public}" in (task_dir / "environment" / "Dockerfile").read_text()
    report = val.validate_task(engine, task_dir, base_image=public, max_partials=0,
                               owner=f"{os.uname().nodename}:{os.getpid()}:tasks")
    assert report.accepted, (report.failure, report.reason)
    assert report.trial("oracle").reward == 1.0 and report.trial("nop").reward == 0.0
