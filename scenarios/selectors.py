"""Read-only queries over the scenario–skill repository, shared by the pages, the API and the CLI.

Workflows that change state live in services.py; these only select, so the browser and the API can
never disagree about what a filter means.
"""
from django.db.models import Count, F, Q, Sum

from skills.models import Category

from .models import OPEN_WORK, CandidatePair, LLMCall, PairVerdict, RunSkill, Scenario, SkillClassification, SynthesisRun

UNJUDGED = "unjudged"
VERDICT_FILTERS = [(PairVerdict.ACCEPTED, "Accepted"), (PairVerdict.REJECTED, "Rejected"), (UNJUDGED, "Not judged yet")]


def runs_with_usage():
    """Runs with their token and cost totals, summed in the database rather than per row."""
    return SynthesisRun.objects.select_related("created_by").annotate(
        total_tokens_in=Sum("llm_calls__tokens_in"),
        total_tokens_out=Sum("llm_calls__tokens_out"),
        total_cost=Sum("llm_calls__cost_usd"),
    ).order_by("-created_at", "-id")  # a GROUP BY query drops Meta.ordering


def run_percentages(runs) -> dict[int, int]:
    """How far each run is, as settled work items over all of its work items, in three grouped
    queries for a whole page of runs: the list polls every 2 s and cannot afford run_progress per row."""
    ids = [r.pk for r in runs]
    totals = dict.fromkeys(ids, 0)
    settled = dict.fromkeys(ids, 0)
    for model in (SkillClassification, RunSkill, CandidatePair, Scenario):
        for run_id, status, n in model.objects.filter(run_id__in=ids).values_list("run_id", "status").annotate(n=Count("id")).order_by():
            totals[run_id] += n
            if status not in OPEN_WORK:
                settled[run_id] += n
    return {r.pk: 100 if r.is_finished else (round(100 * settled[r.pk] / totals[r.pk]) if totals[r.pk] else 0) for r in runs}


def _parse_float(value) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def _parse_int(value) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def filter_pairs(*, run=None, verdict: str = "", category: str = "", min_score=None, q: str = ""):
    """The repository browser's query. Unknown filter values match nothing rather than everything,
    so a mistyped filter never looks like a complete answer."""
    qs = CandidatePair.objects.all()
    if run not in (None, ""):
        run_id = _parse_int(run)
        if run_id is None:
            return CandidatePair.objects.none()
        qs = qs.filter(run_id=run_id)
    if verdict == UNJUDGED:
        qs = qs.filter(verdict="")
    elif verdict:
        if verdict not in PairVerdict.values:
            return CandidatePair.objects.none()
        qs = qs.filter(verdict=verdict)
    if category:
        cat = Category.objects.filter(slug=category).first()
        if cat is None:
            return CandidatePair.objects.none()
        # a top-level family matches pairs with any skill in one of its fine-grained categories
        match = Q(skills__category=cat) | Q(skills__category__parent=cat) if cat.parent_id is None else Q(skills__category=cat)
        qs = qs.filter(pk__in=CandidatePair.objects.filter(match).values("pk"))
    if min_score not in (None, ""):
        threshold = _parse_float(min_score)
        if threshold is None:
            return CandidatePair.objects.none()
        qs = qs.annotate(judge_average=_judge_average()).filter(judge_average__gte=threshold)
    for word in (q or "").split():
        qs = qs.filter(Q(scenario_text__icontains=word) | Q(scenario__title__icontains=word)
                       | Q(scenario__integrated__icontains=word))
    return (qs.select_related("run", "judgement", "scenario")
              .prefetch_related("pair_skills__skill__category__parent")
              .order_by(F("score").desc(nulls_last=True), "id"))


def _judge_average():
    return (F("judgement__relevance") + F("judgement__complementarity") + F("judgement__non_redundancy")
            + F("judgement__executability")) / 4.0


def verdict_counts(qs) -> dict:
    counts = dict(qs.order_by().values_list("verdict").annotate(n=Count("id")))
    return {"accepted": counts.get(PairVerdict.ACCEPTED, 0), "rejected": counts.get(PairVerdict.REJECTED, 0),
            "unjudged": counts.get("", 0)}


def filter_scenarios(*, run=None, consistency: str = ""):
    qs = Scenario.objects.all()
    if run not in (None, ""):
        run_id = _parse_int(run)
        if run_id is None:
            return Scenario.objects.none()
        qs = qs.filter(run_id=run_id)
    if consistency:
        qs = qs.filter(consistency=consistency)
    return qs.select_related("pair", "run").order_by("-id")


def calls_behind(*, pair: CandidatePair, scenario: Scenario | None = None):
    """The LLM calls that produced a pair's judgement and its scenario, in the order they were made.

    The pipeline names a pair's calls by its skills' keys (services.pair_subject), so a cassette
    replays on any database; that name recurs in every run that pairs the same skills, hence the
    run filter. Calls recorded by record id (pair:<id>, scenario:<id>) are included as well.
    """
    from .services import pair_subject

    by_id = [f"pair:{pair.pk}"] + ([f"scenario:{scenario.pk}"] if scenario is not None else [])
    return (LLMCall.objects.filter(Q(subject__in=by_id) | Q(subject=pair_subject(pair), run_id=pair.run_id))
            .order_by("created_at", "id"))


def judge_average(judgement) -> float | None:
    if judgement is None:
        return None
    return sum(judgement.scores.values()) / 4.0
