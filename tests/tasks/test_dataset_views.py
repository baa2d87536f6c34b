"""Dataset pages and API: who may create, read and download exports and imports, progress by
htmx polling, and what a user sees of an import's problems."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tasks import exports, imports, jobs
from tasks.models import Export, ExportStatus, TaskImport
from tests.html_safety import active_content
from tests.tasks.dataset_records import TB20, _task_dir


@pytest.fixture
def no_jobs(monkeypatch):
    """Jobs are queued on commit; the tests run them by hand where they need the result."""
    queued = []
    monkeypatch.setattr(jobs.run_export, "delay", lambda *a: queued.append(("export", a)))
    monkeypatch.setattr(jobs.run_import, "delay", lambda *a: queued.append(("import", a)))
    return queued


def _archive_of(tmp_path: Path, *dirs: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for d in dirs:
            tf.add(d, arcname=f"ds/{d.name}")
    return buf.getvalue()


def test_every_dataset_page_needs_a_login(client, db):
    for url in ("/tasks/exports/", "/tasks/exports/new/", "/tasks/imports/"):
        response = client.get(url)
        assert response.status_code == 302 and "login" in response["Location"]
    assert client.get("/api/exports").status_code == 401


def test_viewers_read_and_download_but_cannot_export_or_import(world, client_as, tmp_path):  # noqa: F811
    export = exports.run_export(exports.create_export(queue=False).pk)
    viewer = client_as("viewer")
    page = viewer.get("/tasks/exports/")
    assert page.status_code == 200 and f"/tasks/exports/{export.pk}/download" in page.content.decode()
    new = viewer.get("/tasks/exports/new/?review=approved")
    assert "Export 1 task" in new.content.decode() and "Viewers can download exports" in new.content.decode()
    assert viewer.post("/tasks/exports/new/", {"query": "", "parts": ["harbor"]}).status_code == 403
    download = viewer.get(f"/tasks/exports/{export.pk}/download")
    assert download.status_code == 200 and download["Content-Type"] == "application/gzip"
    assert b"".join(download.streaming_content) == Path(export.archive_path).read_bytes()
    assert f'filename="facet-export-{export.pk}.tar.gz"' in download["Content-Disposition"]
    assert viewer.get("/tasks/imports/").status_code == 200
    upload = io.BytesIO(b"x")
    upload.name = "tasks.tar.gz"
    assert viewer.post("/tasks/imports/", {"archive": upload}).status_code == 403
    assert Export.objects.count() == 1 and not TaskImport.objects.exists()


def test_a_reviewer_exports_a_filtered_list_and_watches_it_finish(world, client_as, no_jobs,  # noqa: F811
                                                                  django_capture_on_commit_callbacks):
    reviewer = client_as("reviewer")
    page = reviewer.get("/tasks/exports/new/?status=validated&sort=-name")
    body = page.content.decode()
    assert "Export 3 tasks" in body and "status=validated" in body
    with django_capture_on_commit_callbacks(execute=True):
        response = reviewer.post("/tasks/exports/new/", {"query": "status=validated", "parts": ["harbor", "manifest"],
                                                         "name": "validated ones"})
    export = Export.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/tasks/exports/{export.pk}/"
    assert (export.query, export.options["parts"], export.name) == ("status=validated", ["harbor", "manifest"],
                                                                   "validated ones")
    assert no_jobs == [("export", (export.pk,))]
    polling = reviewer.get(f"/tasks/exports/{export.pk}/", HTTP_HX_REQUEST="true")
    assert polling.status_code == 200 and 'hx-trigger="every 2s"' in polling.content.decode()
    assert "waiting for a worker" in polling.content.decode()
    exports.run_export(export.pk)
    done = reviewer.get(f"/tasks/exports/{export.pk}/", HTTP_HX_REQUEST="true")
    assert done.status_code == 286 and "hx-trigger" not in done.content.decode()
    assert "Download facet-export-" in done.content.decode() and "<html" not in done.content.decode()
    full = reviewer.get(f"/tasks/exports/{export.pk}/").content.decode()
    assert "3 of 3 tasks" in full and export.query in full


def test_an_export_page_with_a_mistaken_filter_says_so(world, client_as):  # noqa: F811
    reviewer = client_as("reviewer")
    page = reviewer.get("/tasks/exports/new/?review=aproved").content.decode()
    assert "review: unknown value &#x27;aproved&#x27;" in page and "<button" not in page.split("</header>")[1]
    assert reviewer.post("/tasks/exports/new/", {"query": "review=aproved"}).status_code == 400
    assert not Export.objects.exists()


def test_an_unfinished_or_failed_export_has_nothing_to_download(world, client_as):  # noqa: F811
    export = exports.create_export(queue=False)
    assert client_as("viewer").get(f"/tasks/exports/{export.pk}/download").status_code == 404
    Export.objects.filter(pk=export.pk).update(status=ExportStatus.DONE, archive_path="/etc/passwd")
    assert client_as("viewer").get(f"/tasks/exports/{export.pk}/download").status_code == 404


def test_a_reviewer_uploads_tasks_and_sees_what_was_refused_and_why(db, client_as, tmp_path, no_jobs,
                                                                     django_capture_on_commit_callbacks):
    good = _task_dir(tmp_path / "src", "good", TB20)
    bad = _task_dir(tmp_path / "src", "bad<img src=x onerror=alert(1)>", 'version = "1.0"\n[verifier\n')
    upload = io.BytesIO(_archive_of(tmp_path, good, bad))
    upload.name = "mine.tar.gz"
    reviewer = client_as("reviewer")
    with django_capture_on_commit_callbacks(execute=True):
        response = reviewer.post("/tasks/imports/", {"archive": upload})
    task_import = TaskImport.objects.get()
    assert response["Location"] == f"/tasks/imports/{task_import.pk}/"
    assert task_import.source == "upload:mine.tar.gz" and no_jobs == [("import", (task_import.pk, False))]
    imports.run_import(task_import.pk)
    page = reviewer.get(f"/tasks/imports/{task_import.pk}/", HTTP_HX_REQUEST="true")
    body = page.content.decode()
    assert page.status_code == 286
    assert "1 imported, 0 skipped (already here), 1 problem" in body
    assert "invalid TOML" in body and "<code>task.toml</code>" in body
    assert active_content(body) == [] and "bad&lt;img src=x onerror=alert(1)&gt;" in body
    assert ">good</a>" in body


def test_uploads_that_are_not_archives_are_refused(db, client_as):
    upload = io.BytesIO(b"hello")
    upload.name = "notes.txt"
    response = client_as("reviewer").post("/tasks/imports/", {"archive": upload}, follow=True)
    assert "upload a .tar.gz, .tgz, .tar or .zip archive" in response.content.decode()
    assert not TaskImport.objects.exists()


# --- API -------------------------------------------------------------------------------------


def test_the_api_creates_exports_for_reviewers_only(world, client, token_for, no_jobs,  # noqa: F811
                                                    django_capture_on_commit_callbacks):
    viewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('viewer')}"}
    reviewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('reviewer')}"}
    assert client.post("/api/exports", {"query": ""}, content_type="application/json", **viewer).status_code == 403
    bad = client.post("/api/exports", {"query": "review=aproved"}, content_type="application/json", **reviewer)
    assert bad.status_code == 422 and "aproved" in bad.json()["detail"]
    with django_capture_on_commit_callbacks(execute=True):
        made = client.post("/api/exports", {"query": "status=validated", "parts": ["manifest"]},
                           content_type="application/json", **reviewer)
    assert made.status_code == 202
    data = made.json()
    assert (data["status"], data["parts"], data["download_url"]) == ("queued", ["manifest"], None)
    assert client.get(f"/api/exports/{data['id']}/archive", **viewer).status_code == 409
    exports.run_export(data["id"])
    shown = client.get(f"/api/exports/{data['id']}", **viewer).json()
    assert shown["status"] == "done" and shown["summary"]["tasks"] == 3 and len(shown["archive_sha256"]) == 64
    archive = client.get(shown["download_url"], **viewer)
    assert archive.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(b"".join(archive.streaming_content))) as tf:
        assert "facet-dataset/manifest.parquet" in tf.getnames()
    assert [e["id"] for e in client.get("/api/exports", **viewer).json()["items"]] == [data["id"]]


def test_the_api_imports_uploaded_tasks(db, client, token_for, tmp_path, no_jobs, django_capture_on_commit_callbacks):
    good = _task_dir(tmp_path / "src", "good", TB20)
    viewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('viewer')}"}
    reviewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('reviewer')}"}

    def upload():
        f = io.BytesIO(_archive_of(tmp_path, good))
        f.name = "tasks.tar.gz"
        return f

    assert client.post("/api/imports", {"archive": upload()}, **viewer).status_code == 403
    with django_capture_on_commit_callbacks(execute=True):
        made = client.post("/api/imports", {"archive": upload(), "validate": "true"}, **reviewer)
    assert made.status_code == 202 and no_jobs == [("import", (made.json()["id"], True))]
    imports.run_import(made.json()["id"])
    shown = client.get(f"/api/imports/{made.json()['id']}", **viewer).json()
    assert (shown["status"], shown["imported"], shown["problems"], len(shown["task_ids"])) == ("done", 1, [], 1)
    bad = io.BytesIO(b"x")
    bad.name = "x.exe"
    assert client.post("/api/imports", {"archive": bad}, **reviewer).status_code == 422
