"""JSON API of rollouts: batches (start, progress, cancel, resume), Harbor result import, and
trajectories with their turns and per-test results. Viewers read; starting, cancelling, resuming
and importing need a reviewer or an admin (403 otherwise). The analytics tables are tasks.analytics_api."""
from datetime import datetime

from django.db import transaction
from django.shortcuts import get_object_or_404
from ninja import Field, File, Form, Router, Schema, Status
from ninja.errors import HttpError
from ninja.files import UploadedFile
from ninja.pagination import paginate

from facet_site.pagination import PageNumberPagination  # bounded page numbers
from facet_site.roles import can_review

from . import rollouts, task_recovery
from .rollout_imports import ImportOutcome, ImportRefused, import_upload
from .models import RolloutBatch, Trajectory

# mounted at /rollouts and /trajectories by facet_site/api.py
batches_router = Router(tags=["rollouts"])
trajectories_router = Router(tags=["rollouts"])


class BatchIn(Schema):
    query: str = rollouts.DEFAULT_QUERY  # a task-list filter query string (tasks.filters.TaskFilter)
    model: str = ""  # default: the endpoint's model
    endpoint: str = ""  # a named LLM endpoint the operator configured (FACET_LLM_ENDPOINTS); "": default
    attempts: int = 3  # k
    max_turns: int = 30
    timeout_s: int = 900
    name: str = ""


class ProgressOut(Schema):
    total: int
    finished: int
    pending: int
    running: int
    waiting: int
    done: int
    error: int
    passed: int
    pass_rate: float | None = None
    percent: int


class BatchOut(Schema):
    id: int
    name: str
    source: str
    model: str
    agent: str
    attempts: int
    max_turns: int
    timeout_s: int
    status: str
    message: str
    selection: dict
    report: dict
    created_by: str | None = Field(None, alias="created_by.username")
    created_at: datetime
    finished_at: datetime | None = None
    progress: ProgressOut

    @staticmethod
    def resolve_progress(batch: RolloutBatch) -> dict:
        return rollouts.progress(batch)  # its "counts" are not part of the schema


class ImportProblemOut(Schema):
    job: str
    trial: str
    file: str
    field: str
    error: str


class ImportOut(Schema):
    batches: list[BatchOut]
    refused: list[ImportProblemOut]


class TestOut(Schema):
    name: str
    outcome: str
    message: str


class TurnOut(Schema):
    index: int
    analysis: str
    plan: str
    commands: list[dict]
    output: str
    state: str
    task_complete: bool
    seconds: float
    prompt_tokens: int
    completion_tokens: int
    llm_call_id: int | None = None


class TrajectoryOut(Schema):
    id: int
    batch_id: int
    task_id: int
    version_id: int | None = None
    attempt: int
    model: str
    agent: str
    status: str
    reward: float | None = None
    passed: bool | None = None
    failure: str
    message: str
    n_turns: int
    seconds: float
    prompt_tokens: int
    completion_tokens: int
    trial_id: int | None = None
    finished_at: datetime | None = None


class TrajectoryDetailOut(TrajectoryOut):
    tests: list[TestOut]
    turns: list[TurnOut]

    @staticmethod
    def resolve_tests(t: Trajectory):
        return t.trial.tests.all() if t.trial_id else []


def _require_reviewer(request, what: str):
    if not can_review(request.auth):
        raise HttpError(403, f"Only reviewers and admins may {what}.")


@batches_router.get("", response=list[BatchOut], summary="Rollout batches, newest first (built-in and imported)")
@paginate(PageNumberPagination, page_size=50)
def list_batches(request):
    return RolloutBatch.objects.select_related("created_by").order_by("-id")


@batches_router.post("", response={201: BatchOut}, summary="Start a rollout batch on a task filter (reviewers)")
def start_batch(request, payload: BatchIn):
    _require_reviewer(request, "start rollouts")
    try:
        with transaction.atomic():
            batch = rollouts.create_batch(query=payload.query, model=payload.model, attempts=payload.attempts,
                                          max_turns=payload.max_turns, timeout_s=payload.timeout_s,
                                          name=payload.name, user=request.auth,
                                          llm={"endpoint": payload.endpoint} if payload.endpoint else None)
            rollouts.start_batch(batch)
    except rollouts.RolloutError as exc:
        raise HttpError(422, str(exc)) from exc
    return Status(201, batch)


@batches_router.get("/{int:batch_id}", response=BatchOut, summary="One batch with its progress or import report")
def get_batch(request, batch_id: int):
    return get_object_or_404(RolloutBatch.objects.select_related("created_by"), pk=batch_id)


@batches_router.post("/{int:batch_id}/cancel", response=BatchOut, summary="Cancel a batch (reviewers)")
def cancel_batch(request, batch_id: int):
    _require_reviewer(request, "cancel rollouts")
    batch = get_object_or_404(RolloutBatch, pk=batch_id)
    if not rollouts.cancel_batch(batch, user=request.auth):
        raise HttpError(409, f"batch {batch.pk} had already finished ({batch.status})")
    batch.refresh_from_db()
    return batch


class ResumeOut(Schema):
    batch: int
    queued: int  # trajectories queued again


@batches_router.post("/{int:batch_id}/resume", response=ResumeOut,
                     summary="Queue again the trajectories that waited for Docker or whose worker died (reviewers)")
def resume_batch(request, batch_id: int):
    """What the batch page's Resume button does; 409 when the batch is over or was resumed within a lease."""
    _require_reviewer(request, "resume rollouts")
    batch = get_object_or_404(RolloutBatch, pk=batch_id)
    queued = task_recovery.resume_rollout_batch(batch)
    if queued is None:
        raise HttpError(409, f"batch {batch.pk} is {batch.status}: nothing to resume (over, or resumed a moment ago)")
    return {"batch": batch.pk, "queued": queued}


@batches_router.post("/import", response={201: ImportOut, 422: ImportOut},
              summary="Import an archive of Harbor job directories (reviewers); malformed jobs are refused whole")
def import_results(request, archive: UploadedFile = File(...), partial: bool = Form(False)):
    _require_reviewer(request, "import results")
    try:
        outcome = import_upload(archive, user=request.auth, allow_partial=partial)
    except ImportRefused as exc:
        outcome = ImportOutcome(batches=[], refused=[exc])
    body = {"batches": outcome.batches,
            "refused": [{"job": exc.job, **p} for exc in outcome.refused for p in exc.problems]}
    return Status(422 if outcome.refused else 201, body)


@batches_router.get("/{int:batch_id}/trajectories", response=list[TrajectoryOut], summary="A batch's trajectories")
@paginate(PageNumberPagination, page_size=100)
def batch_trajectories(request, batch_id: int):
    batch = get_object_or_404(RolloutBatch, pk=batch_id)
    return batch.trajectories.order_by("id")


@trajectories_router.get("/{int:trajectory_id}", response=TrajectoryDetailOut,
                  summary="One trajectory: every turn and the verifier's per-test result")
def get_trajectory(request, trajectory_id: int):
    return get_object_or_404(Trajectory.objects.select_related("trial"), pk=trajectory_id)
