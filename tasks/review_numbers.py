"""The review numbers of the overview and review pages: the funnel with its two review stages,
tasks by review state, decisions by reason, reviewer throughput and runs side by side. Every count
comes with the task-filter query that lists exactly the tasks it counts."""
from __future__ import annotations

from datetime import date, timedelta

from django.db.models import Count, Exists, F, OuterRef, Q
from django.db.models.functions import TruncDate
from django.utils import timezone

from . import funnel as construction_funnel
from .filters import TaskFilter
from .models import Decision, RejectReason, ReviewState, ReviewVerdict, Task, TaskStatus, Validation, ValidationStatus


def funnel(run=None) -> list[dict]:
    """Table 5 (tasks.funnel.funnel) plus the two review stages, each row with the task
    filter query that lists exactly the tasks it counts."""
    rows = construction_funnel.funnel(run)
    run_q = [("run", str(run.pk))] if run is not None else []
    for row in rows:
        row["query"] = TaskFilter.from_query(dict([("stage", row["stage"])] + run_q)).query_string()
    final = rows[-1]["count"]
    validated = Task.objects.filter(imported=False, status=TaskStatus.VALIDATED)
    if run is not None:
        validated = validated.filter(run=run)
    reviewed = validated.exclude(review_state=ReviewState.UNREVIEWED).count()
    approved = validated.filter(review_state=ReviewState.APPROVED).count()
    decided = [s for s in ReviewState.values if s != ReviewState.UNREVIEWED]
    rows.append({"stage": "reviewed", "label": "Reviewed by a person", "count": reviewed,
                 "retention": round(100 * reviewed / final, 2) if final else None,
                 "query": TaskFilter.from_query({"stage": "final_validated", "review": decided, **dict(run_q)}).query_string()})
    rows.append({"stage": "approved", "label": "Approved", "count": approved,
                 "retention": round(100 * approved / reviewed, 2) if reviewed else None,
                 "query": TaskFilter.from_query({"stage": "final_validated", "review": "approved", **dict(run_q)}).query_string()})
    return rows


def review_states(run=None) -> list[dict]:
    """Every task (imported ones too) by where its review stands."""
    qs = Task.objects.all() if run is None else Task.objects.filter(run=run)
    counts = dict(qs.values_list("review_state").annotate(n=Count("id")).order_by())
    run_q = {"run": str(run.pk)} if run is not None else {}
    return [{"state": s, "label": label, "count": counts.get(s, 0),
             "query": TaskFilter.from_query({"review": s, **run_q}).query_string()} for s, label in ReviewState.choices]


def reasons(run=None) -> list[dict]:
    """Tasks by the reason of the decision in force on their current version (the newest on the
    current hash that is neither withdrawn nor a withdrawal), per verdict, in one grouped query.
    The predicate is TaskFilter's `reason` and `review`, so each number is the length of the list
    its link opens (a test checks it)."""
    base = {"run": str(run.pk)} if run is not None else {}
    # NOT EXISTS rather than the reverse join for "not withdrawn": PostgreSQL plans it far better
    withdrawn = Decision.objects.filter(withdraws=OuterRef("pk"))
    newer = Decision.objects.filter(task=OuterRef("task"), content_hash=OuterRef("content_hash"), id__gt=OuterRef("id"),
                                    withdraws__isnull=True).exclude(Exists(Decision.objects.filter(withdraws=OuterRef("pk"))))
    decisions = Decision.objects.filter(content_hash=F("task__current_version__content_hash"), withdraws__isnull=True) \
        .exclude(reason="").exclude(Exists(withdrawn)).exclude(Exists(newer))
    if run is not None:
        decisions = decisions.filter(task__run=run)
    counts = {(r["reason"], r["task__review_state"]): r["n"] for r in
              decisions.values("reason", "task__review_state").annotate(n=Count("task", distinct=True)).order_by()}
    rows = []
    for reason, label in RejectReason.choices:
        row = {"reason": reason, "label": label, "total": 0, "cells": []}
        for state in (ReviewState.REJECTED, ReviewState.NEEDS_FIX, ReviewState.APPROVED):
            n = counts.get((reason, state), 0)
            query = TaskFilter.from_query({"reason": reason, "review": state, **base}).query_string()
            row["cells"].append({"state": state, "count": n, "query": query})
            row["total"] += n
        row["query"] = TaskFilter.from_query({"reason": reason, **base}).query_string()
        rows.append(row)
    return rows


def throughput(run=None, *, days: int = 30, today: date | None = None) -> dict:
    """Decisions per day and per reviewer over the last `days` days (undo entries are not
    work done and are left out; decisions later undone count, they were made)."""
    today = today or timezone.localdate()
    start = today - timedelta(days=days - 1)
    qs = Decision.objects.filter(withdraws__isnull=True)
    if run is not None:
        qs = qs.filter(task__run=run)
    recent = qs.filter(created_at__date__gte=start)
    per_day = recent.annotate(day=TruncDate("created_at")).values("day", "author__username").annotate(n=Count("id"))
    axis = [start + timedelta(days=i) for i in range(days)]
    series: dict[str, dict] = {}
    for row in per_day:
        name = row["author__username"] or "(deleted user)"
        series.setdefault(name, {})[row["day"]] = row["n"]
    week = today - timedelta(days=6)
    table = (recent.values("author__username").annotate(
        total=Count("id"), week=Count("id", filter=Q(created_at__date__gte=week)),
        approved=Count("id", filter=Q(verdict=ReviewVerdict.APPROVE)), rejected=Count("id", filter=Q(verdict=ReviewVerdict.REJECT)),
        needs_fix=Count("id", filter=Q(verdict=ReviewVerdict.NEEDS_FIX)), bulk=Count("id", filter=Q(bulk=True)),
    ).order_by("-total"))
    return {
        "days": axis,
        "series": {name: [by_day.get(d, 0) for d in axis] for name, by_day in sorted(series.items())},
        "table": [dict(r, reviewer=r["author__username"] or "(deleted user)") for r in table],
        "total": recent.count(),
        "all_time": qs.count(),
    }


def by_run(limit: int = 20) -> list[dict]:
    """The last runs side by side: seeds, validated, reviewed, approved (one grouped query)."""
    validated = Q(status=TaskStatus.VALIDATED)
    rows = (Task.objects.filter(imported=False, run__isnull=False).values("run_id", "run__name").annotate(
        seeds=Count("id"), validated=Count("id", filter=validated),
        reviewed=Count("id", filter=validated & ~Q(review_state=ReviewState.UNREVIEWED)),
        approved=Count("id", filter=validated & Q(review_state=ReviewState.APPROVED)),
    ).order_by("-run_id")[:limit])
    return list(rows)


def validation_of(task: Task) -> Validation | None:
    """The newest finished validation of the current version (what the verifier said)."""
    if task.current_version_id is None:
        return None
    return (Validation.objects.filter(version_id=task.current_version_id)
            .filter(status__in=[ValidationStatus.DONE, ValidationStatus.ERROR])
            .prefetch_related("trials__tests").order_by("-id").first())
