from django.shortcuts import get_object_or_404
from ninja import File, Form, Query, Router, Schema, Status
from ninja.errors import HttpError
from ninja.files import UploadedFile
from ninja.pagination import PageNumberPagination, paginate

from facet_site.pagination import LazyPage
from facet_site.roles import can_review

from . import selectors, services
from .forms import build_config
from .models import CandidatePair, Scenario, SynthesisRun
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

router = Router(tags=["scenarios"])


def _require_reviewer(request, action: str):
    if not can_review(request.auth):
        raise HttpError(403, f"Only reviewers and admins may {action}.")


# --- runs ---------------------------------------------------------------------------------------


def _run_out(run: SynthesisRun) -> dict:
    return {
        "id": run.id, "name": run.name, "status": run.status, "stage": run.stage, "strategy": run.strategy,
        "created_by": run.created_by.get_username() if run.created_by else None, "created_at": run.created_at,
        "started_at": run.started_at, "finished_at": run.finished_at, "cancel_requested_at": run.cancel_requested_at,
        "message": run.message, "tokens_in": getattr(run, "total_tokens_in", None) or 0,
        "tokens_out": getattr(run, "total_tokens_out", None) or 0, "cost_usd": round(getattr(run, "total_cost", None) or 0.0, 6),
    }


def _run_detail_out(run: SynthesisRun) -> dict:
    progress = services.run_progress(run)
    out = _run_out(run)
    out.update({
        "tokens_in": progress["tokens_in"], "tokens_out": progress["tokens_out"], "cost_usd": progress["cost_usd"],
        "config": run.config, "pairs": run.pairs.count(), "scenarios": run.scenarios.count(),
        "progress": {
            **progress,
            "calls_by_stage": [{"stage": stage, **usage} for stage, usage in sorted(progress["calls_by_stage"].items())],
        },
    })
    return out


@router.get("/runs", response=list[RunOut], summary="List synthesis runs, newest first")
@paginate(PageNumberPagination, page_size=50)
def list_runs(request):
    return LazyPage(selectors.runs_with_usage(), _run_out)


@router.post("/runs", response={201: RunDetailOut}, summary="Start a synthesis run (reviewers)")
def start_run(request, payload: RunIn):
    _require_reviewer(request, "start runs")
    try:
        run = services.start_run(name=payload.name, user=request.auth, config=build_config(payload.config))
    except services.RunConfigError as exc:
        raise HttpError(422, str(exc)) from None
    return Status(201, _run_detail_out(run))


@router.get("/runs/{int:run_id}", response=RunDetailOut, summary="One run with its configuration and live progress")
def get_run(request, run_id: int):
    return _run_detail_out(get_object_or_404(SynthesisRun.objects.select_related("created_by"), pk=run_id))


@router.post("/runs/{int:run_id}/cancel", response=RunDetailOut, summary="Cancel a queued or running run (reviewers)")
def cancel_run(request, run_id: int):
    _require_reviewer(request, "cancel runs")
    run = get_object_or_404(SynthesisRun, pk=run_id)
    if run.is_finished:
        raise HttpError(409, f"run {run.pk} has already finished ({run.status})")
    return _run_detail_out(services.cancel_run(run=run, user=request.auth))


# --- pairs --------------------------------------------------------------------------------------


class PairFilters(Schema):
    run: int | None = None
    verdict: str = ""  # accepted | rejected | unjudged
    category: str = ""  # slug; a top-level family matches its fine-grained categories
    min_score: float | None = None  # judge average, 1-5
    q: str = ""


def _judgement_out(pair: CandidatePair, detail: bool = False) -> dict | None:
    try:
        j = pair.judgement
    except CandidatePair.judgement.RelatedObjectDoesNotExist:
        return None
    out = {**j.scores, "average": selectors.judge_average(j), "verdict": j.verdict}
    if detail:
        out.update({"rationales": j.rationales, "summary": j.summary, "prompt_version": j.prompt_version})
    return out


def _scenario_id(pair: CandidatePair) -> int | None:
    try:
        return pair.scenario.pk
    except CandidatePair.scenario.RelatedObjectDoesNotExist:
        return None


def _pair_out(pair: CandidatePair, detail: bool = False) -> dict:
    return {
        "id": pair.id, "run": pair.run_id, "scenario_text": pair.scenario_text, "score": pair.score,
        "status": pair.status, "verdict": pair.verdict, "source": pair.source, "external_id": pair.external_id,
        "skills": [{"id": ps.skill.id, "key": ps.skill.key, "name": ps.skill.name,
                    "category": ps.skill.category.slug if ps.skill.category else None}
                   for ps in pair.pair_skills.all()],
        "judgement": _judgement_out(pair, detail), "scenario": _scenario_id(pair),
    }


@router.get("/pairs", response=list[PairOut], summary="List candidate scenario–skill pairs")
@paginate(PageNumberPagination, page_size=50)
def list_pairs(request, filters: Query[PairFilters]):
    return LazyPage(selectors.filter_pairs(**filters.dict()), _pair_out)


@router.get("/pairs/{int:pair_id}", response=PairDetailOut, summary="One pair with its hypotheses, evidence and judgement")
def get_pair(request, pair_id: int):
    pair = get_object_or_404(selectors.filter_pairs(), pk=pair_id)
    out = _pair_out(pair, detail=True)
    out.update({
        "evidence": pair.evidence or [], "skill_summaries": pair.skill_summaries or [], "error": pair.error,
        "hypotheses": [
            {"id": h.id, "skill": h.skill_id, "position": h.position, "application_context": h.application_context,
             "user_goal": h.user_goal, "initial_state": h.initial_state, "desired_final_state": h.desired_final_state,
             "prompt_version": h.prompt_version}
            for h in pair.hypotheses.order_by("skill_id", "position")
        ],
    })
    return out


@router.post("/pairs/import", response=ImportResultOut, summary="Import a JSONL of reference-implementation pairs into a run (reviewers)")
def import_pairs(request, run: Form[int], file: File[UploadedFile]):
    _require_reviewer(request, "import pairs")
    target = SynthesisRun.objects.filter(pk=run).first()
    if target is None:
        raise HttpError(422, f"run: no run with id {run}")
    result = services.import_pairs_jsonl(run=target, stream=file)
    return {"run": target.pk, "created": result.created, "skipped": result.skipped,
            "errors": [{"line": line, "message": message} for line, message in result.errors]}


@router.get("/pairs/export", summary="Download pairs as JSONL in the reference implementation's format")
def export_pairs(request, run: int | None = None, verdict: str = "accepted"):
    if verdict not in EXPORT_VERDICTS:
        raise HttpError(422, f"verdict: expected one of {', '.join(EXPORT_VERDICTS)}")
    target = get_object_or_404(SynthesisRun, pk=run) if run is not None else None
    lines = services.export_pairs_jsonl(run=target, verdict=None if verdict == "all" else verdict)
    return jsonl_response(lines, filename=export_filename(target, verdict))


# --- scenarios ----------------------------------------------------------------------------------


class ScenarioFilters(Schema):
    run: int | None = None
    consistency: str = ""  # consistent | inconsistent


def _scenario_out(s: Scenario) -> dict:
    return {
        "id": s.id, "run": s.run_id, "pair": s.pair_id, "title": s.title, "status": s.status, "consistency": s.consistency,
        "goal": s.goal, "context": s.context, "capability": s.capability, "state": s.state, "io_tools": s.io_tools,
    }


@router.get("/scenarios", response=list[ScenarioOut], summary="List reconstructed scenarios")
@paginate(PageNumberPagination, page_size=50)
def list_scenarios(request, filters: Query[ScenarioFilters]):
    return LazyPage(selectors.filter_scenarios(**filters.dict()), _scenario_out)


@router.get("/scenarios/{int:scenario_id}", response=ScenarioDetailOut, summary="One scenario with its modules and LLM calls")
def get_scenario(request, scenario_id: int):
    s = get_object_or_404(Scenario.objects.select_related("pair"), pk=scenario_id)
    out = _scenario_out(s)
    out.update({
        "integrated": s.integrated, "solution_reference": s.solution_reference, "instruction_reference": s.instruction_reference,
        "consistency_notes": s.consistency_notes, "modules": s.modules, "prompt_versions": s.prompt_versions, "error": s.error,
        "llm_calls": list(selectors.calls_behind(pair=s.pair, scenario=s)),
    })
    return out
