"""Tests for facet_site.lib.retrieval (no Django, no model needed).

Run: .venv/bin/pytest tests/lib/test_retrieval.py -q -p no:django
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from facet_site.lib.retrieval import (
    CandidateGroup,
    build_candidate_groups,
    group_candidates,
    other_skill_neighbours,
)


def _unit(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered(n_skills: int, dim: int = 32, clusters: int = 8, seed: int = 0):
    """Skills with 1-4 hypotheses each; a skill's hypotheses sit near one cluster centre."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    skills, vecs = [], []
    for s in range(n_skills):
        c = centres[rng.integers(clusters)]
        for _ in range(rng.integers(1, 5)):
            skills.append(1000 + 7 * s)  # ids unrelated to row order
            vecs.append(c + 0.6 * rng.standard_normal(dim))
    hyp = rng.permutation(len(skills)) * 3 + 5  # unique, unrelated to rows
    return hyp.astype(np.int64), np.array(skills, np.int64), _unit(vecs)


def reference(hyp, skills, x, k, thr, max_size):
    """The documented rules, written out with plain loops over exact neighbour lists."""
    n = len(x)
    sims = (x.astype(np.float64) @ x.T.astype(np.float64)).astype(np.float32).astype(np.float64)
    best: dict[frozenset, tuple] = {}

    def offer(rows, cosines, anchor):
        order = sorted(range(len(rows)), key=lambda i: skills[rows[i]])
        rows = [rows[i] for i in order]
        pairs = [(i, j) for i in range(len(rows)) for j in range(i + 1, len(rows))]
        cos = [sims[rows[i], rows[j]] for i, j in pairs]
        score = sum(cos) / len(cos)
        hs = tuple(int(hyp[r]) for r in rows)
        key = (-score, hs, int(hyp[anchor]))
        skey = frozenset(int(skills[r]) for r in rows)
        if skey not in best or key < best[skey][0]:
            best[skey] = (key, tuple(sorted(skey)), hs, int(hyp[anchor]), score,
                          [(hs[i], hs[j], c) for (i, j), c in zip(pairs, cos)])

    for a in range(n):
        others = [j for j in range(n) if skills[j] != skills[a]]
        others.sort(key=lambda j: (-sims[a, j], j))
        ok = [j for j in others[:k] if sims[a, j] >= thr]
        for b in ok:
            offer([a, b], None, a)
            if max_size < 3:
                continue
            choice = None
            for c in ok:
                if skills[c] in (skills[a], skills[b]) or sims[b, c] < thr:
                    continue
                v = sims[a, c] + sims[b, c]
                if choice is None or v > choice[0]:
                    choice = (v, c)
            if choice:
                offer([a, b, choice[1]], None, a)
    out = sorted(best.values(), key=lambda t: (t[0][0], t[1]))
    return out


def as_tuples(groups):
    return [(g.skill_ids, g.hypothesis_ids, g.anchor_hypothesis_id) for g in groups]


# -- handcrafted ---------------------------------------------------------------------------------
#
# Skill 1 has three hypotheses: 10 and 12 both point at the "data" situation (12 leans towards
# skill 3's wording), 11 at something else. Skills 2 and 3 each have one hypothesis close to
# the data situation; skill 4 is orthogonal to everything; skill 5 shares skill 1's hypothesis
# 11 direction only loosely (cos 0.6).
HANDCRAFTED = {
    10: (1, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
    12: (1, [1.0, -0.05, 0.02, 0.0, 0.0, 0.0]),
    11: (1, [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]),
    20: (2, [1.0, 0.3, 0.0, 0.0, 0.0, 0.0]),
    30: (3, [1.0, 0.0, 0.3, 0.0, 0.0, 0.0]),
    40: (4, [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]),
    50: (5, [0.0, 0.0, 0.0, 0.6, 0.0, 0.8]),
}


def handcrafted():
    hyp = np.array(list(HANDCRAFTED), np.int64)
    skills = np.array([s for s, _ in HANDCRAFTED.values()], np.int64)
    x = _unit([v for _, v in HANDCRAFTED.values()])
    return hyp, skills, x


def test_handcrafted_pairs_and_triple():
    hyp, skills, x = handcrafted()
    groups = build_candidate_groups(hyp, skills, x, k=10, min_similarity=0.5)
    by_set = {g.skill_ids: g for g in groups}
    assert set(by_set) == {(1, 2), (1, 3), (2, 3), (1, 2, 3), (1, 5)}
    # Best hypothesis per pair: 10 is closer to 20 than 12 is; 12 is closer to 30 than 10 is.
    assert by_set[(1, 2)].hypothesis_ids == (10, 20)
    assert by_set[(1, 3)].hypothesis_ids == (12, 30)
    assert by_set[(1, 5)].hypothesis_ids == (11, 50)
    assert by_set[(1, 5)].score == pytest.approx(0.6, abs=1e-6)
    # The triple's skill-1 hypothesis is whichever of 10/12 gives the higher mean cosine.
    v = dict(zip(hyp.tolist(), x.astype(np.float64)))
    mean = {h: (v[h] @ v[20] + v[h] @ v[30] + v[20] @ v[30]) / 3 for h in (10, 12)}
    h1 = max(mean, key=mean.get)
    triple = by_set[(1, 2, 3)]
    assert triple.hypothesis_ids == (h1, 20, 30)
    assert triple.score == pytest.approx(mean[h1], abs=1e-6)
    assert triple.anchor_hypothesis_id in triple.hypothesis_ids
    assert not any(4 in g.skill_ids for g in groups)


def test_matches_reference_on_random_clusters():
    hyp, skills, x = clustered(120, seed=1)
    for k, thr in [(10, 0.5), (4, 0.3), (3, 0.7)]:
        got = build_candidate_groups(hyp, skills, x, k=k, min_similarity=thr, method="flat")
        ref = reference(hyp, skills, x, k, thr, 3)
        assert len(got) == len(ref)
        assert [(g.skill_ids, g.hypothesis_ids, g.anchor_hypothesis_id) for g in got] == [
            (r[1], r[2], r[3]) for r in ref]
        assert np.allclose([g.score for g in got], [r[4] for r in ref], atol=1e-9)
        assert any(len(g.skill_ids) == 3 for g in got) and any(len(g.skill_ids) == 2 for g in got)


# -- neighbours ------------------------------------------------------------------------------------

def test_same_skill_neighbours_excluded_even_for_large_skills():
    hyp, skills, x = clustered(60, seed=2)
    # One skill with 40 near-identical hypotheses: every one's nearest neighbours are its own
    # siblings, so the search must look past them (the re-search path).
    rng = np.random.default_rng(3)
    big = _unit(x[0] + 0.01 * rng.standard_normal((40, x.shape[1])))
    x2 = np.vstack([x, big])
    skills2 = np.concatenate([skills, np.full(40, 1), ])
    k = 5
    rows, scores = other_skill_neighbours(skills2, x2, k, method="flat")
    assert (rows >= 0).all()
    assert not (skills2[rows] == skills2[:, None]).any()
    # Exactly the k best other-skill hypotheses.
    sims = x2 @ x2.T
    sims[skills2[:, None] == skills2[None, :]] = -np.inf
    exact = np.sort(np.partition(-sims, k, axis=1)[:, :k], axis=1)
    assert np.allclose(-exact, scores, atol=1e-5)
    hyp2 = np.arange(len(x2)) + 1
    for g in build_candidate_groups(hyp2, skills2, x2, k=k, min_similarity=0.0):
        assert len(set(g.skill_ids)) == len(g.skill_ids)
        assert [skills2[h - 1] for h in g.hypothesis_ids] == list(g.skill_ids)


def test_neighbours_fewer_than_k_are_padded():
    hyp, skills, x = handcrafted()
    rows, scores = other_skill_neighbours(skills, x, 10)
    # Skill 1's hypotheses have 4 other-skill hypotheses available; others have 6.
    assert ((rows >= 0).sum(axis=1) == np.where(skills == 1, 4, 6)).all()
    assert np.isneginf(scores[rows < 0]).all()


def test_query_rows_matches_full_search():
    hyp, skills, x = clustered(80, seed=4)
    rows, scores = other_skill_neighbours(skills, x, 6, method="flat")
    q = np.array([5, 0, 17, 33])
    r2, s2 = other_skill_neighbours(skills, x, 6, method="flat", query_rows=q)
    assert (r2 == rows[q]).all() and np.allclose(s2, scores[q])


# -- grouping rules --------------------------------------------------------------------------------

def test_dedupe_by_skill_set_keeps_best_score():
    # Skill 1 has two hypotheses similar to skill 2's (cos 0.9 and 0.8): one pair, the 0.9 one.
    x = _unit([[1.0, 0.0, 0.0], [0.9, np.sqrt(1 - 0.81), 0.0], [0.8, 0.0, 0.6]])
    hyp, skills = np.array([7, 8, 9]), np.array([2, 1, 1])
    groups = build_candidate_groups(hyp, skills, x, min_similarity=0.5)
    assert as_tuples(groups) == [((1, 2), (8, 7), 7)]  # tie between anchors 7 and 8: smaller
    assert groups[0].score == pytest.approx(0.9, abs=1e-6)
    assert groups[0].evidence == [{"a": 8, "b": 7, "cosine": groups[0].score}]


def test_min_similarity_respected_and_monotone():
    hyp, skills, x = clustered(100, seed=5)
    prev = None
    for thr in (0.2, 0.5, 0.8, 0.99):
        groups = build_candidate_groups(hyp, skills, x, min_similarity=thr)
        for g in groups:
            assert all(e["cosine"] >= thr for e in g.evidence)
        sets = {g.skill_ids for g in groups}
        if prev is not None:
            # A higher threshold never creates a pair (triples can change their third member).
            assert {s for s in sets if len(s) == 2} <= {s for s in prev if len(s) == 2}
        prev = sets
    assert build_candidate_groups(hyp, skills, x, min_similarity=1.01) == []


def test_evidence_cosines_and_scores_are_correct():
    hyp, skills, x = clustered(100, seed=6)
    row = {h: i for i, h in enumerate(hyp.tolist())}
    groups = build_candidate_groups(hyp, skills, x, min_similarity=0.3)
    assert groups
    for g in groups:
        n = len(g.hypothesis_ids)
        expected_pairs = [(g.hypothesis_ids[i], g.hypothesis_ids[j])
                          for i in range(n) for j in range(i + 1, n)]
        assert [(e["a"], e["b"]) for e in g.evidence] == expected_pairs
        for e in g.evidence:
            true = float(x[row[e["a"]]].astype(np.float64) @ x[row[e["b"]]].astype(np.float64))
            assert e["cosine"] == pytest.approx(true, abs=1e-6)
        assert g.score == pytest.approx(np.mean([e["cosine"] for e in g.evidence]), abs=1e-12)
        assert list(g.skill_ids) == sorted(set(g.skill_ids))
        assert [int(skills[row[h]]) for h in g.hypothesis_ids] == list(g.skill_ids)
        assert g.anchor_hypothesis_id in g.hypothesis_ids


def test_order_and_max_groups():
    hyp, skills, x = clustered(100, seed=7)
    groups = build_candidate_groups(hyp, skills, x, min_similarity=0.3)
    keys = [(-g.score, g.skill_ids) for g in groups]
    assert keys == sorted(keys)
    assert len({g.skill_ids for g in groups}) == len(groups)
    top = build_candidate_groups(hyp, skills, x, min_similarity=0.3, max_groups=25)
    assert as_tuples(top) == as_tuples(groups[:25])
    assert build_candidate_groups(hyp, skills, x, max_groups=0) == []


def test_deterministic_and_independent_of_row_order():
    hyp, skills, x = clustered(150, seed=8)
    a = build_candidate_groups(hyp, skills, x, min_similarity=0.4)
    b = build_candidate_groups(hyp, skills, x, min_similarity=0.4)
    assert a == b
    perm = np.random.default_rng(0).permutation(len(hyp))
    c = build_candidate_groups(hyp[perm], skills[perm], x[perm], min_similarity=0.4)
    assert as_tuples(c) == as_tuples(a)
    assert [g.score for g in c] == [g.score for g in a]


def test_group_size_limits():
    hyp, skills, x = clustered(100, seed=9)
    three = build_candidate_groups(hyp, skills, x, min_similarity=0.3)
    assert {len(g.skill_ids) for g in three} == {2, 3}
    two = build_candidate_groups(hyp, skills, x, min_similarity=0.3, max_group_size=2)
    assert two and all(len(g.skill_ids) == 2 == len(g.hypothesis_ids) and len(g.evidence) == 1
                       for g in two)
    # Pairs do not depend on whether triples are built.
    assert as_tuples(two) == as_tuples([g for g in three if len(g.skill_ids) == 2])
    for bad in (1, 4):
        with pytest.raises(ValueError):
            build_candidate_groups(hyp, skills, x, max_group_size=bad)


def test_empty_and_tiny_inputs():
    assert build_candidate_groups(np.zeros(0, np.int64), np.zeros(0, np.int64),
                                  np.zeros((0, 8), np.float32)) == []
    assert build_candidate_groups([1], [1], _unit([[1.0, 0.0]])) == []
    # One skill only: nothing to pair with.
    assert build_candidate_groups([1, 2, 3], [5, 5, 5], _unit(np.eye(3) + 1)) == []
    rows, scores = other_skill_neighbours(np.zeros(0, np.int64), np.zeros((0, 4)), 3)
    assert rows.shape == (0, 3)


def test_normalize_option_and_validation():
    hyp, skills, x = handcrafted()
    scaled = x * np.arange(1, len(x) + 1, dtype=np.float32)[:, None]
    assert as_tuples(build_candidate_groups(hyp, skills, scaled, normalize=True)) == as_tuples(
        build_candidate_groups(hyp, skills, x))
    with pytest.raises(ValueError):
        build_candidate_groups(np.array([1, 1, 2, 3, 4, 5, 6]), skills, x)
    with pytest.raises(ValueError):
        build_candidate_groups(hyp[:-1], skills, x)
    with pytest.raises(ValueError):
        group_candidates(hyp, skills, x, np.zeros((3, 2), np.int64))


def test_candidate_group_is_frozen_and_hashable():
    g = CandidateGroup((1, 2), (10, 20), 10, 0.9, [{"a": 10, "b": 20, "cosine": 0.9}])
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.score = 1.0  # type: ignore[misc]
    assert hash(g) == hash(CandidateGroup((1, 2), (10, 20), 10, 0.9, []))


def test_hnsw_path_keeps_invariants():
    hyp, skills, x = clustered(800, dim=48, seed=10)
    groups = build_candidate_groups(hyp, skills, x, method="hnsw", min_similarity=0.5)
    exact = build_candidate_groups(hyp, skills, x, method="flat", min_similarity=0.5)
    row = {h: i for i, h in enumerate(hyp.tolist())}
    for g in groups:
        assert len(set(g.skill_ids)) == len(g.skill_ids) <= 3
        assert [int(skills[row[h]]) for h in g.hypothesis_ids] == list(g.skill_ids)
    got, want = {g.skill_ids for g in groups}, {g.skill_ids for g in exact}
    assert len(got & want) >= 0.9 * len(want)
