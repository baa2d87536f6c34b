"""What a synthesis run will cost before it starts: calls, tokens, cost and time per stage, at the
endpoint's measured latency and the configured concurrency (the run form and `facet run start
--dry-run` show it).

Counts the run cannot know before retrieval (candidate pairs, accepted pairs) come from the runs
already made on this installation, or from the paper's proportions when there are none; tokens
and latency per call likewise from stored calls, or from defaults. Every figure says where it came
from, so nobody mistakes a guess for a measurement.
"""
from __future__ import annotations

import math

from django.conf import settings
from django.db.models import Avg, Count, Sum

from .llm import llm_settings
from .models import CandidatePair, LLMCall, PairVerdict, RunSkill, RunStatus, Scenario, SynthesisRun

RECONSTRUCTION_CALLS = 8  # five modules, the dimensions, the references, the consistency check
# tokens in + out per call until calls are stored (what the scripted prompts measure, rounded up)
DEFAULT_TOKENS = {"classify_category": 4400, "hypotheses": 1800, "judge": 2500, "reconstruct": 3000}
DEFAULT_PAIRS_PER_SKILL = 0.75
DEFAULT_ACCEPTED_SHARE = 0.75


def _history() -> tuple[float, float, str]:
    """Pairs per skill and the accepted share from finished runs; the defaults without any."""
    runs = SynthesisRun.objects.filter(status=RunStatus.SUCCEEDED)
    skills = RunSkill.objects.filter(run__in=runs).count()
    pairs = CandidatePair.objects.filter(run__in=runs).count()
    if not skills or not pairs:
        return DEFAULT_PAIRS_PER_SKILL, DEFAULT_ACCEPTED_SHARE, "default proportions (no finished run yet)"
    accepted = CandidatePair.objects.filter(run__in=runs, verdict=PairVerdict.ACCEPTED).count()
    return pairs / skills, accepted / pairs, f"{runs.count()} finished run(s)"


def _measured(model: str) -> dict:
    """Mean latency and tokens per stage family of the last calls paid to this model."""
    recent = LLMCall.objects.filter(model=model, status="ok").order_by("-id")[:500]
    ids = list(recent.values_list("id", flat=True))
    calls = LLMCall.objects.filter(id__in=ids)
    latency = calls.aggregate(ms=Avg("latency_ms"))["ms"]
    tokens = {}
    for family in DEFAULT_TOKENS:
        row = calls.filter(stage__startswith=family).aggregate(n=Count("id"), i=Sum("tokens_in"), o=Sum("tokens_out"))
        if row["n"]:
            tokens[family] = ((row["i"] or 0) + (row["o"] or 0)) / row["n"]
    return {"latency_s": latency / 1000 if latency else None, "tokens": tokens, "calls": len(ids)}


def estimate_run(cfg: dict, *, skills: int, workers: int = 1) -> dict:
    """The estimate for a validated config over `skills` selected skills, with `workers` llm workers."""
    llm = llm_settings(cfg.get("llm"))
    model = llm.model or "(replayed)"
    measured = _measured(llm.model)
    latency = measured["latency_s"] or settings.FACET_LLM_DEFAULT_LATENCY_S
    pairs_per_skill, accepted_share, basis = _history()
    limits = cfg["limits"]
    pairs = min(limits["max_pairs"], math.ceil(skills * pairs_per_skill))
    accepted = math.ceil(pairs * accepted_share)

    concurrency = workers * settings.FACET_LLM_CONCURRENCY
    scope = dict(settings.FACET_LLM_LIMITS.scopes(llm.base_url, llm.model))
    endpoint = next(iter(scope.values()))
    caps = [c.max_concurrent for c in scope.values() if c.max_concurrent]
    if caps:
        concurrency = min([concurrency, *caps])
    rpm = min([c.requests_per_minute for c in scope.values() if c.requests_per_minute] or [0])
    tpm = min([c.tokens_per_minute for c in scope.values() if c.tokens_per_minute] or [0])

    stages = []
    # (label, calls, items worked at once, calls one item makes one after another, token family)
    # the optional LLM classification stage: one call per skill before the hypotheses
    classify = skills if (cfg.get("skills") or {}).get("llm_classification") else 0
    for label, items, sequential, family in (("Categories (LLM)", classify, 1, "classify_category"),
                                             ("Hypotheses", skills, 1, "hypotheses"), ("Judge", pairs, 1, "judge"),
                                             ("Reconstruction", accepted, RECONSTRUCTION_CALLS, "reconstruct")):
        if family == "classify_category" and not items:
            continue
        calls = items * sequential
        per_call = measured["tokens"].get(family) or DEFAULT_TOKENS[family]
        tokens = round(calls * per_call)
        seconds = math.ceil(items / concurrency) * sequential * latency if items else 0.0
        if rpm:
            seconds = max(seconds, calls / (rpm / 60))
        if tpm:
            seconds = max(seconds, tokens / (tpm / 60))
        # Prices are per million tokens in and out; the split in:out is about 3:1 in facet's prompts.
        cost = llm.estimate_cost(llm.model, round(tokens * 0.75), round(tokens * 0.25))
        stages.append({"stage": label, "items": items, "calls": calls, "tokens": tokens, "cost_usd": cost,
                       "seconds": round(seconds, 1),
                       "tokens_basis": "measured" if family in measured["tokens"] else "default"})
    costs = [s["cost_usd"] for s in stages]
    return {
        "model": model, "skills": skills, "pairs": pairs, "accepted_pairs": accepted, "proportions_from": basis,
        "latency_s": round(latency, 2),
        "latency_from": f"{measured['calls']} stored calls" if measured["latency_s"] else
                        "FACET_LLM_DEFAULT_LATENCY_S (no stored call to this model yet)",
        "concurrency": concurrency, "workers": workers, "requests_per_minute": rpm, "tokens_per_minute": tpm,
        "endpoint_max_concurrent": endpoint.max_concurrent,
        "stages": stages,
        "calls": sum(s["calls"] for s in stages), "tokens": sum(s["tokens"] for s in stages),
        "cost_usd": None if any(c is None for c in costs) else round(sum(costs), 4),
        "seconds": round(sum(s["seconds"] for s in stages), 1),
        "existing_scenarios": Scenario.objects.count(),
    }


def estimate_config(config: dict | None, *, trusted: bool = False, workers: int = 1) -> dict:
    """The estimate for a run as it would start with this config (checked as start_run checks it)."""
    from .run_config import RunConfigError, validate_config
    from .services import select_skills

    cfg = validate_config(config, trusted=trusted)
    skills = select_skills(cfg).count()
    if skills < 2:
        raise RunConfigError("skills: fewer than two accepted skills match this selection")
    return estimate_run(cfg, skills=skills, workers=workers)


def describe(est: dict) -> list[str]:
    """The estimate as lines of text (the CLI prints them)."""
    cost = "unknown (no price for this model in FACET_LLM_PRICES)" if est["cost_usd"] is None else f"${est['cost_usd']:,.4f}"
    lines = [
        f"Estimate for {est['skills']} skills → ~{est['pairs']} pairs → ~{est['accepted_pairs']} scenarios "
        f"(proportions from {est['proportions_from']}), model {est['model']}:",
        f"  {'stage':<16} {'calls':>8} {'tokens':>12} {'time':>10}",
    ]
    for s in est["stages"]:
        lines.append(f"  {s['stage']:<16} {s['calls']:>8,} {s['tokens']:>12,} {duration(s['seconds']):>10}")
    lines += [
        f"  {'total':<16} {est['calls']:>8,} {est['tokens']:>12,} {duration(est['seconds']):>10}   cost {cost}",
        f"  at {est['latency_s']:g} s per call ({est['latency_from']}) and {est['concurrency']} calls in flight "
        f"({est['workers']} llm worker(s) × FACET_LLM_CONCURRENCY, within the endpoint's limits)",
    ]
    return lines


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
