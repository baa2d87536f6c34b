"""Re-running classification and filters over the stored corpus (`facet reclassify`, `facet
refilter`), so rule and model updates reach skills already stored, with a count per change kind.

Manual decisions are kept: a reviewer's category override is never reclassified (nor is an answer
of a synthesis run's LLM classification stage, which a later run replaces); a reviewer's
safety decision (cleared or rejected) stands unless the scan now finds the skill unsafe.
Duplicate verdicts and reviewer rejections are kept; filter verdicts are replaced.
"""
from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import yaml
from django.db import transaction

from facet_site.lib import skill_filters, skill_safety
from facet_site.lib.skillformat import ParsedSkill, parse_skill_dir

from . import services, storing
from .models import CategorySource, SafetyLevel, SafetyReview, Skill, SkillStatus, Verdict, VerdictKind

BATCH = 256
FILTER_KINDS = (VerdictKind.UNSAFE, VerdictKind.PRIVATE, VerdictKind.NON_ACTIONABLE, VerdictKind.UNREADABLE)


def describe(command: str, summary: Counter, *, dry_run: bool = False) -> str:
    head = f"{command}: {summary.get('skills', 0)} current skills checked" + (" (dry run, nothing saved)" if dry_run else "")
    lines = [head] + [f"  {n:6d}  {kind}" for kind, n in sorted(summary.items()) if kind != "skills"]
    return "\n".join(lines) + "\n"


# --- reclassify -----------------------------------------------------------------------------------


def reclassify(*, dry_run: bool = False) -> Counter:
    summary: Counter = Counter()
    ids = storing.category_ids()
    qs = Skill.objects.current().order_by("id")
    summary["skills"] = qs.count()
    summary["kept: reviewer override"] = qs.filter(category_source=CategorySource.OVERRIDE).count()
    # an LLM stage's answer was given the classifier's as a hint already; only a new LLM run replaces it
    summary["kept: LLM answer"] = qs.filter(category_source=CategorySource.LLM).count()
    kept = [CategorySource.OVERRIDE, CategorySource.LLM]
    todo = list(qs.exclude(category_source__in=kept).exclude(embedding=None)
                .values_list("id", "name", "description", "body", "embedding", "category_id", "category_confidence"))
    summary["skipped: no text to classify"] = qs.exclude(category_source__in=kept).filter(embedding=None).count()
    changed_ids = []
    for start in range(0, len(todo), BATCH):
        rows = todo[start:start + BATCH]
        results = storing.classify_skills(
            names=[r[1] for r in rows], descriptions=[r[2] for r in rows], bodies=[r[3] for r in rows],
            name_description_vectors=np.vstack([np.frombuffer(bytes(r[4]), dtype=np.float32) for r in rows]),
        )
        with transaction.atomic():
            for row, result in zip(rows, results):
                fields = storing.category_fields(result, ids)
                if fields["category_id"] != row[5]:
                    summary["category changed"] += 1
                    changed_ids.append(row[0])
                elif fields["category_confidence"] != row[6]:
                    summary["confidence changed"] += 1
                else:
                    summary["unchanged"] += 1
                if not dry_run:
                    Skill.objects.filter(pk=row[0]).update(**fields)
    if not dry_run:
        for skill_id in changed_ids:
            services.category_changed(skill_id)
    return summary


# --- refilter -------------------------------------------------------------------------------------


def skill_md_text(skill: Skill) -> str:
    """SKILL.md rebuilt from the stored record, with the original line numbers when known."""
    layout = (skill.provenance or {}).get("layout") or {}
    if layout:
        head: list[str] = []
        if layout.get("frontmatter_start_line"):
            head = [""] * (layout["frontmatter_start_line"] - 2) + ["---", *layout["frontmatter_text"].rstrip("\n").split("\n"), "---"]
        want = max(layout.get("body_start_line", 1) - 1, 0)
        head = (head + [""] * want)[:want]
        return "\n".join(head + [skill.body])
    if skill.frontmatter:
        return "---\n" + yaml.safe_dump(skill.frontmatter, sort_keys=False, allow_unicode=True) + "---\n" + skill.body
    return skill.body


def reparse(skill: Skill, workdir: Path) -> ParsedSkill | None:
    folder = workdir / f"s{skill.pk}"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(skill_md_text(skill), encoding="utf-8")
    for f in skill.files.all():
        if f.text is None or f.path in ("SKILL.md", "_meta.json"):
            continue
        target = (folder / f.path).resolve()
        if folder.resolve() not in target.parents:
            continue  # stored paths are relative; anything else is not written
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f.text, encoding="utf-8")
    parsed = parse_skill_dir(folder, root=workdir, source_kind="directory")
    return parsed if isinstance(parsed, ParsedSkill) else None


def refilter(*, dry_run: bool = False) -> Counter:
    summary: Counter = Counter()
    qs = Skill.objects.current().order_by("id")
    summary["skills"] = qs.count()
    with tempfile.TemporaryDirectory(prefix="facet-refilter-") as tmp:
        for skill in qs.iterator(chunk_size=BATCH):
            parsed = reparse(skill, Path(tmp))
            if parsed is None:
                summary["skipped: could not rebuild"] += 1
                continue
            _refilter_one(skill, parsed, summary, dry_run=dry_run)
    if not dry_run:
        summary["publisher taint: made suspicious"] += len(storing.taint_publishers())
    return summary


def _refilter_one(skill: Skill, parsed: ParsedSkill, summary: Counter, *, dry_run: bool) -> None:
    findings = skill_filters.evaluate(parsed)
    readable = {f.path for f in parsed.files if f.text is not None} | {Path(parsed.skill_md_path).name}
    report = skill_safety.keep_unseen_findings(skill_safety.scan_parsed_skill(parsed), skill.safety_report, readable)
    level = storing.level_with_filters(report, findings)
    review = skill.safety_review
    if review and level != SafetyLevel.UNSAFE:
        level = skill.safety_level if skill.safety_level != SafetyLevel.UNSAFE else level
    new_verdicts = storing.filter_verdicts(findings) + storing.safety_verdicts(report)
    old_kinds = set(skill.verdicts.filter(kind__in=FILTER_KINDS).values_list("kind", flat=True))
    new_kinds = {v.kind for v in new_verdicts}
    for kind in sorted(new_kinds - old_kinds):
        summary[f"verdict added: {kind}"] += 1
    for kind in sorted(old_kinds - new_kinds):
        summary[f"verdict removed: {kind}"] += 1
    if level != skill.safety_level:
        summary[f"safety: {skill.safety_level} -> {level}"] += 1
    kept = list(skill.verdicts.exclude(kind__in=FILTER_KINDS).values_list("kind", flat=True))
    if review == SafetyReview.REJECTED:
        status = SkillStatus.REJECTED
    else:
        status = storing.status_for(kept + [v.kind for v in new_verdicts], level, review)
    if status != skill.status:
        summary[f"status: {skill.status} -> {status}"] += 1
    if not (new_kinds ^ old_kinds) and status == skill.status and level == skill.safety_level:
        summary["unchanged"] += 1
    if dry_run:
        return
    requirements = skill_filters.requirements(parsed).to_dict()
    with transaction.atomic():
        Verdict.objects.filter(skill=skill, kind__in=FILTER_KINDS).delete()
        for v in new_verdicts:
            v.skill = skill
        Verdict.objects.bulk_create(new_verdicts)
        # A reviewer's decision stands on the report they saw, unless the scan now finds the skill unsafe.
        keep_report = review and level != SafetyLevel.UNSAFE
        Skill.objects.filter(pk=skill.pk).update(
            status=status, safety_level=level, private_resources=requirements,
            safety_report=skill.safety_report if keep_report else report.to_dict(),
        )
