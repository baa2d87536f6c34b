"""Gold checks: admins and leads mark tasks whose correct verdict is known; the multi-review
queue mixes them in at its policy's rate without telling the reviewer (assignment.next_task);
every decision on a gold task's judged version records whether it matched (consensus.note), and
each reviewer's accuracy on them is reported with a Wilson interval."""
from __future__ import annotations

from django.db.models import Count, Q

from facet_site.lib.stats import wilson_interval
from facet_site.roles import can_lead

from .models import DecisionNote, GoldTask, Task
from .review import NotAllowed, ReviewError, check_decision


def mark(task: Task, *, user, verdict: str, reason: str = "", note: str = "") -> GoldTask:
    """Mark the task's current version as gold with its known verdict (again: the new verdict)."""
    if not can_lead(user):
        raise NotAllowed("Only admins and leads mark gold tasks.")
    reason = (reason or "").strip()
    check_decision(verdict, reason)
    if task.current_version_id is None:
        raise ReviewError(f"Task #{task.pk} has no version yet: there is nothing to judge.")
    gold, _ = GoldTask.objects.update_or_create(task=task, defaults={
        "content_hash": task.current_version.content_hash, "verdict": verdict, "reason": reason,
        "note": (note or "").strip(), "marked_by": user})
    return gold


def unmark(task: Task, *, user) -> bool:
    if not can_lead(user):
        raise NotAllowed("Only admins and leads mark gold tasks.")
    return bool(GoldTask.objects.filter(task=task).delete()[0])


def gold_tasks():
    return GoldTask.objects.select_related("task__current_version", "marked_by").order_by("-id")


def accuracy(*, since=None) -> list[dict]:
    """Per reviewer: gold decisions, how many matched the known verdict, the share and its interval
    (undo entries and withdrawn decisions are left out)."""
    notes = DecisionNote.objects.filter(gold_correct__isnull=False, decision__withdraws__isnull=True,
                                        decision__withdrawn_by__isnull=True)
    if since is not None:
        notes = notes.filter(decision__created_at__gte=since)
    rows = []
    for row in (notes.values("decision__author__username")
                .annotate(n=Count("id"), correct=Count("id", filter=Q(gold_correct=True)))
                .order_by("decision__author__username")):
        low, high = wilson_interval(row["correct"], row["n"])
        rows.append({"reviewer": row["decision__author__username"] or "(deleted user)", "n": row["n"],
                     "correct": row["correct"], "accuracy": row["correct"] / row["n"], "low": low, "high": high})
    return rows
