"""The cost of issue 13's repeated trials: wall time per validation before (one nop, one oracle,
one after the other) and after (two of each, concurrently where cores allow), in one run, and
each trial next to the plain docker CLI running the same trial side by side.

Uses the three generated tasks of bench/validation_tasks.py (built once, not timed). Per round and task, in
a rotating order:

* before:        validate_task(trial_runs=1, max_parallel=1, partial_solutions=[])
* after_serial:  validate_task(trial_runs=2, max_parallel=1, partial_solutions=[])
* after:         validate_task(trial_runs=2, partial_solutions=[]) — trials concurrently
                 (max_parallel: one per core, at most 4)
* plain:         time_plain_cli_validation: one nop and one oracle with `docker` commands

Reported: median and p90 wall time per validation of each variant, the added cost (after vs
before), the speed-up of running the trials concurrently (after_serial vs after), and per trial
kind the ratio of our trial (before's, one at a time) to the plain CLI's (the limit is 1.15×).

Usage:
    .venv/bin/python bench/validation.py --trials            # 5 rounds
    .venv/bin/python bench/validation_trials.py --rounds 3
Results go to bench/results/validation-trials.json (machine, data, date).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import cpu_model  # noqa: E402
from bench.validation import stats  # noqa: E402
from bench.validation_tasks import write_tasks  # noqa: E402
from facet_site.lib import docker_engine as de  # noqa: E402
from facet_site.lib import validation as v  # noqa: E402

VARIANTS = {"before": {"trial_runs": 1, "max_parallel": 1},
            "after_serial": {"trial_runs": 2, "max_parallel": 1},
            "after": {"trial_runs": 2}}
TRIAL_LIMIT = 1.15


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "validation-trials.json")
    args = parser.parse_args(argv)

    client = de.connect(os.environ.get("DOCKER_HOST", ""))
    if de.find_image(client, de.BASE_IMAGE_TAG) is None:
        print(f"{de.BASE_IMAGE_TAG} is missing: python -m facet_site.lib.docker_engine base-image", file=sys.stderr)
        return 1
    nonce = uuid.uuid4().hex[:8]
    owner = f"bench-trials:{socket.gethostname()}:{os.getpid()}:{nonce}"
    work = Path(tempfile.mkdtemp(prefix="facet-bench-trials-"))
    tasks = write_tasks(work, nonce, seed=args.seed)
    walls: dict[str, list[float]] = {k: [] for k in (*VARIANTS, "plain")}
    trial_pairs: dict[str, list[tuple[float, float]]] = {"nop": [], "oracle": []}
    problems: list[str] = []
    started = time.monotonic()
    try:
        image_tags = {}
        for d, spec in tasks:  # build once, warm up, check the task is good
            report = v.validate_task(client, d, owner=owner, partial_solutions=[], trial_runs=1)
            if not report.accepted:
                raise SystemExit(f"{spec['name']} was not accepted: {report.failure}: {report.reason}")
            image_tags[d] = report.image_tag
        names = [*VARIANTS, "plain"]
        for r in range(args.rounds):
            for ti, (d, spec) in enumerate(tasks):
                shift = (r + ti) % len(names)
                ours_trials: dict[str, float] = {}
                plain_trials: dict[str, float] = {}
                for variant in names[shift:] + names[:shift]:
                    t0 = time.perf_counter()
                    if variant == "plain":
                        result = v.time_plain_cli_validation(d, image_tags[d])
                        plain_trials = {"nop": result["nop_seconds"], "oracle": result["oracle_seconds"]}
                    else:
                        report = v.validate_task(client, d, owner=owner, partial_solutions=[], **VARIANTS[variant])
                        if report.failure == v.INFRA_ERROR:  # the engine's trouble: noted, not timed
                            problems.append(f"round {r + 1} {variant} {spec['name']}: {report.reason}"[:500])
                            continue
                        if not report.accepted:
                            raise SystemExit(f"{variant} {spec['name']}: {report.failure}: {report.reason}")
                        if variant == "before":
                            ours_trials = {t.kind: t.total_seconds for t in report.trials}
                    walls[variant].append(time.perf_counter() - t0)
                for kind in trial_pairs:
                    if kind in ours_trials and kind in plain_trials:
                        trial_pairs[kind].append((ours_trials[kind], plain_trials[kind]))
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{k} {statistics.median(w):.2f}s" for k, w in walls.items()), flush=True)
    finally:
        de.cleanup_leftovers(client, owner=owner)
        shutil.rmtree(work, ignore_errors=True)

    per_variant = {k: stats(w) for k, w in walls.items()}
    ratios = {kind: stats([ours / plain for ours, plain in pairs]) for kind, pairs in trial_pairs.items()}
    result = {
        "what": "validation wall time before/after issue 13's repeated nop and oracle trials",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"host": socket.gethostname(), "cpu": cpu_model(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "engine": str(de.engine_info(client))[:300],
                    "load_average": [round(x, 2) for x in os.getloadavg()]},
        "data": {"tasks": [spec["name"] for _, spec in tasks], "rounds": args.rounds,
                 "variants": {k: {**cfg, "partial_solutions": []} for k, cfg in VARIANTS.items()}},
        "seconds_per_validation": per_variant,
        "added_cost": {"median_s": per_variant["after"]["median"] - per_variant["before"]["median"],
                       "p90_s": per_variant["after"]["p90"] - per_variant["before"]["p90"],
                       "median_ratio": per_variant["after"]["median"] / per_variant["before"]["median"]},
        "concurrency_speedup": per_variant["after_serial"]["median"] / per_variant["after"]["median"],
        "trial_vs_plain_cli": {kind: {**r, "limit": TRIAL_LIMIT, "within_limit": r["median"] <= TRIAL_LIMIT}
                               for kind, r in ratios.items()},
        "engine_problems": problems,
        "total_seconds": time.monotonic() - started,
    }
    client.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("seconds_per_validation", "added_cost", "concurrency_speedup",
                                            "trial_vs_plain_cli")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
