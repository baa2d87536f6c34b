"""The skills as every scenario prompt quotes them (hypotheses, judge, reconstruction): one skill's
normalised record as JSON, and the skills of a candidate pair."""
from __future__ import annotations

import json

from skills.models import Skill

from .models import CandidatePair

# Descriptions and steps come from public SKILL.md files of any length; the caps keep one outsized
# skill from crowding out the rest of a prompt (a two- or three-skill prompt stays a few thousand
# tokens) while leaving ordinary skills whole.
SKILL_DESCRIPTION_CHARS = 2_000
SKILL_ITEM_CHARS = 300


def _clipped(items, count: int) -> list:
    return [i[:SKILL_ITEM_CHARS] if isinstance(i, str) else i for i in (items or [])[:count]]


def skill_json(skill: Skill) -> str:
    return json.dumps({
        "id": skill.id, "name": skill.name, "description": skill.description[:SKILL_DESCRIPTION_CHARS],
        "category": skill.category.name if skill.category else None,
        "required_tools": _clipped(skill.required_tools, 20), "inputs": _clipped(skill.inputs, 10),
        "outputs": _clipped(skill.outputs, 10), "steps": _clipped(skill.steps, 15),
    }, ensure_ascii=False, indent=1)


def pair_skills_json(pair: CandidatePair) -> str:
    skills = pair.ordered_skills()
    if skills:
        return "[\n" + ",\n".join(skill_json(s) for s in skills) + "\n]"
    return json.dumps(pair.skill_summaries, ensure_ascii=False, indent=1)  # an imported pair's summaries
