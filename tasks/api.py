from django.db import transaction
from django.shortcuts import get_object_or_404
from ninja import Router, Status
from ninja.errors import HttpError
from ninja.pagination import PageNumberPagination, paginate

from facet_site.pagination import LazyPage
from facet_site.roles import can_review
from scenarios.models import SynthesisRun

from . import services
from .models import Task, TaskStatus
from .schemas import FunnelRowOut, TaskDetailOut, TaskOut, ValidationOut

router = Router(tags=["tasks"])


def task_out(task: Task) -> dict:
    return {
        "id": task.id, "name": task.name, "status": task.status, "step": task.step, "strategy": task.strategy,
        "run_id": task.run_id, "scenario_id": task.scenario_id, "imported": task.imported,
        "current_version_id": task.current_version_id,
        "current_hash": task.current_version.content_hash if task.current_version_id else None,
        "discard_reason": task.discard_reason, "message": task.message, "created_at": task.created_at,
        "updated_at": task.updated_at,
    }


def validation_out(validation, with_trials: bool = True) -> dict:
    out = {f: getattr(validation, f) for f in ("id", "version_id", "status", "accepted", "failure", "reason",
                                               "image_tag", "build_cached", "build_seconds", "total_seconds",
                                               "static_findings", "created_at", "finished_at")}
    out["trials"] = []
    if with_trials:
        for trial in validation.trials.all():
            row = {f: getattr(trial, f) for f in ("id", "kind", "index", "reward", "passed", "failure", "reason",
                                                  "solution_exit_code", "seconds", "solution_seconds",
                                                  "verifier_seconds", "peak_memory_bytes", "fs_diff")}
            row["tests"] = [{"name": t.name, "outcome": t.outcome, "message": t.message} for t in trial.tests.all()]
            out["trials"].append(row)
    return out


def task_detail_out(task: Task) -> dict:
    out = task_out(task)
    env = task.environment
    out["environment"] = None if env is None else {
        "id": env.id, "status": env.status, "repair_count": env.repair_count, "image_tag": env.image_tag,
        "manifest": env.manifest,
        "builds": [{"attempt": b.attempt, "outcome": b.outcome, "reason": b.reason, "image_tag": b.image_tag,
                    "cached": b.cached, "seconds": b.seconds} for b in env.builds.all()],
    }
    out["versions"] = [{
        "id": v.id, "number": v.number, "content_hash": v.content_hash, "parent_id": v.parent_id,
        "created_by_repair_id": v.created_by_repair_id, "prompt_versions": v.prompt_versions,
        "created_at": v.created_at, "files": sorted(v.files),
        "validations": [validation_out(x) for x in v.validations.order_by("id").prefetch_related("trials__tests")],
    } for v in task.versions.order_by("number")]
    out["repairs"] = [{f: getattr(r, f) for f in ("id", "number", "artifact", "routed_by", "router_reason", "failure",
                                                  "failure_reason", "from_version_id", "to_version_id", "outcome")}
                      for r in task.repairs.order_by("number")]
    return out


@router.get("/tasks", response=list[TaskOut], summary="List tasks, newest first (filter by status and run)")
@paginate(PageNumberPagination, page_size=50)
def list_tasks(request, status: str = "", run: int | None = None):
    if status and status not in TaskStatus.values:
        raise HttpError(422, f"status: expected one of {', '.join(TaskStatus.values)}")
    qs = Task.objects.select_related("current_version").order_by("-id")
    if status:
        qs = qs.filter(status=status)
    if run is not None:
        qs = qs.filter(run_id=run)
    return LazyPage(qs, task_out)


@router.get("/tasks/{int:task_id}", response=TaskDetailOut,
            summary="One task with its environment builds, versions, validations, trials and repairs")
def get_task(request, task_id: int):
    return task_detail_out(get_object_or_404(Task.objects.select_related("current_version", "environment"), pk=task_id))


@router.post("/tasks/{int:task_id}/validate", response={202: ValidationOut},
             summary="Queue a validation of the task's current version (reviewers)")
def validate_task(request, task_id: int):
    if not can_review(request.auth):
        raise HttpError(403, "Only reviewers and admins may validate tasks.")
    task = get_object_or_404(Task, pk=task_id)
    if task.current_version_id is None:
        raise HttpError(409, f"task {task.pk} has no version yet")
    validation = queue_validation(task, user=request.auth)
    return Status(202, validation_out(validation, with_trials=False))


def queue_validation(task: Task, *, user=None):
    from . import jobs

    validation = services.request_validation(task.current_version, user=user)
    transaction.on_commit(lambda: jobs.docker_validate.delay(validation.pk))
    return validation


@router.get("/funnel", response=list[FunnelRowOut], summary="The task-construction funnel (Table 5), per run or overall")
def get_funnel(request, run: int | None = None):
    return services.funnel(get_object_or_404(SynthesisRun, pk=run) if run is not None else None)
