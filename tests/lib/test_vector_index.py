"""Tests for facet_site.lib.vector_index (no Django, no model needed).

Run: .venv/bin/pytest tests/lib/test_vector_index.py -q -p no:django
"""
from __future__ import annotations

import numpy as np
import pytest

from facet_site.lib.vector_index import VectorIndex


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, dim: int = 48, clusters: int = 40, spread: float = 0.35, seed: int = 0):
    # Real embeddings are clustered; uniform random high-dimensional points are a pathological
    # case for approximate indexes and would not say much about real recall.
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    x = centres[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, dim))
    return _unit(x)


def brute_topk(x: np.ndarray, q: np.ndarray, k: int, exclude_rows=None):
    sims = q @ x.T
    if exclude_rows is not None:
        sims[np.arange(len(q)), exclude_rows] = -np.inf
    idx = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(sims, idx, axis=1)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, truth)]))


@pytest.fixture(scope="module")
def data():
    x = clustered(3000)
    ids = np.arange(3000, dtype=np.int64) * 7 + 1000  # ids deliberately not row numbers
    return ids, x


def test_flat_search_matches_brute_force(data):
    ids, x = data
    index = VectorIndex(ids, x)
    assert index.method == "flat" and len(index) == len(ids)
    q = _unit(x[:50] + 0.05 * np.random.default_rng(1).standard_normal((50, x.shape[1])))
    got = index.search(q, 10)
    truth_rows, truth_scores = brute_topk(x, q, 10)
    for hits, t_rows, t_scores in zip(got, truth_rows, truth_scores):
        assert [h[0] for h in hits] == list(ids[t_rows])
        np.testing.assert_allclose([h[1] for h in hits], t_scores, atol=1e-5)


def test_exclude_self_ids(data):
    ids, x = data
    index = VectorIndex(ids, x)
    q = x[:20]
    with_self = index.search(q, 5)
    assert all(hits[0][0] == ids[i] for i, hits in enumerate(with_self))
    without = index.search(q, 5, exclude_self_ids=ids[:20])
    truth_rows, _ = brute_topk(x, q, 5, exclude_rows=np.arange(20))
    for i, hits in enumerate(without):
        assert len(hits) == 5 and ids[i] not in [h[0] for h in hits]
        assert [h[0] for h in hits][0] == ids[truth_rows[i][0]]


def test_k_larger_than_index_and_empty_inputs():
    x = clustered(3, dim=8)
    index = VectorIndex([10, 20, 30], x)
    hits = index.search(x[:1], 10, exclude_self_ids=[10])
    assert [h[0] for h in hits[0]] and len(hits[0]) == 2
    labels, scores = index.search_arrays(x[:1], 5)
    assert list(labels[0, 3:]) == [-1, -1] and np.isneginf(scores[0, 3:]).all()
    assert index.search(np.zeros((0, 8), np.float32), 3) == []
    empty = VectorIndex(np.zeros(0, np.int64), np.zeros((0, 8), np.float32))
    assert empty.search(x[:2], 3) == [[], []]


def test_validation():
    x = clustered(4, dim=8)
    with pytest.raises(ValueError):
        VectorIndex([1, 1, 2, 3], x)  # duplicate ids
    with pytest.raises(ValueError):
        VectorIndex([1, 2, 3], x)  # length mismatch
    with pytest.raises(ValueError):
        VectorIndex([1, 2, 3, 4], x, method="annoy")
    with pytest.raises(ValueError):
        VectorIndex([1, 2, 3, 4], x).search(np.ones((1, 9), np.float32), 2)


def test_normalize_option():
    x = clustered(100, dim=16)
    scaled = x * np.linspace(0.5, 3, 100, dtype=np.float32)[:, None]
    index = VectorIndex(np.arange(100), scaled, normalize=True)
    hits = index.search(scaled[:3] * 10, 1)
    assert [h[0][0] for h in hits] == [0, 1, 2]
    assert all(abs(h[0][1] - 1.0) < 1e-5 for h in hits)


@pytest.mark.parametrize("options", [
    {"method": "hnsw"},
    {"method": "ivf", "ivf_nprobe": 16},
])
def test_approximate_indexes_have_high_recall(data, options):
    ids, x = data
    index = VectorIndex(ids, x, **options)
    assert index.method == options["method"]
    q = x[:300]
    labels, _ = index.search_arrays(q, 10, exclude_self_ids=ids[:300])
    truth_rows, _ = brute_topk(x, q, 10, exclude_rows=np.arange(300))
    assert recall(labels, ids[truth_rows]) >= 0.95


def test_auto_switches_to_hnsw_above_threshold(data):
    ids, x = data
    assert VectorIndex(ids, x, exact_max_n=1000).method == "hnsw"
    assert VectorIndex(ids, x, exact_max_n=5000).method == "flat"
