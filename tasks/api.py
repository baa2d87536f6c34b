"""JSON API of tasks: the task list, one task with everything behind it (environment builds,
versions, validations, trials, repairs), queueing a validation, retrying a failed or stalled
construction, and the construction funnel. Viewers read; validating and retrying need a reviewer
or an admin (403 otherwise)."""
from django.shortcuts import get_object_or_404
from ninja import Router, Status
from ninja.errors import HttpError
from ninja.pagination import paginate

from facet_site.pagination import PageNumberPagination  # bounded page numbers
from facet_site.roles import can_review
from scenarios.models import SynthesisRun

from . import task_recovery
from .funnel import funnel
from .models import Task, TaskStatus
from .schemas import FunnelRowOut, TaskDetailOut, TaskOut, ValidationOut
from .validating import request_validation

# mounted at /tasks and /funnel by facet_site/api.py
tasks_router = Router(tags=["tasks"])
funnel_router = Router(tags=["tasks"])


@tasks_router.get("", response=list[TaskOut], summary="List tasks, newest first (filter by status and run)")
@paginate(PageNumberPagination, page_size=50)
def list_tasks(request, status: str = "", run: int | None = None):
    if status and status not in TaskStatus.values:
        raise HttpError(422, f"status: expected one of {', '.join(TaskStatus.values)}")
    qs = Task.objects.select_related("current_version").order_by("-id")
    if status:
        qs = qs.filter(status=status)
    if run is not None:
        qs = qs.filter(run_id=run)
    return qs


@tasks_router.get("/{int:task_id}", response=TaskDetailOut,
           summary="One task with its environment builds, versions, validations, trials and repairs")
def get_task(request, task_id: int):
    return get_object_or_404(Task.objects.select_related("current_version", "environment"), pk=task_id)


@tasks_router.post("/{int:task_id}/validate", response={202: ValidationOut},
            summary="Queue a validation of the task's current version (reviewers)")
def validate_task(request, task_id: int):
    if not can_review(request.auth):
        raise HttpError(403, "Only reviewers and admins may validate tasks.")
    task = get_object_or_404(Task.objects.select_related("current_version"), pk=task_id)
    if task.current_version_id is None:
        raise HttpError(409, f"task {task.pk} has no version yet")
    return Status(202, request_validation(task.current_version, user=request.auth))


@tasks_router.post("/{int:task_id}/retry", response={202: TaskOut},
                   summary="Retry a task whose construction failed, or resume one whose worker died (reviewers)")
def retry_task(request, task_id: int):
    """What the task page's Retry / Resume button does; 409 when nothing failed or stalled (a
    repeated call included)."""
    if not can_review(request.auth):
        raise HttpError(403, "Only reviewers and admins may retry tasks.")
    task = get_object_or_404(Task.objects.select_related("current_version"), pk=task_id)
    if not task_recovery.retry_construction(task=task, user=request.auth):
        raise HttpError(409, f"task {task.pk} is {task.status}: only a constructed task that failed, or one whose "
                             f"worker stopped answering or that waits for a Docker Engine, can be retried")
    return Status(202, task)


@funnel_router.get("", response=list[FunnelRowOut], summary="The task-construction funnel (Table 5), per run or overall")
def get_funnel(request, run: int | None = None):
    return funnel(get_object_or_404(SynthesisRun, pk=run) if run is not None else None)
