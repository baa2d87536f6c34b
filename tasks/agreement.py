"""Agreement between reviewers and the reviewers' own figures, from the decisions on the tasks'
current versions; the maths is facet_site.lib.agreement (Django-free).

A rating is a reviewer's latest live decision on a task's current version (adjudications are not
ratings: they settle). Items are tasks with two or more ratings. Measured:

- overall and per category (TaskLabel categories): Fleiss' kappa and raw agreement of the verdicts;
- per reviewer pair: Cohen's kappa of the two reviewers' verdicts on the tasks both rated;
- per reason: Fleiss' kappa of "gave this reason or not" over the ratings of each task;
- per task: the ratings and whether they agree (verdict, and reason unless it approves).

Reviewers' figures per period: decisions, decisions per day, median seconds per task (from the
queue lock or the gap since the previous decision, consensus._seconds), agreement with the final
decision of tasks that settled with two or more reviews, the share overturned on adjudication,
and accuracy on gold tasks (tasks.gold).
"""
from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from datetime import timedelta
from itertools import combinations

from django.db.models import F
from django.utils import timezone

from facet_site.lib.agreement import agreement as measure

from . import gold
from .models import Decision, DecisionNote, LabelKind, RejectReason, ReviewState, TaskLabel

FINAL = {ReviewState.APPROVED: "approve", ReviewState.REJECTED: "reject", ReviewState.NEEDS_FIX: "needs_fix"}
PERIODS = {"7": 7, "30": 30, "90": 90, "all": None}


def since(days: int | None):
    return timezone.now() - timedelta(days=days) if days else None


def ratings(*, run=None, since=None) -> dict[int, list[dict]]:
    """task id -> its ratings, in the order the reviewers first decided."""
    qs = (Decision.objects.filter(content_hash=F("task__current_version__content_hash"), withdraws__isnull=True,
                                  withdrawn_by__isnull=True)
          .exclude(note__adjudication=True).order_by("id"))
    if run is not None:
        qs = qs.filter(task__run=run)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    per_task: dict[int, dict] = defaultdict(dict)
    for d in qs.values("id", "task_id", "author__username", "verdict", "reason", "task__name", "task__review_state"):
        per_task[d["task_id"]][d["author__username"] or "(deleted user)"] = d
    return {t: list(by.values()) for t, by in per_task.items()}


def _key(r: dict) -> str:
    return r["verdict"] if r["verdict"] == "approve" else f"{r['verdict']}:{r['reason']}"


def figures(*, run=None, since=None) -> dict:
    rated = {t: rs for t, rs in ratings(run=run, since=since).items() if len(rs) >= 2}
    overall = measure([[r["verdict"] for r in rs] for rs in rated.values()])
    tasks = [{"task_id": t, "name": rs[0]["task__name"], "state": rs[0]["task__review_state"],
              "ratings": [{"reviewer": r["author__username"], "verdict": r["verdict"], "reason": r["reason"]} for r in rs],
              "agreed": len({_key(r) for r in rs}) == 1} for t, rs in sorted(rated.items())]

    by_pair: dict[tuple[str, str], list[list[str]]] = defaultdict(list)
    for rs in rated.values():
        by_name = {r["author__username"]: r["verdict"] for r in rs}
        for a, b in combinations(sorted(by_name), 2):
            by_pair[(a, b)].append([by_name[a], by_name[b]])
    pairs = [{"a": a, "b": b, **measure(items, pairwise=True).as_dict()} for (a, b), items in sorted(by_pair.items())]

    labels = dict(RejectReason.choices)
    used = {r["reason"] for rs in rated.values() for r in rs if r["reason"]}
    reasons = [{"reason": reason, "label": labels.get(reason, reason),
                **measure([[r["reason"] == reason for r in rs] for rs in rated.values()]).as_dict()}
               for reason in sorted(used)]

    by_category: dict[str, list[list[str]]] = defaultdict(list)
    for task_id, value in TaskLabel.objects.filter(task_id__in=list(rated), kind=LabelKind.CATEGORY) \
            .values_list("task_id", "value"):
        by_category[value].append([r["verdict"] for r in rated[task_id]])
    categories = [{"category": c, **measure(items).as_dict()} for c, items in sorted(by_category.items())]
    return {"overall": overall.as_dict(), "tasks": tasks, "pairs": pairs, "reasons": reasons,
            "categories": categories, "agreed": sum(1 for t in tasks if t["agreed"])}


def overall(*, run=None) -> dict:
    rated = [rs for rs in ratings(run=run).values() if len(rs) >= 2]
    return measure([[r["verdict"] for r in rs] for rs in rated]).as_dict()


CSV_FIELDS = ["kind", "scope", "items", "ratings", "raw", "raw_low", "raw_high", "kappa", "kappa_low", "kappa_high",
              "measure"]


def as_csv(f: dict) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    w.writerow({"kind": "overall", "scope": "all", **f["overall"]})
    for p in f["pairs"]:
        w.writerow({"kind": "pair", "scope": f"{p['a']} + {p['b']}", **p})
    for r in f["reasons"]:
        w.writerow({"kind": "reason", "scope": r["reason"], **r})
    for c in f["categories"]:
        w.writerow({"kind": "category", "scope": c["category"], **c})
    for t in f["tasks"]:
        w.writerow({"kind": "task", "scope": f"#{t['task_id']}", "items": 1, "ratings": len(t["ratings"]),
                    "raw": 1.0 if t["agreed"] else 0.0, "measure": "raw"})
    return out.getvalue()


# --- reviewers ----------------------------------------------------------------------------------


def reviewers(*, days: int | None = 30) -> list[dict]:
    """Per reviewer over the period (all time when `days` is None)."""
    start = since(days)
    qs = Decision.objects.filter(withdraws__isnull=True).select_related("author", "task__current_version", "note")
    if start is not None:
        qs = qs.filter(created_at__gte=start)
    adjudicated = {}
    for n in DecisionNote.objects.filter(adjudication=True, decision__withdraws__isnull=True,
                                         decision__withdrawn_by__isnull=True).select_related("decision"):
        adjudicated[(n.decision.task_id, n.decision.content_hash)] = n.decision.verdict
    several = {t for t, rs in ratings().items() if len(rs) >= 2}
    rows: dict[str, dict] = {}
    for d in qs.order_by("id"):
        name = d.author.get_username() if d.author_id else "(deleted user)"
        row = rows.setdefault(name, {"reviewer": name, "decisions": 0, "adjudications": 0, "seconds": [],
                                     "final_n": 0, "final_agree": 0, "adjudicated_n": 0, "overturned": 0})
        note = getattr(d, "note", None)  # a decision made before notes existed has none
        if note is not None and note.adjudication:
            row["adjudications"] += 1
            continue
        row["decisions"] += 1
        if note is not None and note.seconds is not None:
            row["seconds"].append(note.seconds)
        task = d.task
        on_current = task.current_version_id and task.current_version.content_hash == d.content_hash
        if on_current and task.review_state in FINAL and task.pk in several:
            row["final_n"] += 1
            row["final_agree"] += d.verdict == FINAL[task.review_state]
        final = adjudicated.get((d.task_id, d.content_hash))
        if final is not None:
            row["adjudicated_n"] += 1
            row["overturned"] += d.verdict != final
    accuracy = {r["reviewer"]: r for r in gold.accuracy(since=start)}
    span = days or max(1, (timezone.now() - (qs.order_by("created_at").values_list("created_at", flat=True).first()
                                             or timezone.now())).days + 1)
    out = []
    for name, row in sorted(rows.items()):
        seconds = row.pop("seconds")
        g = accuracy.get(name)
        out.append(row | {
            "per_day": round(row["decisions"] / span, 2),
            "median_seconds": statistics.median(seconds) if seconds else None,
            "timed": len(seconds),
            "final_agreement": row["final_agree"] / row["final_n"] if row["final_n"] else None,
            "overturned_share": row["overturned"] / row["adjudicated_n"] if row["adjudicated_n"] else None,
            "gold_n": g["n"] if g else 0, "gold_accuracy": g["accuracy"] if g else None,
            "gold_low": g["low"] if g else None, "gold_high": g["high"] if g else None,
        })
    return out
