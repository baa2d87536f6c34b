"""JSON API for datasets in and out, mounted by facet_site/api.py: create an export of a task
filter and follow it, download its archive; upload tasks to import and follow the import; retry
either when it failed or stalled. Everyone signed in reads and downloads; reviewers and admins
create and retry."""
from datetime import datetime
from pathlib import Path

from django.http import FileResponse
from django.shortcuts import get_object_or_404
from ninja import Field, File, Form, Router, Schema, Status
from ninja.errors import HttpError
from ninja.files import UploadedFile
from ninja.pagination import paginate

from facet_site.pagination import PageNumberPagination  # bounded page numbers
from facet_site.roles import can_review

from . import exports, imports
from .models import Export, ExportStatus, TaskImport

# mounted at /exports and /imports by facet_site/api.py
exports_router = Router(tags=["datasets"])
imports_router = Router(tags=["datasets"])


class ExportIn(Schema):
    query: str = ""  # the task list's query string; empty: the approved tasks
    parts: list[str] = list(exports.PARTS)
    name: str = ""


class ExportOut(Schema):
    id: int
    name: str
    query: str
    parts: list[str]
    status: str
    done: int
    total: int
    archive_sha256: str
    archive_bytes: int
    error: str
    summary: dict
    download_url: str | None = None
    created_by: str | None = Field(None, alias="created_by.username")
    created_at: datetime
    finished_at: datetime | None = None

    @staticmethod
    def resolve_parts(export: Export) -> list[str]:
        return (export.options or {}).get("parts", [])

    @staticmethod
    def resolve_download_url(export: Export) -> str | None:
        return f"/api/exports/{export.pk}/archive" if export.status == ExportStatus.DONE else None


class ProblemOut(Schema):
    task: str | None = None
    file: str | None = None
    field: str | None = None
    line: int | None = None
    error: str


class ImportOut(Schema):
    id: int
    source: str
    status: str
    imported: int
    skipped: int
    problems: list[ProblemOut]
    image_map: dict[str, str]
    task_ids: list[int]
    created_by: str | None = Field(None, alias="created_by.username")
    created_at: datetime
    finished_at: datetime | None = None

    @staticmethod
    def resolve_task_ids(task_import: TaskImport) -> list[int]:
        return sorted(task_import.tasks.values_list("id", flat=True))


def _reviewer(request) -> None:
    if not can_review(request.auth):
        raise HttpError(403, "Only reviewers and admins may create or retry exports and imports.")


@exports_router.post("", response={202: ExportOut}, summary="Export the tasks a task-list filter selects (reviewers)")
def create_export(request, payload: ExportIn):
    _reviewer(request)
    try:
        export = exports.create_export(query=payload.query, parts=payload.parts, user=request.auth, name=payload.name)
    except exports.ExportError as exc:
        raise HttpError(422, str(exc)) from None
    return Status(202, export)


@exports_router.get("", response=list[ExportOut], summary="Exports, newest first")
@paginate(PageNumberPagination, page_size=50)
def list_exports(request):
    return Export.objects.select_related("created_by").order_by("-id")


@exports_router.get("/{int:export_id}", response=ExportOut, summary="One export: progress, summary, checksum")
def get_export(request, export_id: int):
    return get_object_or_404(Export.objects.select_related("created_by"), pk=export_id)


@exports_router.post("/{int:export_id}/retry", response={202: ExportOut},
                     summary="Retry a failed export, or resume one whose worker stopped answering (reviewers)")
def retry_export(request, export_id: int):
    """What the export page's Retry / Resume button does; 409 unless it failed or stalled."""
    _reviewer(request)
    return Status(202, _retry(get_object_or_404(Export, pk=export_id), exports.retry_export, "export"))


def _retry(job, again, kind: str):
    if not again(job):
        raise HttpError(409, f"{kind} {job.pk} is {job.status}: only a failed one, or one whose worker stopped "
                             f"answering, can be retried")
    job.refresh_from_db()
    return job


@exports_router.get("/{int:export_id}/archive", summary="Download the export's .tar.gz")
def download_export(request, export_id: int):
    export = get_object_or_404(Export, pk=export_id)
    if export.status != ExportStatus.DONE or not export.archive_path:
        raise HttpError(409, f"export {export.pk} is {export.status}; no archive yet")
    file = Path(export.archive_path).resolve()
    if not file.is_file() or not file.is_relative_to(exports.archive_dir().resolve()):
        raise HttpError(410, f"export {export.pk}: the archive is no longer on disk")
    return FileResponse(open(file, "rb"), as_attachment=True, filename=f"facet-export-{export.pk}.tar.gz",
                        content_type="application/gzip")


@imports_router.post("", response={202: ImportOut},
             summary="Import Harbor or Terminal-Bench 1.x tasks from an uploaded archive (reviewers)")
def create_import(request, archive: File[UploadedFile], queue_validation: bool = Form(False, alias="validate"),
                  image_map: str = Form("", description="IMAGE=LOCAL pairs, comma- or line-separated: validate "
                                                         "tasks FROM IMAGE on the local image LOCAL")):
    _reviewer(request)
    try:
        task_import = imports.save_upload(uploaded=archive, user=request.auth, validate=queue_validation,
                                          image_map=imports.parse_image_map(image_map))
    except imports.ImportRefused as exc:
        raise HttpError(422, str(exc)) from None
    return Status(202, task_import)


@imports_router.get("", response=list[ImportOut], summary="Task imports, newest first")
@paginate(PageNumberPagination, page_size=50)
def list_imports(request):
    return TaskImport.objects.select_related("created_by").order_by("-id")


@imports_router.post("/{int:import_id}/retry", response={202: ImportOut},
                     summary="Retry a failed import, or resume one whose worker stopped answering (reviewers)")
def retry_import(request, import_id: int):
    """What the import page's Retry / Resume button does; 409 unless it failed or stalled."""
    _reviewer(request)
    return Status(202, _retry(get_object_or_404(TaskImport, pk=import_id), imports.retry_import, "import"))


@imports_router.get("/{int:import_id}", response=ImportOut,
            summary="One import: counts, per-task problems (file, field, line) and the tasks it created")
def get_import(request, import_id: int):
    return get_object_or_404(TaskImport.objects.select_related("created_by"), pk=import_id)
