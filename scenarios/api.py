"""JSON API of synthesis: runs (start, progress, cancel, retry), candidate scenario–skill pairs
(list, import, export) and reconstructed scenarios. Viewers read; starting, cancelling, retrying and
importing need a reviewer or an admin (403 otherwise)."""
from typing import Annotated

from django.shortcuts import get_object_or_404
from ninja import Field, File, Form, Query, Router, Schema, Status
from ninja.errors import HttpError
from ninja.files import UploadedFile
from ninja.pagination import paginate

from facet_site.pagination import PageNumberPagination  # bounded page numbers
from facet_site.lib.safe_input import MAX_INT
from facet_site.roles import can_review

from . import pairs_jsonl, run_recovery, selectors, services
from .run_config import RunConfigError
from .forms import build_config
from .models import Scenario, SynthesisRun
from .schemas import (
    ImportResultOut,
    PairDetailOut,
    PairOut,
    RunDetailOut,
    RunIn,
    RunOut,
    ScenarioDetailOut,
    ScenarioOut,
)
from .views import EXPORT_VERDICTS, export_filename, jsonl_response

# mounted at /runs, /pairs and /scenarios by facet_site/api.py
runs_router = Router(tags=["scenarios"])
pairs_router = Router(tags=["scenarios"])
scenarios_router = Router(tags=["scenarios"])


def _require_reviewer(request, action: str):
    if not can_review(request.auth):
        raise HttpError(403, f"Only reviewers and admins may {action}.")


# --- runs ---------------------------------------------------------------------------------------


def _with_progress(run: SynthesisRun) -> SynthesisRun:
    run.live_progress = services.run_progress(run)  # RunDetailOut reads usage and progress from it
    return run


@runs_router.get("", response=list[RunOut], summary="List synthesis runs, newest first")
@paginate(PageNumberPagination, page_size=50)
def list_runs(request):
    return selectors.runs_with_usage()


@runs_router.post("", response={201: RunDetailOut}, summary="Start a synthesis run (reviewers)")
def start_run(request, payload: RunIn):
    _require_reviewer(request, "start runs")
    try:
        run = services.start_run(name=payload.name, user=request.auth, config=build_config(payload.config))
    except RunConfigError as exc:
        raise HttpError(422, str(exc)) from None
    return Status(201, _with_progress(run))


@runs_router.get("/{int:run_id}", response=RunDetailOut, summary="One run with its configuration and live progress")
def get_run(request, run_id: int):
    return _with_progress(get_object_or_404(SynthesisRun.objects.select_related("created_by"), pk=run_id))


@runs_router.post("/{int:run_id}/cancel", response=RunDetailOut, summary="Cancel a queued or running run (reviewers)")
def cancel_run(request, run_id: int):
    _require_reviewer(request, "cancel runs")
    run = get_object_or_404(SynthesisRun, pk=run_id)
    if run.is_finished:
        raise HttpError(409, f"run {run.pk} has already finished ({run.status})")
    return _with_progress(services.cancel_run(run=run, user=request.auth))


@runs_router.post("/{int:run_id}/retry", response=RunDetailOut,
                  summary="Retry a finished run's failed items, or resume a stalled run (reviewers)")
def retry_run(request, run_id: int):
    """What the run page's Retry / Resume button does (scenarios/run_recovery.py); 409 when the run
    has nothing to retry or resume, a repeated call included."""
    _require_reviewer(request, "retry runs")
    run = get_object_or_404(SynthesisRun, pk=run_id)
    if not run_recovery.retry_run(run=run, user=request.auth).action:
        raise HttpError(409, f"run {run.pk}: nothing to retry or resume (only a run that finished with failed "
                             f"items, or one with no sign of life for its stale_after_minutes)")
    return _with_progress(run)


# --- pairs --------------------------------------------------------------------------------------


# ids are 64-bit: a bigger one is a 422 naming the parameter, not a query the database refuses
RunId = Annotated[int | None, Field(None, ge=1, le=MAX_INT)]


class PairFilters(Schema):
    run: RunId = None
    verdict: str = ""  # accepted | rejected | unjudged
    category: str = ""  # slug; a top-level family matches its fine-grained categories
    min_score: float | None = None  # judge average, 1-5
    q: str = ""


@pairs_router.get("", response=list[PairOut], summary="List candidate scenario–skill pairs")
@paginate(PageNumberPagination, page_size=50)
def list_pairs(request, filters: Query[PairFilters]):
    return selectors.filter_pairs(**filters.dict())


@pairs_router.get("/{int:pair_id}", response=PairDetailOut, summary="One pair with its hypotheses, evidence and judgement")
def get_pair(request, pair_id: int):
    return get_object_or_404(selectors.filter_pairs(), pk=pair_id)


@pairs_router.post("/import", response=ImportResultOut, summary="Import a JSONL of reference-implementation pairs into a run (reviewers)")
def import_pairs(request, run: Form[int], file: File[UploadedFile]):
    _require_reviewer(request, "import pairs")
    target = SynthesisRun.objects.filter(pk=run).first()
    if target is None:
        raise HttpError(422, f"run: no run with id {run}")
    result = pairs_jsonl.import_pairs_jsonl(run=target, stream=file)
    return {"run": target.pk, "created": result.created, "skipped": result.skipped,
            "errors": [{"line": line, "message": message} for line, message in result.errors]}


@pairs_router.get("/export", summary="Download pairs as JSONL in the reference implementation's format")
def export_pairs(request, run: int | None = None, verdict: str = "accepted"):
    if verdict not in EXPORT_VERDICTS:
        raise HttpError(422, f"verdict: expected one of {', '.join(EXPORT_VERDICTS)}")
    target = get_object_or_404(SynthesisRun, pk=run) if run is not None else None
    lines = pairs_jsonl.export_pairs_jsonl(run=target, verdict=None if verdict == "all" else verdict)
    return jsonl_response(lines, filename=export_filename(target, verdict))


# --- scenarios ----------------------------------------------------------------------------------


class ScenarioFilters(Schema):
    run: RunId = None
    consistency: str = ""  # consistent | inconsistent


@scenarios_router.get("", response=list[ScenarioOut], summary="List reconstructed scenarios")
@paginate(PageNumberPagination, page_size=50)
def list_scenarios(request, filters: Query[ScenarioFilters]):
    return selectors.filter_scenarios(**filters.dict())


@scenarios_router.get("/{int:scenario_id}", response=ScenarioDetailOut, summary="One scenario with its modules and LLM calls")
def get_scenario(request, scenario_id: int):
    return get_object_or_404(Scenario.objects.select_related("pair"), pk=scenario_id)
