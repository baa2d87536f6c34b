"""A skill's category from the optional LLM stage of a synthesis run (scenarios/classifying.py asks
the model; this app stores the answer, so skills never imports scenarios): the classifier's
answer the model is given as a hint and falls back to, and storing either on the skill.

A reviewer's override always wins: every store is a conditional UPDATE that leaves an overridden
skill alone, so an override saved while the model was thinking is never replaced.
"""
from __future__ import annotations

import numpy as np

from . import services, storing
from .classification import Classification
from .models import CategorySource, Skill


def classifier_answer(skill: Skill) -> Classification | None:
    """The trained classifier's category for `skill`: as stored at ingest or reclassification, or
    computed again when the stored one came from elsewhere (an earlier LLM answer, the old
    zero-shot). None for a skill without the embedding the classifier reads."""
    if (skill.category_source == CategorySource.CLASSIFIER and skill.category_id
            and skill.category_confidence is not None):
        runner_up = skill.category_runner_up
        return Classification(
            category=skill.category.slug, confidence=skill.category_confidence,
            runner_up=runner_up.slug if runner_up else skill.category.slug,
            runner_up_confidence=skill.category_runner_up_confidence or 0.0,
        )
    if not skill.embedding:
        return None
    vector = np.frombuffer(bytes(skill.embedding), dtype=np.float32)[None, :]
    return storing.classify_skills(names=[skill.name], descriptions=[skill.description], bodies=[skill.body],
                                   name_description_vectors=vector)[0]


def store_category(*, skill_id: int, answer: Classification, source: str) -> bool:
    """`answer` as the skill's category (source CategorySource.LLM, or CLASSIFIER for a fallback),
    unless a reviewer has overridden it. True when stored; tasks built from the skill are
    relabelled when the category changed."""
    fields = storing.category_fields(answer, storing.category_ids())
    if fields["category_id"] is None:
        return False
    fields["category_source"] = source
    before = Skill.objects.filter(pk=skill_id).values_list("category_id", flat=True).first()
    stored = Skill.objects.filter(pk=skill_id).exclude(category_source=CategorySource.OVERRIDE).update(**fields)
    if stored and before != fields["category_id"]:
        services.category_changed(skill_id)
    return bool(stored)
