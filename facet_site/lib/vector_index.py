"""Nearest-neighbour search over unit-length embeddings with faiss, Django-free.

Scores are inner products, which equal cosine similarity because the vectors from
`facet_site.lib.embedding` are L2-normalized (pass ``normalize=True`` for vectors that are not).

Index kinds:

* ``"flat"`` (IndexFlatIP): exact. Cheap to build, and a handful of queries against a few
  hundred thousand vectors takes milliseconds, so it is the right choice unless a job issues a
  query per stored vector.
* ``"hnsw"`` (IndexHNSWFlat, inner product): approximate graph index; the choice for
  "every vector's neighbours" over large collections, where exact search is quadratic.
* ``"ivf"`` (IndexIVFFlat, inner product): approximate, clustered lists; faster to build than
  HNSW, but recall depends more on how evenly the data falls into the clusters.

``"auto"`` uses flat up to `exact_max_n` vectors and HNSW above.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

METHODS = ("auto", "flat", "hnsw", "ivf")
# Up to this many vectors, exact all-pairs search takes ~15 s on two cores (n^2 * 384 flops):
# 50k vectors is ~1e12 flops. Above it the quadratic cost dominates and HNSW wins.
DEFAULT_EXACT_MAX_N = 50_000
# HNSW settings for the ~214k-vector all-pairs job, measured on 2 shared cores with 214k
# clustered MiniLM vectors (embeddings of 10k synthetic skill descriptions plus perturbed
# interpolations of them): build 24 s; efSearch 48/64/96 gave recall@10 0.990/0.992/0.995 vs
# exact on a 10k sample, all-pairs ~40/52/64 s (exact: ~4 min). 96 leaves margin for data that
# clusters less tidily. Uniform random vectors are far harder (recall 0.44 at 96) and are not a
# useful proxy for real embeddings.
DEFAULT_HNSW_M = 32
DEFAULT_HNSW_EF_CONSTRUCTION = 64
DEFAULT_HNSW_EF_SEARCH = 96
DEFAULT_IVF_NPROBE = 32


def _as_matrix(vectors: np.ndarray, dim: int | None = None, normalize: bool = False) -> np.ndarray:
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D array of vectors, got shape {x.shape}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"expected vectors of dimension {dim}, got {x.shape[1]}")
    if normalize:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        x = x / np.maximum(norms, 1e-12)
    # faiss reads raw memory: it needs C-contiguous float32.
    return np.ascontiguousarray(x, dtype=np.float32)


def _drop_excluded(labels: np.ndarray, scores: np.ndarray, exclude: np.ndarray, k: int):
    """Remove each row's excluded label (if present) and keep the first k of the rest.

    A stable argsort on the "is excluded" flag moves excluded entries to the end while keeping
    the others in rank order, which handles "self found", "self missing" (approximate search, or
    an exact duplicate outranking it) and "self found twice" uniformly.
    """
    hit = labels == exclude[:, None]
    order = np.argsort(hit, axis=1, kind="stable")[:, :k]
    labels = np.take_along_axis(labels, order, axis=1)
    scores = np.take_along_axis(scores, order, axis=1)
    dropped = np.take_along_axis(hit, order, axis=1)
    # Only possible when fewer than k other results exist; mark as missing.
    labels[dropped] = -1
    scores[dropped] = -np.inf
    return labels, scores


class VectorIndex:
    """Inner-product index over ``vectors`` whose rows are identified by ``ids`` (int64)."""

    def __init__(
        self,
        ids: np.ndarray | Sequence[int],
        vectors: np.ndarray,
        *,
        method: str = "auto",
        exact_max_n: int = DEFAULT_EXACT_MAX_N,
        hnsw_m: int = DEFAULT_HNSW_M,
        hnsw_ef_construction: int = DEFAULT_HNSW_EF_CONSTRUCTION,
        hnsw_ef_search: int = DEFAULT_HNSW_EF_SEARCH,
        ivf_nlist: int | None = None,
        ivf_nprobe: int = DEFAULT_IVF_NPROBE,
        normalize: bool = False,
    ) -> None:
        import faiss

        if method not in METHODS:
            raise ValueError(f"unknown index method {method!r}; expected one of {METHODS}")
        x = _as_matrix(vectors, normalize=normalize)
        self.ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(self.ids) != len(x):
            raise ValueError(f"{len(self.ids)} ids for {len(x)} vectors")
        if len(np.unique(self.ids)) != len(self.ids):
            # Results are reported by id; duplicates would make them (and self-exclusion) ambiguous.
            raise ValueError("ids must be unique")
        self.dim = int(x.shape[1])
        self.normalize = normalize
        n = len(x)
        if method == "auto":
            method = "flat" if n <= exact_max_n else "hnsw"
        if method == "ivf" and n < 2:
            method = "flat"
        self.method = method
        self.hnsw_ef_search = hnsw_ef_search

        if method == "flat":
            index = faiss.IndexFlatIP(self.dim)
        elif method == "hnsw":
            index = faiss.IndexHNSWFlat(self.dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = hnsw_ef_construction
            index.hnsw.efSearch = hnsw_ef_search
        else:
            # ~4*sqrt(n) lists is the usual balance of list-scan cost against centroid cost;
            # capped so each list gets enough training points (faiss wants ~39 per centroid).
            nlist = ivf_nlist or int(4 * math.sqrt(n))
            nlist = max(1, min(nlist, n // 39 or 1))
            quantizer = faiss.IndexFlatIP(self.dim)
            index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(x)
            index.nprobe = min(ivf_nprobe, nlist)
            self._quantizer = quantizer  # the IVF index does not own it; keep it alive
        if n:
            index.add(x)
        self._index = index

    def __len__(self) -> int:
        return len(self.ids)

    def search_arrays(
        self, queries: np.ndarray, k: int, exclude_self_ids: np.ndarray | Sequence[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k as arrays: (ids (m, k) int64, scores (m, k) float32), best first.

        Missing results (fewer than k candidates) have id -1 and score -inf. With
        ``exclude_self_ids`` (one id per query) that id is left out of its query's results.
        """
        q = _as_matrix(queries, self.dim, self.normalize)
        if k < 1:
            raise ValueError("k must be >= 1")
        m = len(q)
        if m == 0 or len(self) == 0:
            return np.full((m, k), -1, np.int64), np.full((m, k), -np.inf, np.float32)
        exclude = None
        if exclude_self_ids is not None:
            exclude = np.asarray(exclude_self_ids, dtype=np.int64).reshape(-1)
            if len(exclude) != m:
                raise ValueError(f"{len(exclude)} exclude_self_ids for {m} queries")
        fetch = min(k + (1 if exclude is not None else 0), len(self))
        if self.method == "hnsw":
            # efSearch below the number of requested results would silently truncate them.
            self._index.hnsw.efSearch = max(self.hnsw_ef_search, fetch)
        scores, pos = self._index.search(q, fetch)
        labels = np.where(pos >= 0, self.ids[np.maximum(pos, 0)], -1)
        scores = np.where(pos >= 0, scores, -np.inf).astype(np.float32)
        if exclude is not None:
            labels, scores = _drop_excluded(labels, scores, exclude, min(k, fetch))
        if labels.shape[1] < k:
            pad = k - labels.shape[1]
            labels = np.pad(labels, ((0, 0), (0, pad)), constant_values=-1)
            scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
        return labels[:, :k], scores[:, :k]

    def search(
        self, queries: np.ndarray, k: int, exclude_self_ids: np.ndarray | Sequence[int] | None = None
    ) -> list[list[tuple[int, float]]]:
        """For each query, up to k ``(id, cosine)`` pairs, best first."""
        labels, scores = self.search_arrays(queries, k, exclude_self_ids)
        return [
            [(int(i), float(s)) for i, s in zip(row_ids, row_scores) if i >= 0]
            for row_ids, row_scores in zip(labels, scores)
        ]
