"""The demo's replay must not hang on an embedding's last digits.

The demo cassette answers by the skills a candidate pair names, so the ten pairs retrieval makes
from the replayed hypotheses must be the same on every machine. int8 MiniLM cosines move by up to
~0.01 between processors (its integer kernels differ), and a triple that cleared the threshold by
0.007 once fell out on another machine, failing every demo test there. This test replays the
demo's synthesis and holds every decision that picks the ten to a margin wider than that."""
import numpy as np
import pytest

from facet_site.lib.retrieval import build_candidate_groups
from facet_site.management.commands.demo import DEMO_CASSETTE, DEMO_CORPUS, DEMO_LIMITS
from scenarios import services
from scenarios.models import CandidatePair, ScenarioHypothesis
from skills import services as skill_services

pytestmark = pytest.mark.django_db

MARGIN = 0.03  # three times the largest cross-processor cosine difference we have seen


def test_the_demo_pairs_clear_every_threshold_and_rank_cut_by_a_wide_margin():
    skill_services.ingest_path(DEMO_CORPUS, label="demo-corpus")
    run = services.start_run(name="demo", enqueue=False, trusted=True, config={
        "limits": DEMO_LIMITS, "llm": {"provider": "replay", "cassette": str(DEMO_CASSETTE), "model": "scripted-demo"}})
    run = services.execute_run_inline(run.pk)
    assert run.message == "Finished.", run.message
    threshold = DEMO_LIMITS["min_similarity"]

    pairs = list(CandidatePair.objects.filter(run=run))
    assert len(pairs) == DEMO_LIMITS["max_pairs"]
    for pair in pairs:
        for edge in pair.evidence:
            assert edge["cosine"] - threshold >= MARGIN, (pair.skill_set, edge)

    # The cut after the tenth pair: the best group left out must score clearly below the tenth.
    hyps = list(ScenarioHypothesis.objects.filter(run=run).order_by("id"))
    groups = build_candidate_groups(
        np.array([h.id for h in hyps]), np.array([h.skill_id for h in hyps]),
        np.vstack([h.vector for h in hyps]).astype(np.float32),
        k=10, min_similarity=threshold, max_group_size=3, max_groups=DEMO_LIMITS["max_pairs"] + 1)
    kept, first_out = groups[DEMO_LIMITS["max_pairs"] - 1], groups[DEMO_LIMITS["max_pairs"]]
    assert kept.score - first_out.score >= MARGIN / 3, (kept, first_out)
    # ... and no group that a slightly lower threshold would admit may outrank the tenth.
    looser = build_candidate_groups(
        np.array([h.id for h in hyps]), np.array([h.skill_id for h in hyps]),
        np.vstack([h.vector for h in hyps]).astype(np.float32),
        k=10, min_similarity=threshold - MARGIN, max_group_size=3, max_groups=DEMO_LIMITS["max_pairs"])
    assert [g.skill_ids for g in looser] == [g.skill_ids for g in groups[:DEMO_LIMITS["max_pairs"]]]
