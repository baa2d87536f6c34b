"""Versioned review guidelines: Markdown written by admins and leads, rendered sanitised beside
the decision form. Every version is kept; the newest is in force and each decision records the
version it was made under (consensus.note)."""
from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Count, Max

from facet_site.lib.render import render_markdown
from facet_site.roles import can_lead

from .consensus import current_guideline
from .models import DecisionNote, Guideline
from .review import InvalidDecision, NotAllowed, ReviewError

MAX_CHARS = 50_000

__all__ = ["current_guideline", "history", "publish", "rendered"]


def publish(*, user, text: str, note: str = "") -> Guideline:
    """A new version of the guidelines (numbers go 1, 2, 3, …; two editors saving at once get
    consecutive numbers, the unique number refusing a duplicate)."""
    if not can_lead(user):
        raise NotAllowed("Only admins and leads edit the review guidelines.")
    text = (text or "").strip()
    if not text:
        raise InvalidDecision("text: the guidelines are empty.")
    if len(text) > MAX_CHARS:
        raise InvalidDecision(f"text: at most {MAX_CHARS} characters, not {len(text)}.")
    current = current_guideline()
    if current is not None and current.text == text:
        raise ReviewError(f"Nothing changed since version {current.number}.")
    for _ in range(3):
        number = (Guideline.objects.aggregate(n=Max("number"))["n"] or 0) + 1
        try:
            with transaction.atomic():
                return Guideline.objects.create(number=number, text=text, note=(note or "").strip()[:200], author=user)
        except IntegrityError:
            continue
    raise ReviewError("Someone else saved the guidelines at the same moment: try again.")


def rendered(guideline: Guideline | None) -> str:
    return render_markdown(guideline.text) if guideline is not None else ""


def history() -> list[Guideline]:
    """Every version, newest first, with the number of decisions made under it."""
    used = dict(DecisionNote.objects.filter(guideline__isnull=False).values_list("guideline")
                .annotate(n=Count("id")).order_by())
    rows = list(Guideline.objects.select_related("author").order_by("-number"))
    for g in rows:
        g.decisions = used.get(g.pk, 0)
    return rows
