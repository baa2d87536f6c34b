"""Red-team benchmark: how many of the red-team skills the safety scan flags, and how many of their
legitimate look-alikes it leaves clean (docs/skills.md, "Red-team rounds").

The sets were written on 2026-12-06 (1-4) and 2026-12-07 (5-11) by sessions that never saw the rules, as tests: malicious
skills that each hide a payload a different way (defanged: documentation addresses, invented
domains) beside look-alikes a good scanner must pass. They live in
`tests/lib/fixtures/safety-redteam.tar.gz` with a `labels.jsonl` per set (path, label, technique,
where). A skill counts as flagged when the safety scan says unsafe or suspicious, or a filter gives
it the unsafe verdict, as ingest decides.

Each set was scored once before anything was changed because of it; those figures are history (the
docs table). This script gives the current rules' figures, for comparing a change against its
baseline in the same run (run it from a worktree of the baseline too).

Usage:
    .venv/bin/python bench/safety_redteam.py            # writes bench/results/safety_redteam.json
    .venv/bin/python bench/safety_redteam.py --out /tmp/r.json --misses
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import cpu_model, load_average  # noqa: E402
from facet_site.lib import skill_filters, skill_safety  # noqa: E402
from facet_site.lib.skillformat import ParsedSkill  # noqa: E402
from facet_site.lib.skillformat.corpus import discover  # noqa: E402

SETS = REPO / "tests" / "lib" / "fixtures" / "safety-redteam.tar.gz"


def level_of(skill: ParsedSkill) -> str:
    """unsafe, suspicious or clean, as ingest would decide it for this skill."""
    if any(f.kind == skill_filters.UNSAFE for f in skill_filters.evaluate(skill)):
        return "unsafe"
    return skill_safety.scan_parsed_skill(skill).level


def score_set(root: Path) -> dict:
    labels = {row["path"]: row for row in map(json.loads, (root / "labels.jsonl").read_text().splitlines()) if row}
    levels = {s.key: level_of(s) for s in discover(root, scan_text=skill_safety.scan_text_part) if isinstance(s, ParsedSkill)}
    malicious = [p for p, row in labels.items() if row["label"] != "clean"]
    lookalikes = [p for p, row in labels.items() if row["label"] == "clean"]
    return {
        "skills": len(labels),
        "malicious": len(malicious),
        "malicious_flagged": sum(levels.get(p, "clean") != "clean" for p in malicious),
        "lookalikes": len(lookalikes),
        "lookalikes_clean": sum(levels.get(p) == "clean" for p in lookalikes),
        "misses": sorted(p for p in malicious if levels.get(p, "clean") == "clean"),
        "false_alarms": sorted(p for p in lookalikes if levels.get(p) != "clean"),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "safety_redteam.json"))
    ap.add_argument("--misses", action="store_true", help="print the missed skills and false alarms too")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(SETS) as tar:
            tar.extractall(tmp, filter="data")
        base = Path(tmp) / "safety-redteam"
        results = {d.name: score_set(d) for d in sorted(base.iterdir()) if d.is_dir()}
    for name, r in results.items():
        print(f"{name}: malicious flagged {r['malicious_flagged']} of {r['malicious']}, "
              f"look-alikes clean {r['lookalikes_clean']} of {r['lookalikes']}")
        if args.misses:
            print("  missed:", ", ".join(r["misses"]) or "none")
            print("  false alarms:", ", ".join(r["false_alarms"]) or "none")
    Path(args.out).write_text(json.dumps({
        "benchmark": "safety_redteam",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "python": platform.python_version(), "load_average": load_average()},
        "data": str(SETS.relative_to(REPO)),
        "seconds": round(time.perf_counter() - started, 1),
        "sets": results,
    }, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
