"""The paper's analyses as queries over our records: pass@k per task, pass rates per skill tag and
category with Wilson intervals (Figure 4), failed verifier checks and initial validation failures
(Figure 2), the strategy comparison (Table 7), dataset statistics (Table 1), command-level patterns
of successful trajectories (Table 6) and task families (Figure 3b).

Every aggregate is a GROUP BY in the database (over TaskLabel, Trajectory, Trial, TestResult,
Turn, Validation). Python only finishes what SQL cannot do portably: the pass@k estimator is
applied to per-task (n, c) pairs that one grouped query returns, and Wilson intervals to
per-group counts.

The selection is tasks.analytics_selection.AnalyticsFilter. "Passed" is strict: reward 1
(Trajectory.passed), as in the paper's strict task-level pass rate.
"""
from __future__ import annotations

import dataclasses
import functools
import math

from django.conf import settings
from django.db import connection
from django.db.models import (
    Case,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce

from facet_site import stamps
from facet_site.lib.stats import pass_at_k, wilson_interval
from scenarios.models import Strategy

from .analytics_selection import AnalyticsFilter
from .filters import TaskFilter
from .models import (
    LabelKind,
    RolloutBatch,
    TaskLabel,
    TaskStatus,
    TestResult,
    Validation,
    ValidationStatus,
)

FAILED_OUTCOMES = ("failed", "error")
PAPER_TABLE1 = [  # the paper's Table 1, shown beside ours
    {"dataset": "Nemotron-Terminal", "trajectories": "5K", "turns": 6.12, "tasks": "15K", "tests": 6.18, "p1": 40.67, "p3": 48.00},
    {"dataset": "Endless-Terminals", "trajectories": "200", "turns": 4.53, "tasks": "2,492", "tests": 5.51, "p1": 83.00, "p3": 87.00},
    {"dataset": "Terminal-Lego", "trajectories": "32K", "turns": 5.77, "tasks": "15K", "tests": 16.60, "p1": 47.00, "p3": 49.00},
    {"dataset": "TerminalWorld", "trajectories": "200", "turns": 11.94, "tasks": "1,530", "tests": 3.98, "p1": 57.00, "p3": 82.00},
    {"dataset": "Tmax", "trajectories": "500", "turns": 11.14, "tasks": "15K", "tests": 3.29, "p1": 80.00, "p3": 86.00},
    {"dataset": "FACET (paper)", "trajectories": "1.2K", "turns": 11.86, "tasks": "6K", "tests": 22.77, "p1": 27.00, "p3": 35.00},
]
PAPER_TABLE7 = {"forward": (99, 46, 83), "reverse": (91, 22, 63), "joint": (96, 36, 65)}


# --- results cache ------------------------------------------------------------------------------


def cached(fn):
    """Keep an aggregate's result in the one stamp cache (facet_site.stamps) for
    settings.FACET_ANALYTICS_CACHE_S seconds (0 turns it off), keyed by the function, the
    selection, its arguments and the analytics data stamp: the same page asked again costs one
    small query until the data changes. The time limit bounds staleness from changes the stamp
    cannot see (a summary column written without updated_at)."""

    @functools.wraps(fn)
    def wrapper(af: AnalyticsFilter, *args, **kwargs):
        return stamps.cached(f"analytics.{fn.__name__}", stamps.ANALYTICS_STAMP, lambda: fn(af, *args, **kwargs),
                             af.query_string(), args, sorted(kwargs.items()), ttl=settings.FACET_ANALYTICS_CACHE_S)

    return wrapper


def _rate(c: int, n: int) -> float | None:
    return c / n if n else None


def _wilson(c: int, n: int) -> tuple[float | None, float | None]:
    if not n:
        return None, None
    return wilson_interval(c, n)


# --- pass@k per task ----------------------------------------------------------------------------


def per_task(af: AnalyticsFilter) -> QuerySet:
    """One row per task in the selection with finished attempts: n attempts, c passed, and its
    P@1 = c/n and P@3 = 1 − C(n−c, 3)/C(n, 3) computed in SQL (None below 3 attempts). The
    product form needs no binomials: with fewer than 3 failures a factor is 0 and P@3 is 1."""
    n, c = F("n"), F("c")
    fails = n - c
    return af.trajectories().values("task_id").annotate(
        task=F("task__name"), n=Count("id"), c=Count("id", filter=Q(passed=True))).annotate(
        p1=ExpressionWrapper(Cast("c", FloatField()) / n, output_field=FloatField()),
        p3=Case(When(n__gte=3, then=ExpressionWrapper(
            Value(1.0) - Cast(fails * (fails - 1) * (fails - 2), FloatField()) / (n * (n - 1) * (n - 2)),
            output_field=FloatField())), default=None, output_field=FloatField()))


def _distribution(traj: QuerySet, group: list[str], *, tests: bool = False) -> list[tuple]:
    """The per-task (n, c) pairs counted in the database: one row per (group values..., n, c)
    with the number of tasks, their attempts' turns, and the sum and count of their tests. Two
    GROUP BYs (per group and task, then per group and (n, c)): a handful of rows, whatever the
    number of rollouts."""
    fields = {f"g{i}": F(name) for i, name in enumerate(group)}
    inner = traj.annotate(**fields).values(*fields, "task_id").annotate(
        n=Count("id"), c=Count("id", filter=Q(passed=True)), turns=Coalesce(Sum("n_turns"), 0),
        **({"tests": Max("task__n_tests")} if tests else {}))
    sql, params = _sql_of(inner)
    cols = ", ".join(f"x.g{i}" for i in range(len(group)))
    tests_sql = "SUM(x.tests), COUNT(x.tests)" if tests else "0, 0"
    outer = (f"SELECT {cols + ', ' if cols else ''}x.n, x.c, COUNT(*), SUM(x.turns), {tests_sql} "
             f"FROM ({sql}) x GROUP BY {cols + ', ' if cols else ''}x.n, x.c")
    with connection.cursor() as cur:
        cur.execute(outer, params)
        return cur.fetchall()


@functools.lru_cache(maxsize=4096)
def _pass_at_k(n: int, c: int, k: int) -> float:
    return pass_at_k(n, c, k)


def summarise(rows: list[tuple], ks=(1, 3)) -> dict:
    """Mean unbiased pass@k over tasks from (n, c, tasks, turns, tests sum, tests count) rows; a
    task with fewer than k attempts is left out of pass@k (and counted), never clamped."""
    tasks = sum(t for _, _, t, _, _, _ in rows)
    trajectories = sum(n * t for n, _, t, _, _, _ in rows)
    out = {"tasks": tasks, "trajectories": trajectories, "passed": sum(c * t for _, c, t, _, _, _ in rows),
           "turns": (sum(int(u) for _, _, _, u, _, _ in rows) / trajectories) if trajectories else None}
    tests_n = sum(int(k or 0) for *_, k in rows)
    out["tests"] = (sum(float(x or 0) for *_, x, _ in rows) / tests_n) if tests_n else None
    for k in ks:
        eligible = [(n, c, t) for n, c, t, _, _, _ in rows if n >= k]
        count = sum(t for _, _, t in eligible)
        out[f"p{k}"] = (math.fsum(_pass_at_k(n, c, k) * t for n, c, t in eligible) / count) if count else None
        out[f"p{k}_tasks"] = count
        out[f"p{k}_excluded"] = tasks - count
    return out


def pass_at_k_summary(counts: list[tuple[int, int, int]], ks=(1, 3)) -> dict:
    """summarise() for (task id, n, c) triples (the task page's few)."""
    return summarise([(n, c, 1, 0, None, 0) for _, n, c in counts], ks)


# (label, test on P@1, the task list's pass_min/pass_max for it: Task.pass_rate, which is P@1 over
# the current version's attempts of every model)
P1_BUCKETS = [
    ("0", lambda p: p == 0, 0.0, 0.0),
    ("(0, ⅓]", lambda p: 0 < p <= 1 / 3, 0.0001, 0.3334),
    ("(⅓, ⅔]", lambda p: 1 / 3 < p <= 2 / 3, 0.3334, 0.6667),
    ("(⅔, 1)", lambda p: 2 / 3 < p < 1, 0.6667, 0.9999),
    ("1", lambda p: p == 1, 1.0, 1.0),
]
PASSK_SORTS = {"p1": "p1", "p3": "p3", "n": "n", "task": "task"}


@cached
def pass_at_k_table(af: AnalyticsFilter) -> dict:
    """The summary, the P@1 histogram and the per-model figures; the per-task rows are
    `pass_at_k_rows` (sorted and paged in the database)."""
    dist = _distribution(af.trajectories(), [])
    buckets = [{"label": label, "tasks": sum(t for n, c, t, *_ in dist if test(c / n)), "link_min": lo,
                "link_max": hi} for label, test, lo, hi in P1_BUCKETS]
    by_model: dict[str, list] = {}
    for model, *row in _distribution(af.trajectories(), ["model"]):
        by_model.setdefault(model or "(unknown)", []).append(tuple(row))
    return {"summary": summarise(dist), "buckets": buckets,
            "by_model": [{"model": m, **summarise(rows)} for m, rows in sorted(by_model.items())]}


def pass_at_k_rows(af: AnalyticsFilter, sort: str = "-p1") -> QuerySet:
    """Per-task rows (task_id, task, n, c, p1, p3), sorted in the database; slice it to page."""
    key = PASSK_SORTS.get(sort.lstrip("-"), "p1")
    desc = sort.startswith("-")
    order = F(key).desc(nulls_last=True) if desc else F(key).asc(nulls_last=True)
    return per_task(af).order_by(order, "task_id")


# --- pass rates per tag / category (Figure 4) ---------------------------------------------------


@cached
def label_pass_rates(af: AnalyticsFilter, kinds: list[str], *, top: int = 20) -> dict:
    """Strict pass rate of the finished rollouts of tasks carrying each label, for the `top`
    labels with the most rollouts, ordered by observed rate; Wilson 95% intervals; the overall
    rate over all rollouts in the selection is the reference line."""
    return _label_rates(af, {"all": list(kinds)}, top=top)["all"]


@cached
def label_pass_rates_by_kind(af: AnalyticsFilter, kinds: list[str], *, top: int = 20) -> dict[str, dict]:
    """label_pass_rates for several label kinds at once (one query: grouped by kind and value,
    the `top` of each kind picked by a window function in the database)."""
    return _label_rates(af, {k: [k] for k in kinds}, top=top)


def _label_rates(af: AnalyticsFilter, groups: dict[str, list[str]], *, top: int) -> dict[str, dict]:
    # Trajectories are counted per task first (one row per task), then joined to the labels: a
    # (label, task) pair is unique, so a label's tasks are its row count, and the join is as small
    # as the labels rather than labels × attempts. The top of each kind is picked by a window.
    per_task = af.trajectories().values("task_id").annotate(n=Count("id"), c=Count("id", filter=Q(passed=True)))
    per_task_sql, params = _sql_of(per_task)
    kind_of = {kind: name for name, kinds in groups.items() for kind in kinds}
    marks = ", ".join(["%s"] * len(kind_of))
    sql = ("SELECT kind, value, n, c, tasks FROM (SELECT l.kind AS kind, l.value AS value, SUM(t.n) AS n, "
           "SUM(t.c) AS c, COUNT(*) AS tasks, ROW_NUMBER() OVER (PARTITION BY l.kind ORDER BY SUM(t.n) DESC, "
           f"l.value) AS rank FROM tasks_tasklabel l JOIN ({per_task_sql}) t ON t.task_id = l.task_id "
           f"WHERE l.kind IN ({marks}) GROUP BY l.kind, l.value) x" + (" WHERE rank <= %s" if top else ""))
    with connection.cursor() as cur:
        cur.execute(sql, (*params, *kind_of, *([top] if top else [])))
        grouped = cur.fetchall()
        cur.execute(f"SELECT COALESCE(SUM(n), 0), COALESCE(SUM(c), 0) FROM ({per_task_sql}) t", params)
        n_all, c_all = (int(x) for x in cur.fetchone())
    o_low, o_high = _wilson(c_all, n_all)
    overall = {"rollouts": n_all, "passed": c_all, "rate": _rate(c_all, n_all), "low": o_low, "high": o_high}
    out = {name: {"rows": [], "overall": overall} for name in groups}
    for kind, value, n, c, tasks in grouped:
        n, c = int(n), int(c)
        low, high = _wilson(c, n)
        out[kind_of[kind]]["rows"].append({"label": value, "rollouts": n, "passed": c, "tasks": int(tasks),
                                           "rate": _rate(c, n), "low": low, "high": high})
    for result in out.values():
        result["rows"].sort(key=lambda r: (-(r["rate"] if r["rate"] is not None else -1), -r["rollouts"], r["label"]))
    return out


# --- failures (Figure 2) ------------------------------------------------------------------------


def _failed_checks_subquery():
    return Coalesce(Subquery(
        TestResult.objects.filter(trial=OuterRef("trial_id"), outcome__in=FAILED_OUTCOMES)
        .order_by().values("trial").annotate(k=Count("id")).values("k")[:1],
        output_field=IntegerField()), Value(0))


@cached
def failed_checks(af: AnalyticsFilter) -> dict:
    """Figure 2a: among unsuccessful rollouts, how many verifier checks failed or errored per
    rollout; those without any parsed failed/errored check are counted separately (omitted from
    the distribution, as in the paper). One two-level GROUP BY: per trial, then per count."""
    unsuccessful = af.trajectories().filter(passed=False)
    trials_sql, params = _sql_of(unsuccessful.filter(trial__isnull=False).values("trial_id"))
    with connection.cursor() as cur:
        cur.execute(
            "SELECT k, COUNT(*), SUM(f), SUM(e) FROM ("
            " SELECT r.trial_id, COUNT(*) AS k, SUM(CASE WHEN r.outcome = 'failed' THEN 1 ELSE 0 END) AS f,"
            " SUM(CASE WHEN r.outcome = 'error' THEN 1 ELSE 0 END) AS e FROM tasks_testresult r"
            f" WHERE r.outcome IN ('failed', 'error') AND r.trial_id IN ({trials_sql}) GROUP BY r.trial_id) x"
            " GROUP BY k ORDER BY k", params)
        dist = cur.fetchall()
    reasons = list(unsuccessful.values("failure").annotate(n=Count("id")).order_by("-n", "failure"))
    n_unsuccessful = sum(r["n"] for r in reasons)
    total = sum(n for _, n, _, _ in dist)
    rows = [{"failed_checks": k, "rollouts": n, "share": n / total if total else None} for k, n, _, _ in dist]
    return {"rows": rows, "omitted": n_unsuccessful - total, "unsuccessful": n_unsuccessful,
            "failed": sum(f or 0 for _, _, f, _ in dist), "errored": sum(e or 0 for _, _, _, e in dist),
            "reasons": [{"failure": r["failure"] or "(none)", "rollouts": r["n"]} for r in reasons]}


def first_validations(tasks: QuerySet) -> QuerySet:
    """The first finished validation of each of `tasks` (one grouped query, as a subquery)."""
    firsts = (Validation.objects.filter(status=ValidationStatus.DONE, version__task__in=Subquery(tasks.values("pk")))
              .order_by().values("version__task_id").annotate(first=Min("id")).values("first"))
    return Validation.objects.filter(pk__in=Subquery(firsts))


@cached
def initial_failures(af: AnalyticsFilter) -> dict:
    """Figure 2b: the failure type of each constructed task's first finished validation, when it
    failed, per generation strategy."""
    tasks = af.task_queryset().filter(imported=False)
    grouped = list(first_validations(tasks).filter(accepted=False)
                   .values(strategy=F("version__task__strategy"), first_failure=F("failure"))
                   .annotate(n=Count("id")).order_by("strategy", "-n", "first_failure"))
    totals: dict[str, int] = {}
    for g in grouped:
        totals[g["strategy"]] = totals.get(g["strategy"], 0) + g["n"]
    rows = [{"strategy": g["strategy"], "failure": g["first_failure"] or "(none)", "tasks": g["n"],
             "share": g["n"] / totals[g["strategy"]] if totals.get(g["strategy"]) else None} for g in grouped]
    return {"rows": rows, "totals": totals}


# --- strategies (Table 7) -----------------------------------------------------------------------


@cached
def strategy_comparison(af: AnalyticsFilter) -> list[dict]:
    """Per strategy over constructed tasks: selected paths (tasks), reached validation (a
    finished validation), initially valid (the first one accepted; rate over those that reached
    validation), final yield (validated; rate over all selected)."""
    done = Validation.objects.filter(version__task=OuterRef("pk"), status=ValidationStatus.DONE)
    tasks = af.task_queryset().filter(imported=False)
    initially = dict(first_validations(tasks).filter(accepted=True).values("version__task__strategy")
                     .annotate(n=Count("id")).values_list("version__task__strategy", "n"))
    grouped = list(tasks.annotate(reached=Exists(done)).values("strategy").annotate(
        selected=Count("id"), reached_n=Count("id", filter=Q(reached=True)),
        final=Count("id", filter=Q(status=TaskStatus.VALIDATED))).order_by("strategy"))
    labels = dict(Strategy.choices)
    rows = []
    for g in grouped:
        paper = PAPER_TABLE7.get(g["strategy"])
        g["initially"] = initially.get(g["strategy"], 0)
        rows.append({
            "strategy": g["strategy"], "label": labels.get(g["strategy"], g["strategy"]), "selected": g["selected"],
            "reached": g["reached_n"], "initially_valid": g["initially"],
            "initial_rate": _rate(g["initially"], g["reached_n"]), "final": g["final"],
            "yield": _rate(g["final"], g["selected"]),
            "paper": {"reached": paper[0], "initially_valid": paper[1], "initial_rate": paper[1] / paper[0],
                      "final": paper[2], "yield": paper[2] / 100} if paper else None})
    return rows


# --- dataset statistics (Table 1) ---------------------------------------------------------------


def _dataset_row(label: str, rows: list[tuple], **extra) -> dict:
    s = summarise(rows)
    pct = {f"p{k}_pct": None if s[f"p{k}"] is None else round(100 * s[f"p{k}"], 2) for k in (1, 3)}
    return {"dataset": label, "trajectories": s["trajectories"], "successful": s["passed"], "turns": s["turns"],
            "tasks": s["tasks"], "tests": s["tests"], "p1": s["p1"], "p3": s["p3"], "p3_excluded": s["p3_excluded"],
            **pct, **extra}


@cached
def dataset_statistics(af: AnalyticsFilter) -> dict:
    """Table 1 per rollout batch (each is a dataset: our runs and imported Harbor jobs), and each
    source pooled (a task's attempts across its batches together), from two distributions."""
    traj = af.trajectories()
    per_batch: dict[int, list] = {}
    for batch_id, *row in _distribution(traj, ["batch_id"], tests=True):
        per_batch.setdefault(batch_id, []).append(tuple(row))
    per_source: dict[str, list] = {}
    for source, *row in _distribution(traj, ["batch__source"], tests=True):
        per_source.setdefault(source, []).append(tuple(row))
    batches = {b["id"]: b for b in RolloutBatch.objects.filter(pk__in=list(per_batch)).values(
        "id", "name", "source", "model", "agent")}
    rows = []
    for batch_id in sorted(per_batch, reverse=True):
        b = batches.get(batch_id, {})
        rows.append(_dataset_row(b.get("name", f"batch #{batch_id}"), per_batch[batch_id], batch_id=batch_id,
                                 source=b.get("source", ""), model=b.get("model", ""), agent=b.get("agent", "")))
    totals = [_dataset_row(label, per_source[source], source=source, batch_id=None)
              for source, label in (("builtin", "All built-in rollouts"), ("harbor", "All imported (Harbor)"))
              if source in per_source]
    return {"rows": rows, "totals": totals, "paper": PAPER_TABLE1}


# --- command-level patterns (Table 6) -----------------------------------------------------------


def _sql_of(qs: QuerySet) -> tuple[str, tuple]:
    sql, params = qs.query.sql_with_params()
    return sql, tuple(params)


def _patterns_sql(trajectory_sql: str) -> str:
    """One scan of the selected trajectories' turns: per (state, next turn's state, first turn)
    the number of turns ("turn" rows; the next state comes from a window over the trajectory),
    and per (main program, kind) the number of command occurrences ("command" rows; the JSON
    arrays are unnested with each database's own function)."""
    if connection.vendor == "postgresql":
        unnest = ("CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(t.commands) = 'array' "
                  "THEN t.commands ELSE '[]'::jsonb END) e")
        program, kind = "e.value->>'program'", "e.value->>'kind'"
    else:
        unnest = ", json_each(CASE WHEN json_type(t.commands) = 'array' THEN t.commands ELSE '[]' END) e"
        program, kind = "json_extract(e.value, '$.program')", "json_extract(e.value, '$.kind')"
    return (
        "WITH t AS (SELECT tu.\"index\" AS idx, tu.state AS state, tu.commands AS commands, "
        "LEAD(tu.state) OVER w AS next_state, LEAD(tu.\"index\") OVER w AS next_idx FROM tasks_turn tu "
        f"WHERE tu.trajectory_id IN ({trajectory_sql}) WINDOW w AS (PARTITION BY tu.trajectory_id ORDER BY tu.\"index\")) "
        "SELECT 'turn', state, CASE WHEN next_idx = idx + 1 THEN next_state END, CASE WHEN idx = 1 THEN 1 ELSE 0 END, "
        "COUNT(*) FROM t GROUP BY 2, 3, 4 "
        f"UNION ALL SELECT 'command', {program}, {kind}, 0, COUNT(*) FROM t {unnest} GROUP BY 2, 3")


STATES = ("observation", "action", "mixed", "none")


@cached
def command_patterns(af: AnalyticsFilter, *, top: int = 15) -> dict:
    """Table 6 over successful trajectories: the most frequent commands (a command occurrence is
    one command line the agent sent; its command is the main program, see
    shell_commands.main_program) with their share of all occurrences, observation vs action
    command lines, the turn states, observation-only first turns, and row-normalised
    transition probabilities between adjacent turns' states."""
    successful = af.trajectories().filter(passed=True)
    traj_sql, traj_params = _sql_of(successful.values("id"))
    with connection.cursor() as cur:
        cur.execute(_patterns_sql(traj_sql), traj_params)
        result_rows = cur.fetchall()
    programs: dict[str, dict] = {}
    kinds = {"observation": 0, "action": 0}
    states: dict[str, int] = {}
    first: dict[str, int] = {}
    matrix: dict[str, dict[str, int]] = {}
    total = 0
    for what, a, b, is_first, n in result_rows:
        if what == "turn":
            a = a or "none"
            states[a] = states.get(a, 0) + n
            if is_first:
                first[a] = first.get(a, 0) + n
            if b is not None:
                matrix.setdefault(a, {})[b or "none"] = matrix.get(a, {}).get(b or "none", 0) + n
            continue
        program, kind = a, b
        total += n
        if kind in kinds:
            kinds[kind] += n
        p = programs.setdefault(program or "(unparsed)", {"command": program or "(unparsed)", "occurrences": 0,
                                                           "observation": 0, "action": 0})
        p["occurrences"] += n
        if kind in ("observation", "action"):
            p[kind] += n
    ranked = sorted(programs.values(), key=lambda p: (-p["occurrences"], p["command"]))
    for p in ranked:
        p["share"] = p["occurrences"] / total if total else None
        p["dominant"] = "observation" if p["observation"] >= p["action"] else "action"
    n_first = sum(first.values())
    transitions = []
    for a in STATES:
        row_total = sum(matrix.get(a, {}).values())
        for b in STATES:
            n = matrix.get(a, {}).get(b, 0)
            transitions.append({"from": a, "to": b, "count": n, "probability": n / row_total if row_total else None})
    top_rows = ranked[:top]

    def top_share(k: int):
        s = sum(p["occurrences"] for p in ranked[:k])
        return {"occurrences": s, "share": s / total if total else None}

    return {
        "trajectories": successful.count(), "occurrences": total, "commands": top_rows, "all_commands": ranked,
        "top3": top_share(3), "top10": top_share(10),
        "observation": {"occurrences": kinds["observation"], "share": _rate(kinds["observation"], total)},
        "action": {"occurrences": kinds["action"], "share": _rate(kinds["action"], total)},
        "states": [{"state": s, "turns": states.get(s, 0), "share": _rate(states.get(s, 0), sum(states.values()))}
                   for s in STATES],
        "first_turn_observation": {"turns": first.get("observation", 0), "of": n_first,
                                   "share": _rate(first.get("observation", 0), n_first)},
        "transitions": transitions,
    }


# --- task families (Figure 3b) ------------------------------------------------------------------


def _validated_unless_filtered(af: AnalyticsFilter, default_validated: bool) -> TaskFilter:
    """The filter's tasks; validated ones when it names no status (the paper counts its 6,078)."""
    tf = af.tasks
    if default_validated and not tf.status:
        tf = dataclasses.replace(tf, status=[TaskStatus.VALIDATED])
    return tf


@cached
def family_distribution(af: AnalyticsFilter, *, default_validated: bool = True) -> dict:
    """Tasks per family (TaskLabel kind=family, tasks/families.json via summary.set_labels).
    Without a status in the filter, validated tasks are counted, as the paper's 6,078."""
    tf = _validated_unless_filtered(af, default_validated)
    tasks = tf.queryset().order_by()
    total = tasks.count()
    grouped = list(TaskLabel.objects.filter(kind=LabelKind.FAMILY, task__in=Subquery(tasks.values("pk")))
                   .values("value").annotate(n=Count("task_id", distinct=True)).order_by("-n", "value"))
    labelled = tasks.filter(Exists(TaskLabel.objects.filter(task=OuterRef("pk"), kind=LabelKind.FAMILY))).count()
    rows = [{"family": g["value"], "tasks": g["n"], "share": g["n"] / total if total else None} for g in grouped]
    return {"rows": rows, "total": total, "without_family": total - labelled, "statuses": tf.status}


def difficulty_distribution(af: AnalyticsFilter, *, default_validated: bool = True) -> dict:
    """Tasks per difficulty (TaskLabel kind=difficulty: the scenario's target, or an imported
    task.toml's), the share the paper's Table 1 reports. Validated tasks unless the filter names a
    status, as for the families."""
    tf = _validated_unless_filtered(af, default_validated)
    tasks = tf.queryset().order_by()
    total = tasks.count()
    counts = dict(TaskLabel.objects.filter(kind=LabelKind.DIFFICULTY, task__in=Subquery(tasks.values("pk")))
                  .values_list("value").annotate(n=Count("task_id", distinct=True)))
    order = ["easy", "medium", "hard", "unknown"]
    rows = [{"difficulty": d, "tasks": counts.get(d, 0), "share": counts.get(d, 0) / total if total else None}
            for d in order if d in counts or d != "unknown"]
    return {"rows": rows, "total": total, "statuses": tf.status}


# --- overview -----------------------------------------------------------------------------------


@cached
def overview(af: AnalyticsFilter) -> dict:
    s = summarise(_distribution(af.trajectories(), []))
    return {**s, "pass_rate": _rate(s["passed"], s["trajectories"]), "mean_turns": s["turns"],
            "batches": RolloutBatch.objects.count(),
            "running": RolloutBatch.objects.filter(status__in=["queued", "running"]).count()}


def trajectory_list(af: AnalyticsFilter, *, passed: str = "", failure: str = "", failed_checks: int | None = None):
    """The trajectories behind a chart element (the failure page's bars open this)."""
    qs = af.trajectories()
    if passed in ("yes", "no"):
        qs = qs.filter(passed=passed == "yes")
    if failure:
        qs = qs.filter(failure="" if failure == "(none)" else failure)
    if failed_checks is not None:
        qs = qs.filter(passed=False, trial__isnull=False).annotate(k=_failed_checks_subquery()).filter(k=failed_checks)
    return qs.select_related("task", "batch").order_by("-id")


def trial_outcomes(trial_ids: list[int]) -> dict[int, dict]:
    """Per trial: tests passed / failed / errored (for transcript lists)."""
    out: dict[int, dict] = {}
    for trial_id, outcome, n in (TestResult.objects.filter(trial_id__in=trial_ids).values("trial_id", "outcome")
                                 .annotate(n=Count("id")).values_list("trial_id", "outcome", "n")):
        out.setdefault(trial_id, {})[outcome] = n
    return out

