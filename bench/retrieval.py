"""Candidate-group retrieval benchmark: 71,341 synthetic skills x 3 scenario hypotheses.

Generates hypothesis texts in the style of `embedding_compare.synthetic_descriptions` (one domain
per skill, occasional borrowing from a second one), embeds them with the production embedder
(ONNX Runtime, int8), then times `facet_site.lib.retrieval.build_candidate_groups` end to end and
reports groups found (pairs vs triples), peak RSS of the build, recall@10 of the approximate
neighbour search against exact search for a 10,000-hypothesis query sample, and the exact
all-pairs time extrapolated from that sample.

Usage:
    .venv/bin/python bench/retrieval.py                       # real embeddings (cached)
    .venv/bin/python bench/retrieval.py --embed-only          # only build the vector cache
    .venv/bin/python bench/retrieval.py --synthetic-vectors --skills 20000   # quick run

Embedding 214k texts takes ~12 minutes on two cores, so the vectors are cached in
var/bench-cache/retrieval-vectors.npy with a sidecar .json holding the key (skills, hypotheses
per skill, seed, embedder signature, hash of the texts); a mismatching key re-embeds.
Results go to bench/results/retrieval.json (``--json`` to change).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import resource
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from embedding_compare import _DOMAINS  # noqa: E402

CACHE_DIR = REPO / "var" / "bench-cache"
VECTORS_FILE = CACHE_DIR / "retrieval-vectors.npy"

# Scenario hypotheses describe who uses a skill, where, from what starting point and towards
# what result. The slots below are domain-independent on purpose: they make hypotheses of
# different domains share wording (as real LLM-written hypotheses do: "a small team", "by the
# end of the week"), so cross-domain similarities are not artificially near zero and the
# min_similarity threshold has to do real work.
_SETTINGS = ["a small startup", "a university lab", "a hospital IT department", "a newsroom",
             "a logistics company", "a design agency", "a government office", "a nonprofit",
             "a retail chain", "an open-source project", "a consulting firm", "a bank"]
_PROBLEMS = ["several files are duplicated", "naming is inconsistent", "some values are missing",
             "nothing is documented", "encodings are mixed", "the previous owner left",
             "half of the entries are outdated", "there is no automation yet",
             "the folder layout changed twice", "nobody knows which version is current"]
_DEADLINES = ["before the Monday meeting", "by the end of the week", "for the quarterly review",
              "before the audit", "ahead of the release", "for a client presentation",
              "every night without supervision", "in under an hour"]
_PLACES = ["a shared drive", "a Git repository", "an S3 bucket", "a laptop folder",
           "an email attachment", "a network share", "a project workspace"]

_HYPOTHESIS_TEMPLATES = {
    "context": [
        "At {setting}, {aud} work with {obj} kept as {fmt} and routinely {verb} them with {tool}.",
        "Application context: {aud} at {setting} handle {obj} in {fmt} and use {tool} and {tool2} "
        "for day-to-day work.",
    ],
    "goal": [
        "{Aud} need to {verb} {obj} starting from {fmt} files so that the result {feat} "
        "{deadline}.",
        "A member of {setting} wants to {verb} {obj} with {tool} and then {verb2} them, so that "
        "{aud} get {fmt2} output {deadline}.",
    ],
    "initial": [
        "Starting from {count} {obj} saved as {fmt} in {place}, where {problem}.",
        "Initial state: {count} {obj} in {fmt} sit in {place}; {problem}, and {tool} is installed "
        "in the terminal.",
    ],
    "final": [
        "Desired final state: the {obj} are available as {fmt2}, the workflow {feat}, and {aud} "
        "can review a short summary.",
        "In the end {place} holds {fmt2} output produced by {tool}; the process {feat} and {feat2} "
        "{deadline}.",
    ],
}
_KINDS = sorted(_HYPOTHESIS_TEMPLATES)


def synthetic_hypotheses(n_skills: int, per_skill: int = 3, seed: int = 0) -> list[str]:
    """``n_skills * per_skill`` hypothesis texts; skill i owns texts [i*per_skill, (i+1)*per_skill).

    Each skill draws one domain (20% borrow secondary tools/formats from another domain, as in
    `synthetic_descriptions`) and one "situation" (setting, place, deadline, objects), then
    writes ``per_skill`` hypotheses of distinct kinds about it, so a skill's hypotheses share
    content the way hypotheses extracted from one SKILL.md do. Texts are unique.
    """
    if per_skill > len(_KINDS):
        raise ValueError(f"at most {len(_KINDS)} hypotheses per skill")
    rng = random.Random(seed)
    names = sorted(_DOMAINS)
    out: list[str] = []
    seen: set[str] = set()
    for _ in range(n_skills):
        d = _DOMAINS[rng.choice(names)]
        d2 = _DOMAINS[rng.choice(names)] if rng.random() < 0.2 else d
        slots = {
            "setting": rng.choice(_SETTINGS), "place": rng.choice(_PLACES),
            "deadline": rng.choice(_DEADLINES), "aud": rng.choice(d["audience"]),
            "obj": rng.choice(d["objects"]), "fmt": rng.choice(d["formats"]),
            "fmt2": rng.choice(d2["formats"]), "tool": rng.choice(d["tools"]),
            "tool2": rng.choice(d2["tools"]),
        }
        slots["Aud"] = slots["aud"][0].upper() + slots["aud"][1:]
        for kind in rng.sample(_KINDS, per_skill):
            # Per-hypothesis draws (verbs, features, problem, count) vary within a skill; retry
            # on the rare exact repeat, which would give a trivially perfect neighbour.
            while True:
                verb, verb2 = rng.sample(d["verbs"], 2)
                feat, feat2 = rng.sample(d["features"], 2)
                text = rng.choice(_HYPOTHESIS_TEMPLATES[kind]).format(
                    **slots, verb=verb, verb2=verb2, feat=feat, feat2=feat2,
                    problem=rng.choice(_PROBLEMS), count=rng.choice([12, 40, 85, 200, 350, 1200]),
                )
                if text not in seen:
                    break
            seen.add(text)
            out.append(text)
    return out


def _texts_key(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def embedded_vectors(texts: list[str], key: dict, batch_size: int = 64) -> tuple[np.ndarray, bool]:
    """Vectors for ``texts`` from the cache if its key matches, else embed and cache them."""
    from facet_site.lib.embedding import Embedder

    meta_file = VECTORS_FILE.with_suffix(".json")
    key = dict(key, texts_sha256=_texts_key(texts))
    if VECTORS_FILE.exists() and meta_file.exists():
        meta = json.loads(meta_file.read_text())
        if {k: meta.get(k) for k in key} == key:
            x = np.load(VECTORS_FILE, mmap_mode=None)
            if x.shape[0] == len(texts):
                print(f"loaded cached vectors {VECTORS_FILE} "
                      f"({meta.get('embed_seconds')} s to embed)")
                return x, True
    emb = Embedder(backend="onnx-int8", cache_dir=REPO / "var" / "models")
    chunk = 8192
    parts = []
    t0 = time.perf_counter()
    for s in range(0, len(texts), chunk):
        parts.append(emb.encode(texts[s:s + chunk], batch_size=batch_size))
        done = min(s + chunk, len(texts))
        el = time.perf_counter() - t0
        print(f"  embedded {done}/{len(texts)} ({done / el:.0f}/s, {el:.0f} s)", flush=True)
    x = np.vstack(parts)
    secs = round(time.perf_counter() - t0, 1)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    # Write-then-rename so an interrupted run never leaves a truncated cache behind.
    tmp = VECTORS_FILE.with_suffix(".tmp.npy")
    np.save(tmp, x)
    tmp.replace(VECTORS_FILE)
    meta_file.write_text(json.dumps(dict(key, embedder=emb.signature, embed_seconds=secs,
                                         texts_per_s=round(len(texts) / secs, 1)), indent=2) + "\n")
    return x, False


def synthetic_vectors(n_skills: int, per_skill: int, seed: int, dim: int = 384) -> np.ndarray:
    """Clustered random unit vectors shaped like the real ones, for quick runs without a model.

    Three levels, as in the texts: 16 "domain" centres, a centre per skill near its domain's,
    and the skill's hypotheses near the skill centre. Uniform random vectors would be useless
    here: they have no near neighbours, so HNSW recall and the grouping would both say nothing.
    """
    rng = np.random.default_rng(seed)
    domains = rng.standard_normal((16, dim)).astype(np.float32)
    skill_centres = domains[rng.integers(0, 16, n_skills)] + 0.8 * rng.standard_normal(
        (n_skills, dim), dtype=np.float32)
    x = np.repeat(skill_centres, per_skill, axis=0)
    x += 0.6 * rng.standard_normal(x.shape, dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x, dtype=np.float32)


def _machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import faiss

    return {
        "cpu": cpu,
        "cores": (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                  else os.cpu_count()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "faiss": getattr(faiss, "__version__", "?"),
        "load_average_at_start": [round(v, 2) for v in os.getloadavg()],
    }


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset this process's VmHWM (Linux >= 4.0), so the next reading covers only what follows."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def neighbour_recall(approx: np.ndarray, exact: np.ndarray) -> float:
    """Fraction of the queries' exact top-k (valid entries) that the approximate search found."""
    hits, total = 0, 0
    for a, e in zip(approx.tolist(), exact.tolist()):
        e = [v for v in e if v >= 0]
        hits += len(set(a) & set(e))
        total += len(e)
    return hits / max(total, 1)


def run(x: np.ndarray, skills: np.ndarray, args) -> dict:
    from facet_site.lib import retrieval, vector_index

    n = len(x)
    hyp = np.arange(n, dtype=np.int64)
    # Record the neighbour lists (and their time) from inside the real build_candidate_groups
    # call instead of re-running the search: HNSW is the dominant cost and rebuilding it would
    # both double the run and measure recall on a different graph than the one that was used.
    captured: dict = {}
    original = retrieval.other_skill_neighbours

    def recording(*a, **kw):
        t = time.perf_counter()
        rows, scores = original(*a, **kw)
        captured.update(rows=rows, seconds=time.perf_counter() - t)
        return rows, scores

    rss_before = _status_kib("VmRSS")
    hwm_reset = _reset_peak_rss()
    retrieval.other_skill_neighbours = recording
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        groups = retrieval.build_candidate_groups(
            hyp, skills, x, k=args.k, min_similarity=args.min_similarity, method=args.method)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        retrieval.other_skill_neighbours = original
    peak_kib = _status_kib("VmHWM") if hwm_reset else None
    sizes = np.array([len(g.skill_ids) for g in groups])
    scores = np.array([g.score for g in groups])
    approx_rows = captured["rows"]
    del groups

    res: dict = {
        "build_candidate_groups": {
            "seconds": round(total, 1),
            "neighbour_search_seconds": round(captured["seconds"], 1),
            "grouping_seconds": round(total - captured["seconds"], 1),
            # CPU time of this process (all threads): on a shared machine, wall time above
            # ~cpu_seconds / cores means other processes were competing for the cores.
            "cpu_seconds": round(cpu, 1),
            "load_average_after": [round(v, 2) for v in os.getloadavg()],
            "index": ("flat" if args.method == "flat" or (args.method == "auto"
                      and n <= vector_index.DEFAULT_EXACT_MAX_N) else args.method.replace(
                          "auto", "hnsw")),
            "hnsw": {"m": vector_index.DEFAULT_HNSW_M,
                     "ef_construction": vector_index.DEFAULT_HNSW_EF_CONSTRUCTION,
                     "ef_search": vector_index.DEFAULT_HNSW_EF_SEARCH},
            "k": args.k, "min_similarity": args.min_similarity, "method": args.method,
            "groups": int(len(sizes)),
            "pairs": int((sizes == 2).sum()), "triples": int((sizes == 3).sum()),
            "score_quantiles": {q: round(float(np.quantile(scores, float(q))), 4)
                                for q in ("0.0", "0.5", "0.9", "1.0")} if len(scores) else {},
            "peak_rss_mb_during_build": round(peak_kib / 1024, 1) if peak_kib else None,
            "rss_mb_before_build": round(rss_before / 1024, 1) if rss_before else None,
        },
    }
    # Recall of the approximate search on a query sample against exact search over the whole
    # collection: exactly the quality that matters here (each hypothesis's neighbours among all
    # others), and the exact search on the sample also times flat search for extrapolation.
    rng = np.random.default_rng(args.seed + 1)
    sample = np.sort(rng.choice(n, size=min(args.recall_sample, n), replace=False))
    t0 = time.perf_counter()
    exact_rows, _ = retrieval.other_skill_neighbours(skills, x, args.k, method="flat",
                                                     query_rows=sample)
    exact_secs = time.perf_counter() - t0
    res["recall"] = {
        "sample": int(len(sample)),
        f"recall_at_{args.k}": round(neighbour_recall(approx_rows[sample], exact_rows), 4),
        "exact_search_seconds_on_sample": round(exact_secs, 1),
        "exact_all_pairs_seconds_extrapolated": round(exact_secs * n / len(sample), 1),
        "note": "exact = flat inner-product search of the sample against all vectors; "
                "all-pairs time scales linearly in the number of queries",
    }
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--skills", type=int, default=71_341)
    p.add_argument("--per-skill", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--min-similarity", type=float, default=0.5)
    p.add_argument("--method", default="auto")
    p.add_argument("--recall-sample", type=int, default=10_000)
    p.add_argument("--synthetic-vectors", action="store_true",
                   help="clustered random vectors instead of embedded texts (quick runs)")
    p.add_argument("--embed-only", action="store_true", help="only build the vector cache")
    p.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "retrieval.json")
    args = p.parse_args(argv)

    key = {"skills": args.skills, "per_skill": args.per_skill, "seed": args.seed}
    if args.synthetic_vectors:
        x = synthetic_vectors(args.skills, args.per_skill, args.seed)
        data = {"vectors": "synthetic clustered random vectors (--synthetic-vectors)", **key}
    else:
        texts = synthetic_hypotheses(args.skills, args.per_skill, args.seed)
        x, cached = embedded_vectors(texts, key)
        if args.embed_only:
            return 0
        meta = json.loads(VECTORS_FILE.with_suffix(".json").read_text())
        data = {"vectors": "real embeddings of synthetic hypothesis texts", **key,
                "embedder": meta.get("embedder"), "vectors_from_cache": cached,
                "embed_seconds": meta.get("embed_seconds"),
                "embed_texts_per_s": meta.get("texts_per_s"),
                "generator": "bench/retrieval.py synthetic_hypotheses",
                "example_texts": texts[:3]}
    skills = np.repeat(np.arange(args.skills, dtype=np.int64), args.per_skill)
    data["hypotheses"] = int(len(x))
    data["dim"] = int(x.shape[1])

    out = {"machine": _machine(), "data": data}
    out.update(run(x, skills, args))
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["peak_rss_mb_process"] = round(r / 1048576 if sys.platform == "darwin" else r / 1024, 1)

    b, rc = out["build_candidate_groups"], out["recall"]
    print(f"machine: {out['machine']['cpu']}, {out['machine']['cores']} cores; "
          f"data: {data['hypotheses']} x {data['dim']} ({data['vectors']})")
    print(f"build_candidate_groups: {b['seconds']} s "
          f"(neighbours {b['neighbour_search_seconds']} s, "
          f"grouping {b['grouping_seconds']} s), {b['groups']} groups = {b['pairs']} pairs + "
          f"{b['triples']} triples, peak RSS during build {b['peak_rss_mb_during_build']} MB")
    print(f"recall@{args.k} vs exact on {rc['sample']} queries: {rc[f'recall_at_{args.k}']}; "
          f"exact all-pairs ~{rc['exact_all_pairs_seconds_extrapolated']} s (extrapolated)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
