"""The construction funnel (the paper's Table 5), counted from the stored records: how many
scenario–skill seeds reached each stage, and the retention from the stage each is measured against."""
from __future__ import annotations

from django.db.models import Count

from facet_site import stamps
from scenarios.models import SynthesisRun

from .filters import funnel_predicates
from .models import Task

FUNNEL_STAGES = [
    # (stage, label, the stage its retention is measured against or None)
    ("seeds", "Scenario–skill seeds", None),
    ("first_build_logs", "Seeds with first-build logs", "seeds"),
    ("initial_environment_success", "Initial environment success", "first_build_logs"),
    ("environment_repair_recovery", "Environment repair recovery", None),
    ("successful_environments", "Successful environments", "first_build_logs"),
    ("entering_validation", "Entering task validation", "successful_environments"),
    ("first_pass_valid", "First-pass valid tasks", "entering_validation"),
    ("task_repair_recovery", "Task repair recovery", None),
    ("final_validated", "Final validated tasks", "entering_validation"),
]


def _funnel_counts_by_run() -> dict[int | None, dict[str, int]]:
    """Every run's funnel in one grouped aggregate: the per-run pages then read the cached
    result instead of each paying for the same subqueries."""
    predicates = funnel_predicates()
    rows = Task.objects.filter(imported=False).order_by().values("run_id").annotate(
        **{stage: Count("pk", filter=predicates[stage]) if predicates[stage] else Count("pk")
           for stage, _, _ in FUNNEL_STAGES})
    return {row.pop("run_id"): row for row in rows}


def _funnel_counts(run: SynthesisRun | None) -> dict[str, int]:
    by_run = stamps.cached("funnel-by-run", stamps.TASKS_STAMP, _funnel_counts_by_run)
    if run is not None:
        return by_run.get(run.pk) or {stage: 0 for stage, _, _ in FUNNEL_STAGES}
    return {stage: sum(row[stage] for row in by_run.values()) for stage, _, _ in FUNNEL_STAGES}


def funnel(run: SynthesisRun | None = None) -> list[dict]:
    """Table 5 over constructed tasks (imported ones never had a seed). Every number is a query:
    one aggregate with tasks.filters.funnel_predicates, which are also the task list's `stage`
    filter."""
    counts = _funnel_counts(run)
    rows = []
    for stage, label, base in FUNNEL_STAGES:
        retention = None
        if base is not None and counts[base]:
            retention = round(100 * counts[stage] / counts[base], 2)
        rows.append({"stage": stage, "label": label, "count": counts[stage], "retention": retention})
    return rows
