"""The reference implementation's skill-pair JSONL: pairs made elsewhere come into a run at the
judge stage, and a run's pairs go out in the same shape."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from django.db import transaction

from facet_site.lib.safe_input import bad_json_value
from skills.models import Skill, SkillStatus

from .models import CandidatePair, PairSkill, PairSource, PairVerdict, RunSkill, Stage, SynthesisRun


@dataclass
class ImportResult:
    created: int = 0
    skipped: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)


def _skill_for_reference(ref: str, summary: str) -> Skill:
    """Find a skill by key, owner/slug or name; unknown skills enter the corpus as imported records,
    rejected: only a name and a summary came with them and no filter ever read them, so they
    serve the imported pair but are never selected for synthesis (ingest the skill to use it)."""
    ref = str(ref)
    found = (Skill.objects.current().filter(key=ref).first()
             or Skill.objects.current().filter(key=f"clawhub:{ref}").first()
             or Skill.objects.current().filter(slug=ref).order_by("id").first()
             or Skill.objects.current().filter(name=ref).order_by("id").first())
    if found:
        return found
    return Skill.objects.create(
        key=f"imported-pairs:{ref}"[:400], source="imported-pairs", source_kind="imported", name=ref[:200], slug=ref[:200],
        description=summary or "", content_hash=hashlib.sha256(f"{ref}\n{summary}".encode()).hexdigest(),
        status=SkillStatus.REJECTED, search_document=f"{ref}\n{summary}",
        provenance={"imported_by": "pair import", "why": "not ingested, so the filters never read it"},
    )


def import_pairs_jsonl(*, run: SynthesisRun, stream: Iterable) -> ImportResult:
    """Pairs made elsewhere enter the run at stage 3 (the judge). One bad line never stops the rest."""
    result = ImportResult()
    for number, raw in enumerate(stream, start=1):
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            result.errors.append((number, f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})"))
            continue
        if not isinstance(data, dict):
            result.errors.append((number, f"line {number}: expected a JSON object"))
            continue
        problem = bad_json_value(data)
        if problem:
            result.errors.append((number, f"line {number}: {problem}"))
            continue
        skill_ids = data.get("skill_ids")
        if not isinstance(skill_ids, list) or not 2 <= len(skill_ids) <= 3:
            result.errors.append((number, f"line {number}: skill_ids must list two or three skills"))
            continue
        summaries = data.get("skill_summaries") or []
        texts = data.get("scenario_texts") or []
        if not isinstance(summaries, list) or not isinstance(texts, list):
            result.errors.append((number, f"line {number}: skill_summaries and scenario_texts must be lists"))
            continue
        status = ((data.get("quality") or {}).get("overall_status") or "").upper()
        if status and status != "ACCEPTED":
            result.skipped += 1
            continue
        with transaction.atomic():
            skills = [_skill_for_reference(ref, summaries[i] if i < len(summaries) else "") for i, ref in enumerate(skill_ids)]
            if len({s.id for s in skills}) != len(skills):
                result.errors.append((number, f"line {number}: skill_ids name the same skill twice"))
                continue
            skill_set = ",".join(str(i) for i in sorted(s.id for s in skills))
            if CandidatePair.objects.filter(run=run, skill_set=skill_set).exists():
                result.skipped += 1
                continue
            pair = CandidatePair.objects.create(
                run=run, skill_set=skill_set, scenario_text="\n".join(str(t) for t in texts),
                source=PairSource.IMPORTED, external_id=str(data.get("pair_id") or "")[:200],
                skill_summaries=[str(s) for s in summaries],
            )
            PairSkill.objects.bulk_create([PairSkill(pair=pair, skill=s, position=i) for i, s in enumerate(skills)])
            result.created += 1
    if result.created and run.stage == Stage.HYPOTHESES and not RunSkill.objects.filter(run=run).exists():
        SynthesisRun.objects.filter(pk=run.pk).update(stage=Stage.JUDGE)
    return result


def export_pairs_jsonl(*, run: SynthesisRun | None = None, verdict: str | None = PairVerdict.ACCEPTED) -> Iterator[str]:
    qs = CandidatePair.objects.all().order_by("id").prefetch_related("pair_skills__skill")
    if run is not None:
        qs = qs.filter(run=run)
    if verdict:
        qs = qs.filter(verdict=verdict)
    for pair in qs.iterator(chunk_size=500):
        skills = [ps.skill for ps in pair.pair_skills.all()]
        yield json.dumps({
            "pair_id": pair.external_id or f"facet-run{pair.run_id}-pair{pair.id}",
            "skill_ids": [s.key for s in skills],
            "skill_summaries": [f"{s.name}: {s.description}" for s in skills],
            "scenario_texts": [t for t in pair.scenario_text.splitlines() if t.strip()] or [pair.scenario_text],
            "quality": {"overall_status": "ACCEPTED" if pair.verdict == PairVerdict.ACCEPTED else
                        ("REJECTED" if pair.verdict == PairVerdict.REJECTED else "PENDING")},
        }, ensure_ascii=False)
