"""JSON API of rollouts and analytics: batches (start, progress, cancel), Harbor result import,
trajectories with their turns and per-test results, and every analytics table. Viewers read;
starting, cancelling and importing need a reviewer or an admin (403 otherwise)."""
from datetime import datetime

from django.db import transaction
from django.shortcuts import get_object_or_404
from ninja import File, Form, Router, Schema, Status
from ninja.errors import HttpError
from ninja.files import UploadedFile
from ninja.pagination import PageNumberPagination, paginate

from facet_site.pagination import LazyPage
from facet_site.roles import can_review

from . import analytics as an
from . import rollouts
from .models import LabelKind, RolloutBatch, Trajectory

router = Router(tags=["rollouts"])


class BatchIn(Schema):
    query: str = rollouts.DEFAULT_QUERY  # a task-list filter query string (tasks.filters.TaskFilter)
    model: str = ""  # default: the configured model
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
    created_by: str | None = None
    created_at: datetime
    finished_at: datetime | None = None
    progress: ProgressOut


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


def batch_out(batch: RolloutBatch) -> dict:
    out = {f: getattr(batch, f) for f in ("id", "name", "source", "model", "agent", "attempts", "max_turns",
                                          "timeout_s", "status", "message", "selection", "report", "created_at",
                                          "finished_at")}
    out["created_by"] = batch.created_by.get_username() if batch.created_by_id else None
    out["progress"] = {k: v for k, v in rollouts.progress(batch).items() if k != "counts"}
    return out


def _require_reviewer(request, what: str):
    if not can_review(request.auth):
        raise HttpError(403, f"Only reviewers and admins may {what}.")


@router.get("/rollouts", response=list[BatchOut], summary="Rollout batches, newest first (built-in and imported)")
@paginate(PageNumberPagination, page_size=50)
def list_batches(request):

    return LazyPage(RolloutBatch.objects.select_related("created_by").order_by("-id"), batch_out)


@router.post("/rollouts", response={201: BatchOut}, summary="Start a rollout batch on a task filter (reviewers)")
def start_batch(request, payload: BatchIn):
    _require_reviewer(request, "start rollouts")
    try:
        with transaction.atomic():
            batch = rollouts.create_batch(query=payload.query, model=payload.model, attempts=payload.attempts,
                                          max_turns=payload.max_turns, timeout_s=payload.timeout_s,
                                          name=payload.name, user=request.auth)
            rollouts.start_batch(batch)
    except rollouts.RolloutError as exc:
        raise HttpError(422, str(exc)) from exc
    return Status(201, batch_out(batch))


@router.get("/rollouts/{int:batch_id}", response=BatchOut, summary="One batch with its progress or import report")
def get_batch(request, batch_id: int):
    return batch_out(get_object_or_404(RolloutBatch, pk=batch_id))


@router.post("/rollouts/{int:batch_id}/cancel", response=BatchOut, summary="Cancel a batch (reviewers)")
def cancel_batch(request, batch_id: int):
    _require_reviewer(request, "cancel rollouts")
    batch = get_object_or_404(RolloutBatch, pk=batch_id)
    if not rollouts.cancel_batch(batch, user=request.auth):
        raise HttpError(409, f"batch {batch.pk} had already finished ({batch.status})")
    batch.refresh_from_db()
    return batch_out(batch)


@router.post("/rollouts/import", response={201: ImportOut, 422: ImportOut},
             summary="Import an archive of Harbor job directories (reviewers); malformed jobs are refused whole")
def import_results(request, archive: UploadedFile = File(...), partial: bool = Form(False)):
    _require_reviewer(request, "import results")
    try:
        outcome = rollouts.import_upload(archive, user=request.auth, allow_partial=partial)
    except rollouts.ImportRefused as exc:
        outcome = rollouts.ImportOutcome(batches=[], refused=[exc])
    body = {"batches": [batch_out(b) for b in outcome.batches],
            "refused": [{"job": exc.job, **p} for exc in outcome.refused for p in exc.problems]}
    return Status(422 if outcome.refused else 201, body)


def trajectory_out(t: Trajectory) -> dict:
    return {f: getattr(t, f) for f in ("id", "batch_id", "task_id", "version_id", "attempt", "model", "agent",
                                       "status", "reward", "passed", "failure", "message", "n_turns", "seconds",
                                       "prompt_tokens", "completion_tokens", "trial_id", "finished_at")}


@router.get("/rollouts/{int:batch_id}/trajectories", response=list[TrajectoryOut], summary="A batch's trajectories")
@paginate(PageNumberPagination, page_size=100)
def batch_trajectories(request, batch_id: int):

    batch = get_object_or_404(RolloutBatch, pk=batch_id)
    return LazyPage(batch.trajectories.order_by("id"), trajectory_out)


@router.get("/trajectories/{int:trajectory_id}", response=TrajectoryDetailOut,
            summary="One trajectory: every turn and the verifier's per-test result")
def get_trajectory(request, trajectory_id: int):
    t = get_object_or_404(Trajectory.objects.select_related("trial"), pk=trajectory_id)
    out = trajectory_out(t)
    out["tests"] = [{"name": x.name, "outcome": x.outcome, "message": x.message}
                    for x in (t.trial.tests.all() if t.trial_id else [])]
    out["turns"] = [{f: getattr(turn, f) for f in ("index", "analysis", "plan", "commands", "output", "state",
                                                   "task_complete", "seconds", "prompt_tokens", "completion_tokens",
                                                   "llm_call_id")} for turn in t.turns.all()]
    return out


ANALYTICS_TABLES = ("overview", "pass-at-k", "tags", "categories", "failed-checks", "initial-failures", "strategies",
                    "datasets", "commands", "turn-states", "transitions", "families")


@router.get("/analytics/{table}", summary="One analytics table as rows; the same query parameters as the pages "
                                          "(task filter plus batch, model, agent, source, version)")
def analytics_table(request, table: str):
    if table not in ANALYTICS_TABLES:
        raise HttpError(404, f"no table {table!r}; one of: {', '.join(ANALYTICS_TABLES)}")
    af = an.AnalyticsFilter.from_query(request.GET)
    if af.errors:
        raise HttpError(422, "; ".join(af.errors))
    if table == "overview":
        rows = [an.overview(af)]
    elif table == "pass-at-k":
        rows = list(an.pass_at_k_rows(af, request.GET.get("sort", "-p1")))
    elif table in ("tags", "categories"):
        kind = LabelKind.TAG if table == "tags" else LabelKind.CATEGORY
        result = an.label_pass_rates(af, [kind], top=int(request.GET.get("top", 20) or 20))
        rows = result["rows"]
    elif table == "failed-checks":
        rows = an.failed_checks(af)["rows"]
    elif table == "initial-failures":
        rows = an.initial_failures(af)["rows"]
    elif table == "strategies":
        rows = an.strategy_comparison(af)
    elif table == "datasets":
        data = an.dataset_statistics(af)
        rows = data["totals"] + data["rows"]
    elif table in ("commands", "turn-states", "transitions"):
        data = an.command_patterns(af)
        rows = {"commands": data["all_commands"], "turn-states": data["states"],
                "transitions": data["transitions"]}[table]
    else:
        rows = an.family_distribution(af)["rows"]
    return {"table": table, "filter": af.describe(), "rows": rows}
