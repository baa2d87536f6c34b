"""The scenario pages: runs (start, progress, cancel), the repository of pairs and scenarios, a pair's
page with its judgement and LLM calls, and the pair JSONL import and export."""
import json
import re
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from facet_site.lib.render import render_markdown
from facet_site.roles import can_review, require

from . import pairs_jsonl, run_recovery, selectors, services
from .estimate import duration, estimate_config
from .forms import StartRunForm, category_choices
from .models import (
    RECONSTRUCTION_MODULES,
    CandidatePair,
    Judgement,
    Scenario,
    Stage,
    SynthesisRun,
)
from .run_config import RunConfigError
from .throughput import live_figures

RUNS_PAGE_SIZE = 25
PAIRS_PAGE_SIZE = 50
CALLS_PAGE_SIZE = 50
JUDGE_DIMENSIONS = [("relevance", "Relevance"), ("complementarity", "Complementarity"),
                    ("non_redundancy", "Non-redundancy"), ("executability", "Executability")]


def _percent(done: int, total: int) -> int:
    return round(100 * done / total) if total else 0


def _progress(run: SynthesisRun) -> dict:
    """run_progress with a percentage per stage and overall, which is all a progress bar needs."""
    progress = services.run_progress(run)
    stages = []
    settled_sum = total_sum = 0
    for row in progress.get("stages", []):
        total = row.get("total") or 0
        # skipped items (a cancelled run's, or over budget) are as settled as done or failed ones
        settled = sum(row.get(k) or 0 for k in ("done", "failed", "skipped"))
        stages.append({**row, "percent": _percent(settled, total)})
        if row.get("stage") != Stage.RETRIEVAL:  # retrieval counts pairs made, not work items
            settled_sum += settled
            total_sum += total
    percent = 100 if run.is_finished else _percent(settled_sum, total_sum)
    calls_by_stage = sorted((progress.get("calls_by_stage") or {}).items())
    live = None if run.is_finished else live_figures(run)
    return {**progress, "stages": stages, "percent": percent, "calls_by_stage": calls_by_stage, "live": live}


def run_list(request):
    form = None if request.htmx else StartRunForm()  # the polled fragment has no form
    estimate = None
    if request.method == "POST":
        if not can_review(request.user):
            raise PermissionDenied("Your role does not allow starting runs.")
        form = StartRunForm(request.POST)
        if form.is_valid() and request.POST.get("estimate"):
            try:
                estimate = estimate_config(form.config())
            except RunConfigError as exc:
                form.add_config_error(exc)
            else:
                estimate["time"] = duration(estimate["seconds"])
                for row in estimate["stages"]:
                    row["time"] = duration(row["seconds"])
        elif form.is_valid():
            try:
                run = services.start_run(name=form.cleaned_data["name"], user=request.user, config=form.config())
            except RunConfigError as exc:
                form.add_config_error(exc)
            else:
                messages.success(request, f"Run #{run.pk} “{run.name}” is queued.")
                return redirect("scenarios:run", run_id=run.pk)
    page = Paginator(selectors.runs_with_usage(), RUNS_PAGE_SIZE).get_page(request.GET.get("page"))
    percentages = selectors.run_percentages(page.object_list)
    rows = [(run, percentages[run.pk]) for run in page]
    active = any(not run.is_finished for run in page)
    context = {"page": page, "rows": rows, "form": form, "active": active, "estimate": estimate}
    if request.htmx:
        response = render(request, "scenarios/runs.html#runs", context)
        if not active:
            response.status_code = 286  # nothing left to watch: htmx stops polling
        return response
    return render(request, "scenarios/runs.html", context, status=400 if form is not None and form.errors else 200)


def run_detail(request, run_id: int):
    run = get_object_or_404(SynthesisRun.objects.select_related("created_by"), pk=run_id)
    calls = Paginator(run.llm_calls.order_by("-created_at", "-id"), CALLS_PAGE_SIZE).get_page(request.GET.get("calls_page"))
    context = {
        "run": run,
        "progress": _progress(run),
        "calls": calls,
        "config_json": json.dumps(run.config, indent=2, sort_keys=True),
        "pair_count": run.pairs.count(),
        "scenario_count": run.scenarios.count(),
        "recovery": run_recovery.offer(run),
    }
    if request.htmx:
        if request.htmx.target == "calls":
            return render(request, "scenarios/run.html#calls", context)
        response = render(request, "scenarios/run.html#progress", context)
        if run.is_finished:
            response.status_code = 286  # tells htmx to stop polling
        return response
    return render(request, "scenarios/run.html", context)


@require_POST
@require(can_review)
def cancel_run(request, run_id: int):
    run = get_object_or_404(SynthesisRun, pk=run_id)
    if run.is_finished:
        messages.error(request, f"Run #{run.pk} has already finished ({run.get_status_display().lower()}).")
    else:
        services.cancel_run(run=run, user=request.user)
        messages.success(request, f"Cancellation of run #{run.pk} requested; work in flight finishes first.")
    return redirect("scenarios:run", run_id=run.pk)


@require_POST
@require(can_review)
def retry_run(request, run_id: int):
    """Retry a run's failed items, or resume a run that stopped moving (scenarios/run_recovery.py)."""
    run = get_object_or_404(SynthesisRun, pk=run_id)
    done = run_recovery.retry_run(run=run, user=request.user)
    items = f"{done.items} item{'s' if done.items != 1 else ''}"
    if done.action == "retried":
        messages.success(request, f"Run #{run.pk}: {items} that failed {'are' if done.items != 1 else 'is'} queued again.")
    elif done.action == "resumed":
        messages.success(request, f"Run #{run.pk} is resumed: it is advanced again ({items} whose worker "
                                  f"stopped answering queued again).")
    else:
        messages.info(request, f"Run #{run.pk} has nothing to retry or resume: it is moving, was cancelled, "
                               f"or has no failed item (or it was just retried).")
    return redirect("scenarios:run", run_id=run.pk)


def _pair_filters(request) -> dict:
    g = request.GET
    return {k: g.get(k, "").strip() for k in ("run", "verdict", "category", "min_score", "q")}


def repository(request):
    filters = _pair_filters(request)
    qs = selectors.filter_pairs(**filters)
    page = Paginator(qs, PAIRS_PAGE_SIZE).get_page(request.GET.get("page"))
    query_without_page = request.GET.copy()
    query_without_page.pop("page", None)
    rows = []
    for pair in page:
        judgement = _related_or_none(pair, "judgement")
        rows.append({"pair": pair, "skills": [ps.skill for ps in pair.pair_skills.all()], "judgement": judgement,
                     "average": selectors.judge_average(judgement), "scenario": _related_or_none(pair, "scenario")})
    context = {
        "page": page,
        "rows": rows,
        "filters": filters,
        "query_without_page": query_without_page.urlencode(),
        "counts": selectors.verdict_counts(selectors.filter_pairs(**{**filters, "verdict": ""})),
        "runs": SynthesisRun.objects.only("id", "name"),
        "verdicts": selectors.VERDICT_FILTERS,
        "categories": category_choices(),
        "export_query": _export_query(filters),
    }
    template = "scenarios/repository.html#results" if request.htmx else "scenarios/repository.html"
    return render(request, template, context)


def _export_query(filters: dict) -> str:
    return urlencode({k: v for k, v in {"run": filters["run"], "verdict": filters["verdict"] or "all"}.items() if v})


def _related_or_none(obj, name):
    try:
        return getattr(obj, name)
    except (Judgement.DoesNotExist, Scenario.DoesNotExist):
        return None


def _calls_for_display(calls) -> list[dict]:
    """Each call's prompt and response as plain text: the template escapes them, nothing here is HTML."""
    out = []
    for call in calls:
        parsed = json.dumps(call.parsed, indent=2, ensure_ascii=False) if call.parsed is not None else ""
        out.append({"call": call, "messages": [m if isinstance(m, dict) else {"role": "", "content": str(m)} for m in call.messages or []],
                    "parsed": parsed})
    return out


def pair_detail(request, pair_id: int):
    pair = get_object_or_404(CandidatePair.objects.select_related("run"), pk=pair_id)
    judgement = _related_or_none(pair, "judgement")
    scenario = _related_or_none(pair, "scenario")
    scores = []
    if judgement is not None:
        rationales = judgement.rationales or {}
        scores = [(label, getattr(judgement, key), rationales.get(key, "")) for key, label in JUDGE_DIMENSIONS]
    return render(request, "scenarios/pair.html", {
        "pair": pair,
        "skills": pair.ordered_skills(),
        "hypotheses": pair.hypotheses.select_related("skill").order_by("skill_id", "position"),
        "evidence": [_evidence_row(e) for e in pair.evidence or []],
        "judgement": judgement,
        "average": selectors.judge_average(judgement),
        "scores": scores,
        "scenario": scenario,
        "calls": _calls_for_display(selectors.calls_behind(pair=pair)),
    })


def _evidence_row(item) -> list[tuple[str, str]]:
    """Similarity evidence is model-free JSON of whatever shape retrieval recorded; show it as key/value text."""
    if isinstance(item, dict):
        return [(str(k), v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)) for k, v in item.items()]
    return [("", item if isinstance(item, str) else json.dumps(item, ensure_ascii=False))]


def _as_lines(value) -> list[str]:
    if value in (None, "", [], {}):
        return []
    items = value if isinstance(value, list) else [value]
    return [i if isinstance(i, str) else "; ".join(f"{k}: {v}" for k, v in i.items()) if isinstance(i, dict) else str(i)
            for i in items]


def scenario_detail(request, scenario_id: int):
    scenario = get_object_or_404(Scenario.objects.select_related("pair__run", "run"), pk=scenario_id)
    modules = scenario.modules or {}
    labels = dict(RECONSTRUCTION_MODULES)
    # the five modules in the paper's order, then whatever else the pipeline recorded (dimensions, references…)
    names = [n for n, _ in RECONSTRUCTION_MODULES if n in modules] + [n for n in modules if n not in labels]
    solution = scenario.solution_reference or {}
    instruction = scenario.instruction_reference or {}
    return render(request, "scenarios/scenario.html", {
        "scenario": scenario,
        "pair": scenario.pair,
        "skills": scenario.pair.ordered_skills(),
        "integrated_html": render_markdown(scenario.integrated),
        "modules": [(labels.get(n, n.replace("_", " ").capitalize()), json.dumps(modules[n], indent=2, ensure_ascii=False))
                    for n in names],
        "solution": [("Setup actions", _as_lines(solution.get("setup_actions"))), ("Workflow", _as_lines(solution.get("workflow"))),
                     ("State transitions", _as_lines(solution.get("state_transitions")))],
        "instruction_goal": instruction.get("goal", ""),
        "instruction": [("Inputs", _as_lines(instruction.get("inputs"))), ("Outputs", _as_lines(instruction.get("outputs"))),
                        ("Constraints", _as_lines(instruction.get("constraints")))],
        "prompt_versions": sorted((scenario.prompt_versions or {}).items()),
        "calls": _calls_for_display(selectors.calls_behind(pair=scenario.pair, scenario=scenario)),
    })


def import_pairs(request):
    result = None
    chosen_run = request.POST.get("run") or request.GET.get("run") or ""
    if request.method == "POST":
        if not can_review(request.user):
            raise PermissionDenied("Your role does not allow importing pairs.")
        run = SynthesisRun.objects.filter(pk=chosen_run).first() if chosen_run.isdigit() else None
        uploaded = request.FILES.get("file")
        if run is None:
            messages.error(request, "run: choose the run to import the pairs into.")
        elif uploaded is None:
            messages.error(request, "file: choose a .jsonl file of pairs to upload.")
        else:
            # lines arrive as bytes; the service decodes each one, so one bad byte fails one line only
            result = pairs_jsonl.import_pairs_jsonl(run=run, stream=uploaded)
            messages.success(request, f"Imported {result.created} pair{'s' if result.created != 1 else ''} into run #{run.pk}; "
                                      f"{result.skipped} skipped, {len(result.errors)} line{'s' if len(result.errors) != 1 else ''} with errors.")
    return render(request, "scenarios/import.html", {
        "runs": SynthesisRun.objects.only("id", "name", "status"),
        "chosen_run": chosen_run,
        "result": result,
    })


_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9_.-]")


EXPORT_VERDICTS = ("accepted", "rejected", "all")


def export_pairs(request):
    run = request.GET.get("run", "").strip()
    verdict = request.GET.get("verdict", "accepted").strip() or "all"
    if verdict not in EXPORT_VERDICTS:
        return HttpResponseBadRequest(f"verdict: expected one of {', '.join(EXPORT_VERDICTS)}", content_type="text/plain")
    if run and not run.isdigit():
        return HttpResponseBadRequest("run: expected a run id", content_type="text/plain")
    run_obj = get_object_or_404(SynthesisRun, pk=run) if run else None
    return jsonl_response(pairs_jsonl.export_pairs_jsonl(run=run_obj, verdict=None if verdict == "all" else verdict),
                          filename=export_filename(run_obj, verdict))


def export_filename(run, verdict: str) -> str:
    parts = ["facet-pairs"] + ([f"run-{run.pk}"] if run is not None else []) + [verdict]
    return _UNSAFE_FILENAME.sub("_", "-".join(parts)) + ".jsonl"


def jsonl_response(lines, *, filename: str) -> StreamingHttpResponse:
    """A download that streams, so exporting a large repository never holds it all in memory."""
    response = StreamingHttpResponse((line if line.endswith("\n") else line + "\n" for line in lines),
                                     content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
