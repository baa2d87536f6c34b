"""Uploads and ingest cannot fill the disk (docs/operations.md): the upload limit is enforced
while the body streams in (the server stops reading), extraction areas go after each batch and
at worker start, upload temp files of killed requests go at worker start, and the ingest areas
together stay under a cap with a clear error."""
from __future__ import annotations

import io
import os
import time
import zipfile

import pytest
from django.test.client import ClientHandler

from facet_site import uploads
from skills import services
from skills.models import IngestBatch, IngestBatchStatus

from .skills.samples import CSV_SKILL, SQLITE_SKILL

pytestmark = pytest.mark.django_db
LIMIT = 100_000
BOUNDARY = "facetboundary"


class CountingBody(io.RawIOBase):
    """A request body handed out piece by piece, counting what the server read of it."""

    def __init__(self, data: bytes):
        self.data, self.read_bytes = data, 0

    def readable(self):
        return True

    def read(self, size=-1):
        end = len(self.data) if size is None or size < 0 else self.read_bytes + size
        piece = self.data[self.read_bytes:end]
        self.read_bytes += len(piece)
        return piece

    def readline(self, size=-1):
        return self.read(size)


class RecordingHandler(uploads.LimitedUploadHandler):
    largest_temp_file = 0

    def receive_data_chunk(self, raw_data, start):
        out = super().receive_data_chunk(raw_data, start)
        RecordingHandler.largest_temp_file = max(RecordingHandler.largest_temp_file, self.file.tell())
        return out


def multipart(file_bytes: bytes, name: str = "big.zip") -> bytes:
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            f"Content-Type: application/zip\r\n\r\n").encode() + file_bytes + f"\r\n--{BOUNDARY}--\r\n".encode()


def call(path: str, body: CountingBody, length: int, **headers):
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "SERVER_NAME": "testserver", "SERVER_PORT": "80",
               "wsgi.input": body, "wsgi.url_scheme": "http", "CONTENT_LENGTH": str(length),
               "CONTENT_TYPE": f"multipart/form-data; boundary={BOUNDARY}", **headers}
    # the test client's handler: the real request path, without closing the test's database connection
    response = ClientHandler()(environ)
    return response.status_code, response.content.decode()


@pytest.fixture
def small_limits(settings, tmp_path):
    settings.FACET_UPLOAD_MAX_BYTES = settings.FACET_INGEST_MAX_UPLOAD_BYTES = LIMIT
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 0  # every upload to a temp file, as big ones are
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path / "upload-tmp")
    os.mkdir(settings.FILE_UPLOAD_TEMP_DIR)
    settings.FILE_UPLOAD_HANDLERS = [f"{__name__}.RecordingHandler"]
    RecordingHandler.largest_temp_file = 0
    return settings


def test_an_upload_past_the_limit_is_stopped_while_it_streams(small_limits, token_for):
    data = multipart(os.urandom(8 * LIMIT))
    body = CountingBody(data)
    code, content = call("/api/skills/ingest", body, len(data), HTTP_AUTHORIZATION=f"Bearer {token_for('reviewer')}")
    assert code == 413
    assert "big.zip" in content and f"{LIMIT:,}" in content
    assert body.read_bytes < LIMIT + 3 * 65536 < len(data)  # the rest of the body was never read
    assert 0 < RecordingHandler.largest_temp_file <= LIMIT
    assert os.listdir(small_limits.FILE_UPLOAD_TEMP_DIR) == []  # its temp file is gone
    assert not IngestBatch.objects.exists()


def test_a_body_announced_past_the_limit_is_refused_before_it_is_read(small_limits, token_for):
    body = CountingBody(b"x" * 100)
    code, content = call("/api/skills/ingest", body, 1 << 30, HTTP_AUTHORIZATION=f"Bearer {token_for('reviewer')}")
    assert code == 413 and "1,073,741,824 bytes" in content
    assert body.read_bytes == 0


def test_the_upload_page_answers_413_with_the_limit(small_limits, client_as):
    from django.core.files.uploadedfile import SimpleUploadedFile

    response = client_as("reviewer").post("/skills/ingest/", {"archive": SimpleUploadedFile("pack.zip", b"z" * (2 * LIMIT))})
    assert response.status_code == 413
    assert "pack.zip" in response.content.decode() and "upload limit" in response.content.decode()


def test_an_upload_within_the_limit_still_goes_through(small_limits, client_as):
    from django.core.files.uploadedfile import SimpleUploadedFile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("pack/csv/SKILL.md", CSV_SKILL)
    response = client_as("reviewer").post("/skills/ingest/", {"archive": SimpleUploadedFile("pack.zip", buf.getvalue())})
    assert response.status_code == 302
    assert IngestBatch.objects.get().status == IngestBatchStatus.QUEUED


def _archive(path, n: int = 2):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pack/csv/SKILL.md", CSV_SKILL)
        z.writestr("pack/sqlite/SKILL.md", SQLITE_SKILL)
        for i in range(n):
            z.writestr(f"pack/padding-{i}.txt", "x" * 10_000)
    return path


def test_a_batch_removes_its_extraction_area_whatever_the_outcome(tmp_path, settings):
    batch = services.ingest_path(_archive(tmp_path / "pack.zip"))
    assert batch.status == IngestBatchStatus.SUCCEEDED and batch.summary["ingested"] == 2
    assert not services.ingest_area(batch).exists()
    assert list((settings.DATA_DIR / "ingest").iterdir()) == []


def test_the_ingest_areas_stay_under_their_cap_with_a_clear_error(tmp_path, settings):
    settings.FACET_INGEST_AREA_MAX_BYTES = 50_000
    other = settings.DATA_DIR / "ingest" / "batch-999"  # a running batch's area
    other.mkdir(parents=True)
    (other / "big").write_bytes(b"x" * 30_000)
    batch = services.ingest_path(_archive(tmp_path / "pack.zip", n=3))
    assert batch.status == IngestBatchStatus.FAILED
    assert "FACET_INGEST_AREA_MAX_BYTES" in batch.message and "pack.zip" in batch.message
    assert not services.ingest_area(batch).exists()
    (other / "big").unlink()
    settings.FACET_INGEST_AREA_MAX_BYTES = 40_000
    (other / "big").write_bytes(b"x" * 40_000)
    full = services.ingest_path(_archive(tmp_path / "again.zip"))
    assert full.status == IngestBatchStatus.FAILED and "the ingest area is full" in full.message


def test_a_starting_worker_removes_leftovers_but_not_a_running_batchs_area(settings, tmp_path):
    from django.utils import timezone

    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path / "upload-tmp")
    os.mkdir(settings.FILE_UPLOAD_TEMP_DIR)
    running = IngestBatch.objects.create(source_label="x", source_path="/x", status=IngestBatchStatus.RUNNING,
                                         heartbeat_at=timezone.now())
    finished = IngestBatch.objects.create(source_label="y", source_path="/y", status=IngestBatchStatus.SUCCEEDED)
    for b in (running, finished):
        services.ingest_area(b).mkdir(parents=True)
        (services.ingest_area(b) / "SKILL.md").write_text("x")
    (settings.DATA_DIR / "ingest" / "batch-12345").mkdir()  # a batch that no longer exists
    killed = tmp_path / "upload-tmp" / "tmpabc.upload.zip"
    killed.write_bytes(b"half an upload")
    old = time.time() - 2 * 3600
    os.utime(killed, (old, old))
    in_progress = tmp_path / "upload-tmp" / "tmpdef.upload.zip"
    in_progress.write_bytes(b"arriving")

    from facet_site import recovery

    removed = recovery.remove_leftovers()
    assert services.ingest_area(running).exists()
    assert not services.ingest_area(finished).exists()
    assert not (settings.DATA_DIR / "ingest" / "batch-12345").exists()
    assert not killed.exists() and in_progress.exists()
    assert len(removed) == 3
