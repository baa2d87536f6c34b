"""An upload goes through a real Celery worker process on the configured broker."""
import io
import time
import zipfile

import pytest
from django.urls import reverse

from skills.models import IngestBatch, IngestBatchStatus, Skill

from .samples import CSV_SKILL, SQLITE_SKILL


# A worker process only sees committed rows.
@pytest.mark.django_db(transaction=True)
def test_an_uploaded_archive_is_ingested_by_a_worker(celery_worker, client, users, tmp_path):
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
        assert celery_worker.poll() is None, celery_worker.log_tail()
        time.sleep(0.5)
    assert batch.status == IngestBatchStatus.SUCCEEDED, (batch.message, celery_worker.log_tail())
    assert set(Skill.objects.values_list("name", flat=True)) == {"csv-dedupe", "sqlite-report"}
    page = client.get(reverse("skills:batch", args=[batch.pk])).content.decode()
    assert "pack/broken/SKILL.md" in page and "YAML" in page
