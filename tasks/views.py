from pathlib import Path

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from facet_site.roles import can_review, require
from scenarios.models import SynthesisRun

from . import services
from .api import queue_validation
from .models import EnvironmentBuild, Task, TaskStatus, Trial, ValidationStatus

PAGE_SIZE = 50
TRIAL_LOGS = {"solution.log", "verifier.log", "result.json", "junit.xml", "reward.txt"}


def task_list(request):
    status = request.GET.get("status", "")
    run_id = request.GET.get("run", "")
    qs = Task.objects.select_related("current_version", "run").order_by("-id")
    if status in TaskStatus.values:
        qs = qs.filter(status=status)
    run = None
    if run_id.isdigit():
        run = SynthesisRun.objects.filter(pk=int(run_id)).first()
        qs = qs.filter(run_id=int(run_id))
    page = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "tasks/list.html", {
        "page": page, "status": status, "statuses": TaskStatus.choices, "run": run, "funnel": services.funnel(run),
    })


def task_detail(request, task_id: int):
    task = get_object_or_404(Task.objects.select_related("environment", "current_version", "run", "scenario"), pk=task_id)
    versions = list(task.versions.order_by("-number").prefetch_related("validations__trials__tests"))
    context = {
        "task": task, "versions": versions, "repairs": task.repairs.select_related("from_version", "to_version"),
        "builds": task.environment.builds.all() if task.environment_id else [],
        "running": task.status not in (TaskStatus.VALIDATED, TaskStatus.DISCARDED, TaskStatus.FAILED)
        or any(v.status in (ValidationStatus.QUEUED, ValidationStatus.RUNNING)
               for ver in versions for v in ver.validations.all()),
    }
    if request.htmx:
        response = render(request, "tasks/detail.html#status", context)
        if not context["running"]:
            response.status_code = 286  # nothing left to watch: htmx stops polling
        return response
    return render(request, "tasks/detail.html", context)


@require_POST
@require(can_review)
def validate(request, task_id: int):
    task = get_object_or_404(Task, pk=task_id)
    if task.current_version_id is None:
        messages.error(request, f"Task #{task.pk} has no version to validate yet.")
    else:
        validation = queue_validation(task, user=request.user)
        messages.success(request, f"Validation #{validation.pk} of v{task.current_version.number} is queued.")
    return redirect("tasks:detail", task_id=task.pk)


def _serve(path: str, root: str, name: str):
    """Only files inside the record's own log directory, never a path taken from the request."""
    if not path:
        raise Http404("no log kept")
    file = Path(path).resolve()
    if not file.is_file() or not file.is_relative_to(Path(root).resolve()):
        raise Http404("log not found")
    return FileResponse(open(file, "rb"), as_attachment=True, filename=name, content_type="text/plain")


def trial_log(request, trial_id: int, name: str):
    trial = get_object_or_404(Trial, pk=trial_id)
    if name not in TRIAL_LOGS:
        raise Http404("unknown log")
    return _serve(str(Path(trial.logs_path) / name), trial.logs_path, f"trial-{trial.pk}-{name}")


def build_log(request, build_id: int):
    build = get_object_or_404(EnvironmentBuild, pk=build_id)
    return _serve(build.log_path, str(Path(build.log_path).parent), f"build-{build.pk}.log")
