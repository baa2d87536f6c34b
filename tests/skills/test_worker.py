"""An upload goes through a real Celery worker process on the configured broker."""
import io
import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest
from django.db import connection
from django.urls import reverse

from skills.models import BatchStatus, IngestBatch, Skill
from tests.conftest import REPO

from .samples import CSV_SKILL, SQLITE_SKILL


def database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    user = s.get("USER") or ""
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    at = "@" if user else ""
    return f"postgres://{user}{password}{at}{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


@pytest.fixture
def worker(tmp_path):
    env = dict(os.environ, DATABASE_URL=database_url(), DJANGO_SETTINGS_MODULE="facet_site.test_settings")
    log = open(tmp_path / "worker.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "facet_site.cli", "worker", "-Q", "default", "-c", "1", "-l", "INFO",
         "-n", f"test-{os.getpid()}@%h"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()


# A worker process only sees committed rows.
@pytest.mark.django_db(transaction=True)
def test_an_uploaded_archive_is_ingested_by_a_worker(worker, client, users, tmp_path):
    from django.core.files.uploadedfile import SimpleUploadedFile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("pack/csv/SKILL.md", CSV_SKILL)
        z.writestr("pack/sqlite/SKILL.md", SQLITE_SKILL)
        z.writestr("pack/broken/SKILL.md", "---\nname: [oops\n---\n")
    client.force_login(users["reviewer"])
    response = client.post(reverse("skills:upload"), {"archive": SimpleUploadedFile("pack.zip", buf.getvalue())})
    batch = IngestBatch.objects.get()
    assert response["Location"] == reverse("skills:batch", args=[batch.pk])

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        batch.refresh_from_db()
        if batch.is_finished:
            break
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        time.sleep(0.5)
    assert batch.status == BatchStatus.SUCCEEDED, (batch.message, (tmp_path / "worker.log").read_text()[-3000:])
    assert set(Skill.objects.values_list("name", flat=True)) == {"csv-dedupe", "sqlite-report"}
    page = client.get(reverse("skills:batch", args=[batch.pk])).content.decode()
    assert "pack/broken/SKILL.md" in page and "YAML" in page
