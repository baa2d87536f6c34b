"""Candidate scenario-skill groups from scenario-hypothesis embeddings, Django-free.

FACET extracts a few scenario hypotheses per skill (application context, user goal, initial
state, desired final state), embeds them, and looks for hypotheses of *other* skills that
describe the same situation. Skills whose hypotheses are close become a candidate group of two
or three skills; an LLM judge later decides which groups are real, complementary scenarios.
This module does the retrieval and grouping:

1. `other_skill_neighbours`: each hypothesis's k nearest hypotheses that belong to a different
   skill (faiss through `vector_index.VectorIndex`; exact up to ``exact_max_n`` vectors, HNSW
   above unless ``method`` says otherwise).
2. `group_candidates`: pairs and triples from those neighbour lists, deduplicated by skill set.

`build_candidate_groups` runs both.

Rules (cosines are inner products of the unit vectors, computed in float64 and rounded to
float32 precision; see `group_candidates`):

* Pair: anchor hypothesis ``a`` and one of its retrieved neighbours ``b`` with
  ``cos(a, b) >= min_similarity``. Score: ``cos(a, b)``.
* Triple: every such pair ``(a, b)`` is extended by at most one third hypothesis ``c``, chosen
  among ``a``'s *other* retrieved neighbours: ``c``'s skill must differ from both ``a``'s and
  ``b``'s, and ``cos(a, c) >= min_similarity`` and ``cos(b, c) >= min_similarity`` (``cos(b, c)``
  is computed directly, so ``c`` need not be in ``b``'s neighbour list, which approximate search
  may have truncated). Of the eligible ``c``, the one with the highest ``cos(a, c) + cos(b, c)``
  wins, i.e. the most coherent triple; ties go to the better-ranked neighbour. Score: the mean of
  the three pairwise cosines. Taking only the best extension per pair keeps the output linear in
  ``n * k`` (at most one triple per pair edge) instead of the ``n * k^2 / 2`` triples that "any
  two neighbours of the anchor that are similar to each other" would give: on clustered real
  embeddings nearly all of those pass the threshold, and millions of near-identical triples are
  neither useful to the judge nor cheap to hold as Python objects.
* Dedupe: one group per skill set (a pair and a triple containing it are different sets); the
  best score wins, ties broken by the smaller hypothesis ids and then the smaller anchor id.
* Order: score descending, then skill ids ascending (as tuples, so ``(1, 2)`` precedes
  ``(1, 2, 3)``). ``max_groups`` keeps the first ``max_groups`` of that order.

The grouping is deterministic given the neighbour lists. Exact search is deterministic too;
HNSW graph construction is multi-threaded and not bit-for-bit reproducible between runs, so
on large inputs a few borderline neighbours (and hence groups) can differ from run to run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from facet_site.lib.vector_index import VectorIndex, _as_matrix

# Anchors per grouping chunk: the gathered neighbour vectors in float64 take
# chunk * (k + 1) * dim * 8 bytes (~70 MB at 2048, k=10, dim 384).
_GROUP_CHUNK = 2048


@dataclass(frozen=True, slots=True)
class CandidateGroup:
    """Two or three skills whose scenario hypotheses are mutually similar."""

    skill_ids: tuple[int, ...]  # sorted, 2 or 3 distinct skills
    hypothesis_ids: tuple[int, ...]  # one per skill, aligned with skill_ids
    anchor_hypothesis_id: int  # the hypothesis whose neighbour list produced the group
    score: float  # mean pairwise cosine among hypothesis_ids
    # Every pair's cosine, pairs in hypothesis_ids order: (0, 1), (0, 2), (1, 2). Excluded from
    # hashing (a list is unhashable); the other fields identify a group.
    evidence: list[dict] = field(hash=False)


def _validate(hypothesis_ids, skill_ids, vectors, normalize: bool):
    x = _as_matrix(vectors, normalize=normalize) if len(vectors) else np.zeros((0, 1), np.float32)
    hyp = np.asarray(hypothesis_ids, dtype=np.int64).reshape(-1)
    skills = np.asarray(skill_ids, dtype=np.int64).reshape(-1)
    if not (len(hyp) == len(skills) == len(x)):
        raise ValueError(f"{len(hyp)} hypothesis ids, {len(skills)} skill ids, {len(x)} vectors")
    if len(np.unique(hyp)) != len(hyp):
        raise ValueError("hypothesis ids must be unique")
    return hyp, skills, x


def other_skill_neighbours(
    skill_ids: np.ndarray,
    vectors: np.ndarray,
    k: int = 10,
    *,
    method: str = "auto",
    query_rows: np.ndarray | None = None,
    batch_size: int = 8192,
    **index_options,
) -> tuple[np.ndarray, np.ndarray]:
    """Each hypothesis's k nearest hypotheses of a different skill.

    Returns (rows (m, k) int64, scores (m, k) float32), best first, as row numbers into
    ``vectors``; -1/-inf where fewer than k exist. m is ``len(vectors)``, or ``len(query_rows)``
    when only those rows are queried (still against the whole collection; used to measure
    recall against exact search on a sample). ``index_options`` go to `VectorIndex`.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    x = _as_matrix(vectors, normalize=index_options.pop("normalize", False))
    skills = np.asarray(skill_ids, dtype=np.int64).reshape(-1)
    n = len(x)
    if len(skills) != n:
        raise ValueError(f"{len(skills)} skill ids for {n} vectors")
    queries = np.arange(n, dtype=np.int64) if query_rows is None else np.asarray(
        query_rows, dtype=np.int64).reshape(-1)
    m = len(queries)
    rows = np.full((m, k), -1, np.int64)
    scores = np.full((m, k), -np.inf, np.float32)
    if m == 0 or n < 2:
        return rows, scores

    _, inverse, counts = np.unique(skills, return_inverse=True, return_counts=True)
    own = counts[inverse] - 1  # same-skill hypotheses besides the row itself
    # Same-skill hits displace other-skill neighbours, so ask for that many extra results. A
    # skill usually has ~3 hypotheses; capping the headroom at k keeps one skill with hundreds
    # of them from inflating every query, and its rows are re-searched below instead.
    extra = int(min(own.max(), k))
    index = VectorIndex(np.arange(n, dtype=np.int64), x, method=method, **index_options)

    def search(q: np.ndarray, fetch: int) -> tuple[np.ndarray, np.ndarray]:
        lab, sc = index.search_arrays(x[q], min(fetch, n - 1), q)
        drop = (lab < 0) | (skills[np.maximum(lab, 0)] == skills[q][:, None])
        # Stable sort on the drop flag keeps the survivors in rank order (as in vector_index).
        order = np.argsort(drop, axis=1, kind="stable")[:, :k]
        lab = np.take_along_axis(lab, order, axis=1)
        sc = np.take_along_axis(sc, order, axis=1)
        drop = np.take_along_axis(drop, order, axis=1)
        lab[drop], sc[drop] = -1, -np.inf
        if lab.shape[1] < k:  # n - 1 < k
            pad = k - lab.shape[1]
            lab = np.pad(lab, ((0, 0), (0, pad)), constant_values=-1)
            sc = np.pad(sc, ((0, 0), (0, pad)), constant_values=-np.inf)
        return lab, sc

    for s in range(0, m, batch_size):
        rows[s:s + batch_size], scores[s:s + batch_size] = search(queries[s:s + batch_size],
                                                                  k + extra)
    # Rows whose skill has more hypotheses than the headroom may have come back short.
    short = np.flatnonzero((own[queries] > extra) & (rows[:, -1] < 0))
    if len(short):
        fetch = k + int(own[queries[short]].max())
        for s in range(0, len(short), batch_size):
            part = short[s:s + batch_size]
            rows[part], scores[part] = search(queries[part], fetch)
    return rows, scores


def group_candidates(
    hypothesis_ids: np.ndarray,
    skill_ids: np.ndarray,
    vectors: np.ndarray,
    neighbour_rows: np.ndarray,
    *,
    min_similarity: float = 0.5,
    max_group_size: int = 3,
    max_groups: int | None = None,
    normalize: bool = False,
) -> list[CandidateGroup]:
    """Pairs and triples from `other_skill_neighbours` output (see the module docstring)."""
    if max_group_size not in (2, 3):
        raise ValueError("max_group_size must be 2 or 3")
    if max_groups is not None and max_groups < 0:
        raise ValueError("max_groups must be >= 0 or None")
    hyp, skills, x = _validate(hypothesis_ids, skill_ids, vectors, normalize)
    nb = np.asarray(neighbour_rows, dtype=np.int64)
    n = len(hyp)
    if n == 0 or nb.size == 0 or max_groups == 0:
        return []
    if nb.ndim != 2 or len(nb) != n:
        raise ValueError(f"neighbour_rows must have shape ({n}, k), got {nb.shape}")
    k = nb.shape[1]
    thr = float(min_similarity)
    want_triples = max_group_size == 3

    pair_a, pair_b, pair_cos = [], [], []
    tri_a, tri_b, tri_c, tri_ab, tri_ac, tri_bc = [], [], [], [], [], []
    for s in range(0, n, _GROUP_CHUNK):
        e = min(s + _GROUP_CHUNK, n)
        nbc = nb[s:e]
        valid = nbc >= 0
        safe = np.where(valid, nbc, 0)
        # Anchor in slot 0, its neighbours after it: one batched Gram matrix gives every cosine
        # the rules need (anchor-neighbour and neighbour-neighbour) without a Python loop.
        # Computed in float64 (float32 products are exact there), then rounded to float32: the
        # same pair's cosine is computed in several anchors' Gram matrices with different
        # summation orders, and the rounding makes those agree (barring a ~1e-9 chance of
        # straddling a float32 step), so equal groups tie exactly and the documented tie-breaks
        # decide instead of last-bit noise.
        v = np.concatenate([x[s:e, None, :], x[safe]], axis=1).astype(np.float64)
        gram = np.matmul(v, v.transpose(0, 2, 1)).astype(np.float32).astype(np.float64)
        sa = gram[:, 0, 1:]  # (m, k) cos(anchor, neighbour j)
        ok = valid & (sa >= thr)
        ai, j = np.nonzero(ok)
        pair_a.append(ai + s)
        pair_b.append(nbc[ai, j])
        pair_cos.append(sa[ai, j])
        if not want_triples or k < 2:
            continue
        sk = np.where(valid, skills[safe], -1)
        gbc = gram[:, 1:, 1:]  # (m, k, k) cos(neighbour j, neighbour l)
        eligible = (ok[:, :, None] & ok[:, None, :] & (sk[:, :, None] != sk[:, None, :])
                    & (gbc >= thr))
        # Extension value cos(a, c) + cos(b, c); the pair's own cos(a, b) is common to all c.
        value = np.where(eligible, sa[:, None, :] + gbc, -np.inf)
        best = np.argmax(value, axis=2)  # first (best-ranked) l on ties
        has = eligible.any(axis=2)
        ti, tj = np.nonzero(has)
        tl = best[ti, tj]
        tri_a.append(ti + s)
        tri_b.append(nbc[ti, tj])
        tri_c.append(nbc[ti, tl])
        tri_ab.append(sa[ti, tj])
        tri_ac.append(sa[ti, tl])
        tri_bc.append(gbc[ti, tj, tl])

    def cat(parts: list[np.ndarray], dt) -> np.ndarray:
        return np.concatenate(parts).astype(dt) if parts else np.zeros(0, dt)

    pairs = _best_pairs(hyp, skills, cat(pair_a, np.int64), cat(pair_b, np.int64),
                        cat(pair_cos, np.float64))
    # Without triples the lists are empty and this yields empty arrays.
    triples = _best_triples(
        hyp, skills, cat(tri_a, np.int64), cat(tri_b, np.int64), cat(tri_c, np.int64),
        cat(tri_ab, np.float64), cat(tri_ac, np.float64), cat(tri_bc, np.float64))
    return _materialize(hyp, skills, pairs, triples, max_groups)


def _first_per_key(keys: list[np.ndarray], order: np.ndarray) -> np.ndarray:
    """Positions (into ``order``) that start a new run of equal keys."""
    if len(order) == 0:
        return np.zeros(0, np.int64)
    new = np.zeros(len(order), bool)
    new[0] = True
    for key in keys:
        ks = key[order]
        new[1:] |= ks[1:] != ks[:-1]
    return np.flatnonzero(new)


def _best_pairs(hyp, skills, a, b, cos):
    """Best pair per skill set: rows aligned to sorted skills (r0, r1), cosine, anchor row."""
    swap = skills[a] > skills[b]
    r0, r1 = np.where(swap, b, a), np.where(swap, a, b)
    s0, s1 = skills[r0], skills[r1]
    # lexsort: last key is primary. Within a skill set: best cosine, then smallest hypothesis
    # ids, then smallest anchor id.
    order = np.lexsort((hyp[a], hyp[r1], hyp[r0], -cos, s1, s0))
    first = order[_first_per_key([s0, s1], order)]
    return r0[first], r1[first], cos[first], a[first]


def _best_triples(hyp, skills, a, b, c, cab, cac, cbc):
    """Best triple per skill set: rows (t, 3) aligned to sorted skills, cosines, score, anchor."""
    rows = np.stack([a, b, c], axis=1)
    t = len(rows)
    # Symmetric 3x3 cosine table per triple so cosines can follow the rows when they are sorted.
    table = np.zeros((t, 3, 3))
    table[:, 0, 1] = table[:, 1, 0] = cab
    table[:, 0, 2] = table[:, 2, 0] = cac
    table[:, 1, 2] = table[:, 2, 1] = cbc
    perm = np.argsort(skills[rows], axis=1, kind="stable")
    rows = np.take_along_axis(rows, perm, axis=1)
    idx = np.arange(t)
    cos = np.stack([table[idx, perm[:, 0], perm[:, 1]], table[idx, perm[:, 0], perm[:, 2]],
                    table[idx, perm[:, 1], perm[:, 2]]], axis=1)
    # Summed in the sorted order, so the same three hypotheses reached from different anchors
    # score identically and the tie-break below decides, not summation order.
    score = (cos[:, 0] + cos[:, 1] + cos[:, 2]) / 3.0
    sk = skills[rows]
    h = hyp[rows]
    order = np.lexsort((hyp[a], h[:, 2], h[:, 1], h[:, 0], -score, sk[:, 2], sk[:, 1], sk[:, 0]))
    first = order[_first_per_key([sk[:, 0], sk[:, 1], sk[:, 2]], order)]
    return rows[first], cos[first], score[first], a[first]


def _materialize(hyp, skills, pairs, triples, max_groups):
    p0, p1, pcos, panchor = pairs
    trows, tcos, tscore, tanchor = triples
    n_p, n_t = len(p0), len(trows)
    # Common arrays for both kinds: pairs get row -1 / skill sentinel in the third slot, which
    # sorts before any real skill id, so (1, 2) precedes (1, 2, 3) as Python tuples would.
    rows = np.full((n_p + n_t, 3), -1, np.int64)
    rows[:n_p, 0], rows[:n_p, 1] = p0, p1
    rows[n_p:] = trows
    cos = np.full((n_p + n_t, 3), np.nan)
    cos[:n_p, 0] = pcos
    cos[n_p:] = tcos
    score = np.concatenate([pcos, tscore])
    anchor = np.concatenate([panchor, tanchor])
    sentinel = np.iinfo(np.int64).min
    sk = np.where(rows >= 0, skills[np.maximum(rows, 0)], sentinel)
    order = np.lexsort((sk[:, 2], sk[:, 1], sk[:, 0], -score))
    if max_groups is not None:
        order = order[:max_groups]

    # Python objects are the expensive part (millions of groups on the full corpus), so each kind
    # is built by one flat list comprehension over column lists (no per-row branching or tuple
    # unpacking of nested lists), then scattered into the merged order through an object array.
    # Ids are taken from shared lists, so an id that appears in many groups is one int object.
    hyp_l, skill_l = hyp.tolist(), skills.tolist()
    is_pair = rows[order, 2] < 0
    result = np.empty(len(order), dtype=object)
    sel = order[is_pair]
    result[np.flatnonzero(is_pair)] = [
        CandidateGroup((skill_l[r0], skill_l[r1]), (hyp_l[r0], hyp_l[r1]), hyp_l[an], c,
                       [{"a": hyp_l[r0], "b": hyp_l[r1], "cosine": c}])
        for r0, r1, an, c in zip(rows[sel, 0].tolist(), rows[sel, 1].tolist(),
                                 anchor[sel].tolist(), cos[sel, 0].tolist())
    ]
    sel = order[~is_pair]
    result[np.flatnonzero(~is_pair)] = [
        CandidateGroup((skill_l[r0], skill_l[r1], skill_l[r2]), (hyp_l[r0], hyp_l[r1], hyp_l[r2]),
                       hyp_l[an], sc,
                       [{"a": hyp_l[r0], "b": hyp_l[r1], "cosine": c01},
                        {"a": hyp_l[r0], "b": hyp_l[r2], "cosine": c02},
                        {"a": hyp_l[r1], "b": hyp_l[r2], "cosine": c12}])
        for r0, r1, r2, an, sc, c01, c02, c12 in zip(
            rows[sel, 0].tolist(), rows[sel, 1].tolist(), rows[sel, 2].tolist(),
            anchor[sel].tolist(), score[sel].tolist(), cos[sel, 0].tolist(),
            cos[sel, 1].tolist(), cos[sel, 2].tolist())
    ]
    return result.tolist()


def build_candidate_groups(
    hypothesis_ids: np.ndarray,
    skill_ids: np.ndarray,
    vectors: np.ndarray,
    *,
    k: int = 10,
    min_similarity: float = 0.5,
    max_group_size: int = 3,
    max_groups: int | None = None,
    method: str = "auto",
    **index_options,
) -> list[CandidateGroup]:
    """Candidate groups of 2-3 skills whose scenario hypotheses are similar.

    ``hypothesis_ids`` (unique), ``skill_ids`` (the owning skill of each hypothesis) and
    ``vectors`` (unit-length rows; pass ``normalize=True`` otherwise) are aligned. Each
    hypothesis's ``k`` nearest hypotheses of other skills are retrieved (``method`` and
    ``index_options`` as for `vector_index.VectorIndex`), then grouped by the rules in the
    module docstring. Returns groups best first.
    """
    if max_group_size not in (2, 3):
        raise ValueError("max_group_size must be 2 or 3")
    normalize = bool(index_options.pop("normalize", False))
    hyp, skills, x = _validate(hypothesis_ids, skill_ids, vectors, normalize)
    if len(hyp) == 0:
        return []
    rows, _ = other_skill_neighbours(skills, x, k, method=method, **index_options)
    return group_candidates(hyp, skills, x, rows, min_similarity=min_similarity,
                            max_group_size=max_group_size, max_groups=max_groups)
