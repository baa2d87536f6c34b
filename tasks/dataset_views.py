"""Dataset pages: exports (create from any task-list filter, watch progress, download) and task
imports (upload an archive, watch progress, read what was refused and why). Thin: the
workflows are in tasks.exports and tasks.imports. Everyone signed in may read and download;
reviewers and admins create exports and imports."""
from pathlib import Path

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from facet_site.roles import can_review, require

from . import exports, imports
from .models import Export, ExportStatus, TaskImport

PAGE = 30
FINISHED = (ExportStatus.DONE, ExportStatus.FAILED)


def _percent(done: int, total: int, status: str) -> int:
    if status == ExportStatus.DONE:
        return 100
    return int(100 * done / total) if total else 0


# --- exports ------------------------------------------------------------------------------------


def export_list(request):
    page = Paginator(Export.objects.select_related("created_by"), PAGE).get_page(request.GET.get("page"))
    return render(request, "tasks/exports.html", {"page": page, "parts": exports.PART_LABELS})


def export_new(request):
    """GET: what the filter selects, and which parts to write. POST: create the export."""
    query = request.POST.get("query", "") if request.method == "POST" else request.GET.urlencode()
    f = exports.export_filter(query)
    if request.method == "POST":
        if not can_review(request.user):
            return render(request, "tasks/export_new.html", _new_context(query, f), status=403)
        try:
            export = exports.create_export(query=query, parts=request.POST.getlist("parts"), user=request.user,
                                            name=request.POST.get("name", "").strip())
        except exports.ExportError as exc:
            messages.error(request, str(exc))
            return render(request, "tasks/export_new.html", _new_context(query, f), status=400)
        messages.success(request, f"Export #{export.pk} is queued.")
        return redirect("tasks:export", export_id=export.pk)
    return render(request, "tasks/export_new.html", _new_context(query, f))


def _new_context(query: str, f) -> dict:
    return {"query": f.query_string(with_view=False), "describe": f.describe(), "errors": f.errors,
            "count": 0 if f.errors else exports.selection(query).count(), "parts": exports.PART_LABELS}


def export_detail(request, export_id: int):
    export = get_object_or_404(Export.objects.select_related("created_by"), pk=export_id)
    context = {"export": export, "finished": export.status in FINISHED, "parts": exports.PART_LABELS,
               "can_retry": can_review(request.user),
               "percent": _percent(export.done, export.total, export.status)}
    if request.htmx:
        response = render(request, "tasks/export.html#progress", context)
        if context["finished"]:
            response.status_code = 286  # htmx stops polling
        return response
    return render(request, "tasks/export.html", context)


@require_GET
def export_download(request, export_id: int):
    export = get_object_or_404(Export, pk=export_id)
    if export.status != ExportStatus.DONE or not export.archive_path:
        raise Http404("this export has no archive (yet)")
    file = Path(export.archive_path).resolve()
    # Only the archive the job wrote, in the exports directory: never a path from the request.
    if not file.is_file() or not file.is_relative_to(exports.archive_dir().resolve()):
        raise Http404("the archive is no longer on disk")
    response = FileResponse(open(file, "rb"), as_attachment=True, filename=f"facet-export-{export.pk}.tar.gz",
                            content_type="application/gzip")
    if export.archive_sha256:
        response["X-Content-SHA256"] = export.archive_sha256
    return response


# --- imports ------------------------------------------------------------------------------------


def import_list(request):
    """The upload form (reviewers) and the recent imports."""
    if request.method == "POST":
        return _upload(request)
    page = Paginator(TaskImport.objects.select_related("created_by"), PAGE).get_page(request.GET.get("page"))
    return render(request, "tasks/imports.html", {"page": page})


@require_POST
@require(can_review)
def _upload(request):
    uploaded = request.FILES.get("archive")
    if uploaded is None:
        messages.error(request, "archive: choose a .tar.gz, .tgz, .tar or .zip file to upload.")
        return redirect("tasks:imports")
    try:
        task_import = imports.save_upload(uploaded=uploaded, user=request.user,
                                           validate=request.POST.get("validate") == "on",
                                           image_map=imports.parse_image_map(request.POST.get("image_map", "")))
    except imports.ImportRefused as exc:
        messages.error(request, str(exc))
        return redirect("tasks:imports")
    messages.success(request, f"Import #{task_import.pk} is queued.")
    return redirect("tasks:import", import_id=task_import.pk)


def import_detail(request, import_id: int):
    task_import = get_object_or_404(TaskImport.objects.select_related("created_by"), pk=import_id)
    context = {"imp": task_import, "finished": task_import.status in FINISHED, "can_retry": can_review(request.user),
               "tasks": task_import.tasks.select_related("current_version").order_by("id")[:500]}
    if request.htmx:
        response = render(request, "tasks/import.html#progress", context)
        if context["finished"]:
            response.status_code = 286
        return response
    return render(request, "tasks/import.html", context)


@require_POST
@require(can_review)
def retry(request, kind: str, pk: int):
    """Retry a failed export or import, or resume one whose worker died (docs/operations.md)."""
    model, again, page = {"export": (Export, exports.retry_export, "tasks:export"),
                          "import": (TaskImport, imports.retry_import, "tasks:import")}[kind]
    job = get_object_or_404(model, pk=pk)
    if again(job):
        messages.success(request, f"{kind.capitalize()} #{pk} is queued again.")
    else:
        messages.error(request, f"{kind.capitalize()} #{pk} is {job.get_status_display().lower()}: only a failed one, "
                                "or one whose worker stopped answering, can be retried.")
    return redirect(page, pk)


urlpatterns = [
    path("exports/", export_list, name="exports"),
    path("exports/new/", export_new, name="export-new"),
    path("exports/<int:export_id>/", export_detail, name="export"),
    path("exports/<int:export_id>/download", export_download, name="export-download"),
    path("exports/<int:pk>/retry/", retry, {"kind": "export"}, name="export-retry"),
    path("imports/", import_list, name="imports"),
    path("imports/<int:import_id>/", import_detail, name="import"),
    path("imports/<int:pk>/retry/", retry, {"kind": "import"}, name="import-retry"),
]
