"""Deciding and storing one chunk of new skill versions during ingest: filter verdicts, the safety
scan of every text file, credential requirements, categories from the trained classifier, and
duplicate resolution that keeps the right copy (facet_site/lib/skill_duplicates.py).

Statuses: any verdict rejects a skill; a suspicious safety report holds it (kept out of synthesis,
listed in the safety review queue) when nothing rejects it; otherwise it is accepted. Publisher
taint runs after each batch over the whole corpus, so an unsafe skill found today makes the
publisher's skills stored yesterday suspicious too.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from django.conf import settings
from django.db import transaction

from facet_site.lib import skill_duplicates, skill_filters, skill_publishers, skill_safety
from facet_site.lib.skillformat import ParsedSkill, SourceProblem

from . import classification, labelled_sets, services
from .models import (
    Category,
    CategorySource,
    IngestBatch,
    SafetyLevel,
    SafetyReview,
    Skill,
    SkillFile,
    SkillStatus,
    Verdict,
    VerdictKind,
)

DUPLICATE_KINDS = (VerdictKind.DUPLICATE, VerdictKind.NEAR_DUPLICATE)


# --- bad input ------------------------------------------------------------------------------------


def _has_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_nul(v) for v in value)
    return False


def nul_problem(parsed: ParsedSkill) -> SourceProblem | None:
    """A skill with a NUL byte anywhere it would be stored is refused on its own: PostgreSQL text
    and JSON cannot hold U+0000, and one such value would otherwise fail its whole chunk."""
    for name in ("name", "description", "body", "frontmatter", "slug", "owner", "key", "provenance", "steps",
                 "inputs", "outputs", "tools", "install", "required_env"):
        if _has_nul(getattr(parsed, name, None)):
            return SourceProblem(path=parsed.skill_md_path, field=name,
                                 message=f"{name} contains a NUL byte (0x00); the skill was not stored")
    for f in parsed.files:
        if _has_nul(f.path) or _has_nul(f.text):
            return SourceProblem(path=parsed.skill_md_path, field="files",
                                 message=f"{f.path!r} contains a NUL byte (0x00); the skill was not stored")
    return None


# --- categories -----------------------------------------------------------------------------------


@lru_cache(maxsize=2)
def _classifier(signature: str) -> classification.Classifier:
    return labelled_sets.default_classifier(services.embed)


def classifier() -> classification.Classifier:
    """The trained classifier for the configured embedder, trained once per process."""
    return _classifier(services.embedder().signature)


def category_ids() -> dict[str, int]:
    return dict(Category.objects.filter(parent__isnull=False).values_list("slug", "id"))


def classify_skills(*, names, descriptions, bodies, name_description_vectors) -> list[classification.Classification]:
    return classification.classify(services.embed, names=names, descriptions=descriptions, bodies=bodies,
                                   classifier=classifier(), name_description_vectors=name_description_vectors)


def category_fields(result: classification.Classification | None, ids: dict[str, int]) -> dict:
    if result is None or result.category not in ids:
        return dict(category_id=None, category_confidence=None, category_source="", category_runner_up_id=None,
                    category_runner_up_confidence=None)
    return dict(category_id=ids[result.category], category_confidence=result.confidence,
                category_source=CategorySource.CLASSIFIER, category_runner_up_id=ids.get(result.runner_up),
                category_runner_up_confidence=result.runner_up_confidence)


# --- safety ---------------------------------------------------------------------------------------


def safety_verdicts(report: skill_safety.SafetyReport) -> list[Verdict]:
    if report.level != skill_safety.UNSAFE:
        return []
    unsafe = [f for f in report.findings if f.level == skill_safety.UNSAFE]
    where = "; ".join(f"{f.rule_id} at {f.path}:{f.line}" for f in unsafe[:3])
    return [Verdict(kind=VerdictKind.UNSAFE, reason=f"Safety scan: {where}"[:2000], evidence=report.to_dict())]


def filter_verdicts(findings) -> list[Verdict]:
    return [
        Verdict(kind=f.kind, reason=f.reason, evidence={"match": f.evidence, "path": f.path, "line": f.line})
        for f in findings
    ]


def status_for(verdicts, safety_level: str, review: str = "") -> str:
    if verdicts:
        return SkillStatus.REJECTED
    if safety_level == SafetyLevel.SUSPICIOUS and review != SafetyReview.CLEARED:
        return SkillStatus.HELD
    return SkillStatus.ACCEPTED


def level_with_filters(report: skill_safety.SafetyReport, findings) -> str:
    # The rule-based filters' destructive-command and malware rules are unsafe too.
    if any(f.kind == skill_filters.UNSAFE for f in findings):
        return SafetyLevel.UNSAFE
    return report.level


def taint_publishers() -> list[int]:
    """Every current clean skill of a publisher with an unsafe current skill becomes suspicious
    (held when it was accepted), unless a reviewer cleared it. Returns the ids changed."""
    unsafe: dict[str, list[str]] = {}  # owner -> keys of their unsafe skills, a security tool's test samples left out
    for owner, key, provenance in (Skill.objects.current().exclude(owner="").filter(safety_level=SafetyLevel.UNSAFE)
                                   .values_list("owner", "key", "provenance")):
        provenance = provenance or {}
        if not skill_publishers.is_test_fixture(provenance.get("path") or key, provenance.get("parent_key")):
            unsafe.setdefault(owner, []).append(key)
    changed = []
    for skill in (Skill.objects.current().filter(owner__in=unsafe, safety_level=SafetyLevel.CLEAN)
                  .exclude(safety_review=SafetyReview.CLEARED).only("id", "owner", "safety_report", "status")):
        siblings = sorted(unsafe[skill.owner])[:5]
        report = dict(skill.safety_report or {"level": "clean", "findings": [], "examples": []})
        report["findings"] = [*report.get("findings", []), skill_publishers.taint_finding(skill.owner, siblings).to_dict()]
        report["level"] = SafetyLevel.SUSPICIOUS
        new_status = SkillStatus.HELD if skill.status == SkillStatus.ACCEPTED else skill.status
        Skill.objects.filter(pk=skill.pk).update(safety_level=SafetyLevel.SUSPICIOUS, safety_report=report, status=new_status)
        changed.append(skill.pk)
    return changed


# --- duplicates -----------------------------------------------------------------------------------


def _copy(skill_id: int, provenance: dict, safety: str) -> skill_duplicates.Copy:
    return skill_duplicates.copy_from_provenance(skill_id, provenance or {}, safety=safety)


def displace(*, loser: Skill, winner_id: int, kind: str, reason: str, evidence: dict) -> None:
    """A stored kept copy loses to a better one that arrived later: it is rejected as its duplicate."""
    Verdict.objects.create(skill=loser, kind=kind, duplicate_of_id=winner_id, reason=reason[:2000], evidence=evidence)
    Skill.objects.filter(pk=loser.pk).update(status=SkillStatus.REJECTED)


def stored_fields(parsed: ParsedSkill) -> dict:
    fields = services._skill_fields(parsed)
    # Where SKILL.md's parts sit, so `facet refilter` can rebuild it with the same line numbers.
    fields["provenance"] = {**fields["provenance"], "layout": {
        "frontmatter_text": parsed.frontmatter_text, "frontmatter_start_line": parsed.frontmatter_start_line,
        "body_start_line": parsed.body_start_line,
    }}
    return fields


# --- one chunk ------------------------------------------------------------------------------------


def store_fresh(batch: IngestBatch, fresh: list[tuple[str, ParsedSkill, Skill | None]], index, summary,
                seen_hashes: dict[str, int]) -> None:
    """Store new skills and new versions (`fresh`: key, parsed skill, current version or None)."""
    readable = [i for i, (_, p, _) in enumerate(fresh) if not p.unreadable_reason]
    vectors = np.zeros((len(fresh), 384), dtype=np.float32)
    with summary.timing("embed"):
        if readable:
            vectors[readable] = services.embed([
                services.embedding_text(name=fresh[i][1].name, description=fresh[i][1].description) for i in readable
            ])
    classified: dict[int, classification.Classification] = {}
    with summary.timing("classify"):
        if readable:
            results = classify_skills(
                names=[fresh[i][1].name for i in readable], descriptions=[fresh[i][1].description for i in readable],
                bodies=[fresh[i][1].body for i in readable], name_description_vectors=vectors[readable],
            )
            classified = dict(zip(readable, results))
        ids = category_ids()
    with summary.timing("filter"):
        findings_by_item = [skill_filters.evaluate(p) for _, p, _ in fresh]
        requirements_by_item = [skill_filters.requirements(p).to_dict() for _, p, _ in fresh]
    with summary.timing("safety"):
        reports = [skill_safety.scan_parsed_skill(p) for _, p, _ in fresh]

    hashes = [p.content_hash for _, p, _ in fresh]
    # Stored copies with the same content: a kept (accepted or held) one first, else any.
    stored_by_hash: dict[str, tuple[int, str]] = {}
    for skill_id, content_hash, status in (
        Skill.objects.current().filter(content_hash__in=hashes).exclude(key__in=[k for k, _, _ in fresh])
        .order_by("id").values_list("id", "content_hash", "status")
    ):
        if content_hash not in stored_by_hash or (stored_by_hash[content_hash][1] == SkillStatus.REJECTED
                                                  and status != SkillStatus.REJECTED):
            stored_by_hash[content_hash] = (skill_id, status)
    matches = index.best_match(vectors)
    threshold = settings.FACET_NEAR_DUPLICATE_THRESHOLD

    kept_in_chunk: dict[int, int] = {}  # chunk position -> skill id, for near duplicates within the chunk
    with transaction.atomic():
        for i, (key, parsed, existing) in enumerate(fresh):
            findings = findings_by_item[i]
            report = reports[i]
            level = level_with_filters(report, findings)
            verdicts = filter_verdicts(findings) + safety_verdicts(report)
            candidate = not verdicts  # only copies that would be accepted or held compete to be kept

            match_id, kind, detail = None, None, {}
            exact = stored_by_hash.get(parsed.content_hash)
            if exact and exact[0] != getattr(existing, "id", None):
                match_id, kind, detail = exact[0], VerdictKind.DUPLICATE, {"content_hash": parsed.content_hash}
            elif parsed.content_hash in seen_hashes:
                match_id, kind, detail = seen_hashes[parsed.content_hash], VerdictKind.DUPLICATE, {"content_hash": parsed.content_hash}
            elif i in readable and candidate:
                best_id, score = matches[i]
                for j, kept_id in kept_in_chunk.items():
                    s = float(vectors[i] @ vectors[j])
                    if s > score and not index.is_discarded(kept_id):
                        best_id, score = kept_id, s
                if best_id is not None and score >= threshold and best_id != getattr(existing, "id", None):
                    match_id, kind = best_id, VerdictKind.NEAR_DUPLICATE
                    detail = {"cosine": round(score, 4), "threshold": threshold}

            displaced: Skill | None = None
            decision = None
            if match_id is not None:
                other = Skill.objects.filter(pk=match_id).only("id", "provenance", "safety_level", "status").first()
                other_kept = other is not None and other.status != SkillStatus.REJECTED
                if candidate and other_kept:
                    mine = skill_duplicates.Copy(**{**_copy(0, parsed.provenance, level).__dict__, "order": 1 << 62})
                    decision = skill_duplicates.decide(mine, _copy(other.pk, other.provenance, other.safety_level))
                    if decision.kept.id == 0:
                        displaced = other
                if displaced is None and (other_kept or not candidate or kind == VerdictKind.DUPLICATE):
                    what = "Same content hash as" if kind == VerdictKind.DUPLICATE else \
                        f"Embedding cosine {detail.get('cosine', 0):.3f} (threshold {threshold}) to"
                    why = f" Kept #{match_id}: {decision.reason.replace('#0', 'this copy')}." if decision else ""
                    verdicts.append(Verdict(kind=kind, duplicate_of_id=match_id, reason=f"{what} skill #{match_id}.{why}",
                                            evidence={**detail, **({"kept_because": decision.rule} if decision else {})}))

            carried = {}
            version_number = 1
            if existing is not None:
                version_number = existing.version_number + 1
                if existing.category_source == CategorySource.OVERRIDE:
                    # A reviewer's decision outlives a re-publication of the same skill.
                    carried = dict(
                        category_id=existing.category_id, category_source=CategorySource.OVERRIDE,
                        category_overridden_by_id=existing.category_overridden_by_id,
                        category_overridden_at=existing.category_overridden_at,
                    )
                Skill.objects.filter(pk=existing.pk).update(is_current=False)
            cat = carried or category_fields(classified.get(i), ids)
            skill = Skill.objects.create(
                key=key, version_number=version_number, is_current=True, previous_version=existing,
                source=batch.source_label[:200], batch=batch, status=status_for(verdicts, level),
                embedding=vectors[i].tobytes() if i in readable else None,
                embedding_model=services.embedder().signature if i in readable else "",
                safety_level=level, safety_report=report.to_dict(), private_resources=requirements_by_item[i],
                **stored_fields(parsed), **cat,
            )
            SkillFile.objects.bulk_create([
                SkillFile(skill=skill, path=f.path[:500], size=f.size, sha256=f.sha256, text=f.text, is_binary=f.is_binary)
                for f in parsed.files
            ])
            for v in verdicts:
                v.skill = skill
            Verdict.objects.bulk_create(verdicts)

            if displaced is not None:
                what = "Same content hash as" if kind == VerdictKind.DUPLICATE else \
                    f"Embedding cosine {detail.get('cosine', 0):.3f} (threshold {threshold}) to"
                displace(loser=displaced, winner_id=skill.pk, kind=kind,
                         reason=f"{what} skill #{skill.pk}, which arrived later and is kept: "
                                f"{decision.reason.replace('#0', f'#{skill.pk}')}.",
                         evidence={**detail, "kept_because": decision.rule, "displaced_by": skill.pk})
                index.discard(displaced.pk)
                summary.displaced += 1
                for h, sid in list(seen_hashes.items()):
                    if sid == displaced.pk:
                        seen_hashes[h] = skill.pk
                if exact and exact[0] == displaced.pk:
                    stored_by_hash[parsed.content_hash] = (skill.pk, skill.status)

            if not any(v.kind in DUPLICATE_KINDS for v in verdicts):
                seen_hashes[parsed.content_hash] = skill.id
            else:
                seen_hashes.setdefault(parsed.content_hash, skill.id)
            if existing is None:
                summary.ingested += 1
            else:
                summary.updated += 1
            if verdicts:
                for v_kind in sorted({v.kind for v in verdicts}):
                    summary.rejected_by_reason[v_kind] += 1
                if any(v.kind in DUPLICATE_KINDS for v in verdicts):
                    summary.duplicates += 1
            else:
                if skill.status == SkillStatus.HELD:
                    summary.held += 1
                else:
                    summary.accepted += 1
                kept_in_chunk[i] = skill.id
                if i in readable:
                    index.add([skill.id], vectors[i : i + 1])
