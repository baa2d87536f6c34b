"""The safety review queue: reviewers clear or reject skills the safety scan found suspicious.
Each decision is recorded on the skill (who, when, note); a rejection also adds a verdict."""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from .models import SafetyReview, Skill, SkillStatus, Verdict, VerdictKind


class ReviewError(ValueError):
    pass


def clear_skill(*, skill: Skill, user, note: str = "") -> Skill:
    if not skill.clear_safety(user=user, note=note):
        raise ReviewError(f"skill #{skill.pk} is not waiting for a safety review")
    return skill


def reject_skill(*, skill: Skill, user, note: str = "") -> Skill:
    with transaction.atomic():
        done = Skill.objects.filter(pk=skill.pk, status=SkillStatus.HELD).update(
            status=SkillStatus.REJECTED, safety_review=SafetyReview.REJECTED, safety_reviewed_by=user,
            safety_reviewed_at=timezone.now(), safety_review_note=note[:2000],
        )
        if not done:
            raise ReviewError(f"skill #{skill.pk} is not waiting for a safety review")
        rules = sorted({f.get("rule_id", "") for f in (skill.safety_report or {}).get("findings", [])})
        Verdict.objects.create(
            skill=skill, kind=VerdictKind.SAFETY_REVIEW,
            reason=f"Rejected by {user.get_username()} in safety review ({', '.join(rules) or 'no rule'})"
                   + (f": {note[:500]}" if note else "."),
            evidence=skill.safety_report or {},
        )
    skill.refresh_from_db()
    return skill


def queue():
    """Held skills, newest first, for the review page."""
    return Skill.objects.current().held().select_related("category").order_by("-ingested_at", "-id")
