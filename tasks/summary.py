"""The task list's summary columns and labels, written in this one place.

Task.review_state, n_tests, repair_rounds, pass_rate, n_rollouts, search_document, finding_kinds
and validation_failure are
denormalised from append-only records (decisions, trials, repairs, trajectories) so that the task
list filters and sorts 10,000+ tasks on indexed columns; `expected_summary` recomputes them from
the records and a test checks that the two agree. TaskLabel rows carry the skill tags,
categories, top-level categories and task families that the list filters and analytics group by.
"""
from __future__ import annotations

import json
import tomllib
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.db import transaction

from . import consensus
from .generation import difficulty_of
from .models import (
    Decision,
    LabelKind,
    ReviewState,
    Task,
    TaskLabel,
    Trajectory,
    TrajectoryStatus,
    TrialKind,
    Validation,
    ValidationStatus,
)

FAMILIES_FILE = Path(__file__).resolve().parent / "families.json"

def standing_decision(task: Task) -> Decision | None:
    """The decision in force on the task's current version: the newest one on its content hash
    that is neither withdrawn by an undo nor itself such a withdrawal."""
    if task.current_version_id is None:
        return None
    return (Decision.objects.filter(task=task, content_hash=task.current_version.content_hash,
                                    withdraws__isnull=True, withdrawn_by__isnull=True)
            .order_by("-id").first())


def version_findings(version, *, rechecks: bool = True) -> tuple[list[str], str, str]:
    """(error-level finding kinds, failure type, reason) over every finished validation of the
    version, oldest first: one failed validation counts however many passed after it (a flaky
    verifier passes sometimes). The failure is the first validation's that failed; "" when none
    did. `rechecks=False` leaves out reviewers' re-checks."""
    if version is None:
        return [], "", ""
    done = Validation.objects.filter(version=version, status=ValidationStatus.DONE).order_by("id")
    if not rechecks:
        done = done.filter(recheck__isnull=True)
    kinds: list[str] = []
    failure = reason = ""
    for validation in done.only("static_findings", "accepted", "failure", "reason"):
        for f in validation.static_findings or []:
            if f.get("severity") == "error" and f.get("check") and f["check"] not in kinds:
                kinds.append(f["check"])
        if not validation.accepted and not failure:
            failure, reason = validation.failure, validation.reason
    return kinds, failure, reason


def expected_summary(task: Task) -> dict:
    """The summary columns recomputed from the records."""
    version = task.current_version
    decision = standing_decision(task)
    n_tests = None
    if version is not None:
        oracle = version.trials.filter(kind=TrialKind.ORACLE).order_by("-id").first()
        if oracle is not None:
            n_tests = oracle.tests.count() or None
    finished = Trajectory.objects.filter(task=task, version=version, status=TrajectoryStatus.DONE) \
        if version is not None else Trajectory.objects.none()
    n = finished.count()
    passed = finished.filter(passed=True).count()
    instruction = version.files.get("instruction.md", "") if version is not None else ""
    kinds, failure, _reason = version_findings(version)
    return {
        # several required reviews, agreement and adjudication: tasks.consensus (one review: `decision`)
        "review_state": consensus.state_of(task) if decision else ReviewState.UNREVIEWED,
        "n_tests": n_tests,
        "repair_rounds": task.repairs.count(),
        "pass_rate": (passed / n) if n else None,
        "n_rollouts": n,
        "search_document": f"{task.name}\n{instruction}"[:20000],
        "finding_kinds": f",{','.join(kinds)}," if kinds else "",
        "validation_failure": failure,
    }


def refresh_summary(task_or_id: Task | int) -> Task:
    task_id = task_or_id.pk if isinstance(task_or_id, Task) else task_or_id
    task = Task.objects.select_related("current_version").get(pk=task_id)
    fields = expected_summary(task)
    Task.objects.filter(pk=task_id).update(**fields)
    for name, value in fields.items():
        setattr(task, name, value)
    return task


@lru_cache(maxsize=1)
def families() -> dict[str, str]:
    """Category slug (fine-grained or top-level) -> task family. FACET_TASK_FAMILIES names a JSON
    file with the same shape as tasks/families.json to use another mapping."""
    path = Path(settings.FACET_TASK_FAMILIES or FAMILIES_FILE)
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {slug: family for family, slugs in data.get("families", {}).items() for slug in slugs}


def labels_for(task: Task) -> set[tuple[str, str]]:
    """(kind, value) pairs: from the scenario's skills for generated tasks, from task.toml's
    metadata for imported ones."""
    labels: set[tuple[str, str]] = set()
    categories: list = []
    if task.scenario_id:
        for skill in task.scenario.pair.ordered_skills():
            tag = skill.key.rsplit("/", 1)[-1].split(":")[-1]
            if tag:
                labels.add((LabelKind.TAG, tag[:200]))
            # The skill's current version carries a reviewer's later override (or reclassification).
            current = type(skill).objects.current().filter(key=skill.key).select_related("category__parent").first()
            category = (current or skill).category
            if category is not None:
                categories.append(category)
    elif task.current_version_id:
        try:
            meta = tomllib.loads(task.current_version.files.get("task.toml", "")).get("metadata", {})
        except tomllib.TOMLDecodeError:
            meta = {}
        for tag in meta.get("tags", []) or []:
            if isinstance(tag, str) and tag:
                labels.add((LabelKind.TAG, tag[:200]))
        if isinstance(meta.get("category"), str) and meta["category"]:
            from skills.models import Category

            found = Category.objects.filter(slug=meta["category"]).select_related("parent").first()
            if found is not None:
                categories.append(found)
            else:
                labels.add((LabelKind.CATEGORY, meta["category"][:200]))
    labels.add((LabelKind.DIFFICULTY, _difficulty(task)))
    fam = families()
    for category in categories:
        labels.add((LabelKind.CATEGORY, category.slug))
        top = category.parent or category
        labels.add((LabelKind.DOMAIN, top.slug))
        family = fam.get(category.slug) or fam.get(top.slug)
        if family:
            labels.add((LabelKind.FAMILY, family))
    return labels


def _difficulty(task: Task) -> str:
    """The scenario's intended difficulty for a generated task; an imported one's task.toml
    [metadata] difficulty (anything but easy/medium/hard counts as unknown)."""
    if task.scenario_id or not task.current_version_id:
        return difficulty_of(task.scenario if task.scenario_id else None)
    try:
        value = tomllib.loads(task.current_version.files.get("task.toml", "")).get("metadata", {}).get("difficulty")
    except tomllib.TOMLDecodeError:
        value = None
    return value if value in ("easy", "medium", "hard") else "unknown"


def relabel_skill_tasks(skill_id: int) -> int:
    """Labels of every task built from any version of the skill, after its category changed
    (settings.FACET_CATEGORY_CHANGED_JOB). Returns how many tasks were relabelled."""
    from skills.models import Skill

    key = Skill.objects.filter(pk=skill_id).values_list("key", flat=True).first()
    if key is None:
        return 0
    tasks = Task.objects.filter(scenario__pair__skills__key=key).distinct()
    for task in tasks:
        set_labels(task)
    return len(tasks)


def set_labels(task: Task) -> None:
    wanted = labels_for(task)
    with transaction.atomic():
        have = set(TaskLabel.objects.filter(task=task).values_list("kind", "value"))
        stale = have - wanted
        for kind, value in stale:
            TaskLabel.objects.filter(task=task, kind=kind, value=value).delete()
        TaskLabel.objects.bulk_create([TaskLabel(task=task, kind=k, value=v) for k, v in wanted - have],
                                      ignore_conflicts=True)
