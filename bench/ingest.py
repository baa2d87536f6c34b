"""Ingest benchmark: N synthetic skills (default 71,341, the paper's corpus) through the real ingest.

Reports skills per second for each stage of `skills.services.run_ingest` (parsing, filtering,
classification, embedding, storage) from one end-to-end ingest into a fresh database, the peak
memory, and a side-by-side comparison of the embedding backends on a sample of the same texts:
plain sentence-transformers on torch against the production backend (ONNX Runtime, int8), with
throughput, mean cosine and top-10 neighbour overlap against full precision.

Usage:
    .venv/bin/python bench/ingest.py                       # 71,341 skills, SQLite in a temp dir
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/facet_bench .venv/bin/python bench/ingest.py --n 10000
Results go to bench/results/ingest.json and bench/results/ingest.md (pass --out to change).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench.machine import cpu_model  # noqa: E402

from embedding_compare import compare, synthetic_descriptions  # noqa: E402

TOOLS = ["jq", "python3", "sqlite3", "git", "curl", "awk", "sed", "ffmpeg", "convert", "pandoc", "csvkit", "yq"]
FILES = ["data/input.csv", "config.yaml", "report.md", "logs/app.log", "db.sqlite", "out/summary.json", "media/clip.wav"]


def skill_text(i: int, description: str, rng: random.Random) -> str:
    tools = rng.sample(TOOLS, 3)
    files = rng.sample(FILES, 2)
    name = f"synthetic-skill-{i}"
    kind = rng.random()
    body_extra = ""
    env = ""
    if kind < 0.02:  # unsafe: destructive host command
        body_extra = "\n```bash\nrm -rf / --no-preserve-root\n```\n"
    elif kind < 0.05:  # private: requires a secret API key
        env = "metadata:\n  openclaw:\n    requires:\n      env: [SYNTH_SERVICE_API_KEY]\n"
    if kind > 0.99:  # non-actionable: persona text only
        return f"---\nname: {name}\ndescription: {description}\n---\n# Persona\n\nBe kind and encouraging.\n"
    return (
        f"---\nname: {name}\ndescription: {description}\nlicense: MIT-0\n{env}---\n"
        f"# {name}\n\n## Inputs\n- `{files[0]}`\n\n## Steps\n"
        f"1. Inspect `{files[0]}` with `{tools[0]}`.\n2. Transform it with `{tools[1]}`.\n"
        f"3. Write `{files[1]}` and check it with `{tools[2]}`.\n\n"
        f"```bash\n{tools[0]} {files[0]} | {tools[1]} > {files[1]}\n```\n"
        f"{body_extra}\n## Outputs\n- `{files[1]}`\n"
    )


def write_corpus(root: Path, n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    descriptions = synthetic_descriptions(n, seed=seed)
    for i, description in enumerate(descriptions):
        owner = f"owner{i % 997}"
        d = root / owner / f"skill-{i}"
        d.mkdir(parents=True)
        if i % 100 == 99:  # exact duplicates: a copy of the previous skill under another owner
            (d / "SKILL.md").write_text((root / f"owner{(i - 1) % 997}" / f"skill-{i - 1}" / "SKILL.md").read_text())
        else:
            (d / "SKILL.md").write_text(skill_text(i, description, rng))
        (d / "_meta.json").write_text(json.dumps({
            "owner": owner, "slug": f"skill-{i}", "displayName": f"Skill {i}",
            "latest": {"version": "1.0.0", "publishedAt": 1760000000000 + i, "commit": f"{i:040x}"}, "history": [],
        }))
    return descriptions


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=71_341)
    parser.add_argument("--compare-sample", type=int, default=3_000, help="texts for the torch vs int8 comparison")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ingest")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="facet-bench-ingest-"))
    os.environ.setdefault("FACET_DATA_DIR", str(work / "data"))
    os.environ.setdefault("FACET_MODELS_DIR", str(REPO / "var" / "models"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "facet_site.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from skills import services
    from skills.models import Skill

    call_command("migrate", verbosity=0)
    database = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]

    t0 = time.perf_counter()
    descriptions = write_corpus(work / "corpus", args.n)
    write_seconds = time.perf_counter() - t0
    print(f"wrote {args.n} synthetic skills in {write_seconds:.1f}s", flush=True)

    services.embedder().encode(["warm up"])  # model export/load is a one-off, not ingest throughput
    t0 = time.perf_counter()
    batch = services.ingest_path(work / "corpus", label="bench")
    ingest_seconds = time.perf_counter() - t0
    summary = batch.summary
    stage_seconds = summary["seconds"]
    print(f"ingested in {ingest_seconds:.1f}s: {batch.message}", flush=True)

    sample = descriptions[: args.compare_sample]
    side_by_side = compare(sample, backends=("torch", "onnx-int8"), cache_dir=settings.FACET_MODELS_DIR, chunks=4)

    result = {
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(), "database": database},
        "data": {"skills": args.n, "synthetic": True, "mean_description_tokens": "about 42 (MiniLM tokenizer)",
                 "generator": "bench/ingest.py + bench/embedding_compare.synthetic_descriptions (seed 7)"},
        "ingest": {
            "total_seconds": round(ingest_seconds, 1),
            "skills_per_second": round(args.n / ingest_seconds, 1),
            "stage_seconds": stage_seconds,
            "stage_skills_per_second": {k: round(args.n / v, 1) for k, v in stage_seconds.items() if v > 0},
            "summary": {k: v for k, v in summary.items() if k != "seconds"},
            "stored_rows": Skill.objects.count(),
        },
        "embedding_side_by_side": {"texts": len(sample), **side_by_side},
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "goals": {
            "embedding at least 2x sentence-transformers": side_by_side["onnx-int8"]["speedup_vs_torch"] >= 2,
            "mean cosine >= 0.99": side_by_side["onnx-int8"]["mean_cosine_vs_torch"] >= 0.99,
            "top-10 overlap >= 0.85": side_by_side["onnx-int8"]["top10_overlap_vs_torch"] >= 0.85,
            "whole ingest under 10 minutes": ingest_seconds < 600,
        },
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
