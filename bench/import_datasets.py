"""Import benchmark (issue 17): a few thousand real-shaped tasks through `tasks.imports.import_path`.

Writes N tasks (default 3,000) with the fixture writers of tests/tasks/dataset_fixtures.py, in the
mix the issue met in public collections: Harbor tasks with binary files (WAV, PNG, Parquet, PDF,
an encrypted blob; odd task.toml text and modes, an empty directory), a tenth of them without
solve.sh, and Terminal-Bench 1 tasks in the shapes of its SWE-bench, LiveCodeBench and
compose-based adapters; then imports the folder into a fresh database and reports seconds per
thousand tasks (goal: under 60), with the per-task cost of the import-time static checks.

Usage:
    .venv/bin/python bench/import_datasets.py                 # 3,000 tasks, SQLite in a temp dir
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/facet_bench .venv/bin/python bench/import_datasets.py --n 2000
Results go to bench/results/import_datasets.json (pass --out to change).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MIX = (("harbor_multimedia", 0.55), ("harbor_without_solve_sh", 0.10), ("tb1_swebench", 0.15),
       ("tb1_livecodebench", 0.12), ("tb1_compose", 0.08))


def write_dataset(root: Path, n: int) -> dict[str, int]:
    from tests.tasks import dataset_fixtures as fx

    writers = {
        "harbor_multimedia": lambda d, i: fx.multimedia_task(d, n=i),
        "harbor_without_solve_sh": lambda d, i: fx.multimedia_task(d, n=i, solution=False),
        "tb1_swebench": lambda d, i: fx.swebench_task(d),
        "tb1_livecodebench": lambda d, i: fx.livecodebench_task(d),
        "tb1_compose": lambda d, i: fx.compose_task(d),
    }
    counts = {kind: 0 for kind, _ in MIX}
    bounds, acc = [], 0.0
    for kind, share in MIX:
        acc += share
        bounds.append((acc, kind))
    for i in range(n):
        kind = next(k for b, k in bounds if (i + 0.5) / n <= b + 1e-9)
        d = root / f"{kind}-{i:05d}"
        writers[kind](d, i)
        # every task distinct (a content clash would be skipped, not imported)
        if (d / "instruction.md").exists():
            (d / "instruction.md").write_text(f"Task {i}: convert the audio.\n")
        else:
            (d / "task.yaml").write_text((d / "task.yaml").read_text().replace("Fix the bug", f"Fix bug {i}"))
        counts[kind] += 1
    return counts


def _backend_pid() -> int | None:
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _cpu_seconds(pid: int | None) -> float:
    """utime + stime of a process on this machine (0 when it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "import_datasets.json"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="facet-bench-import-"))
    os.environ.setdefault("FACET_DATA_DIR", str(work / "data"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "facet_site.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from tasks import imports
    from tasks.models import TaskBlob, TaskVersion

    call_command("migrate", verbosity=0)
    load_at_start = round(os.getloadavg()[0], 2)
    database = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    t0 = time.perf_counter()
    counts = write_dataset(work / "dataset", args.n)
    written = time.perf_counter() - t0
    print(f"wrote {args.n} tasks in {written:.1f} s: {counts}", flush=True)

    checks = {"seconds": 0.0, "calls": 0}
    real_findings = imports.import_findings

    def timed_findings(bundle):
        start = time.perf_counter()
        try:
            return real_findings(bundle)
        finally:
            checks["seconds"] += time.perf_counter() - start
            checks["calls"] += 1

    imports.import_findings = timed_findings
    backend = _backend_pid()
    t0, cpu0, db0 = time.perf_counter(), time.process_time(), _cpu_seconds(backend)
    task_import = imports.import_path(work / "dataset")
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    db_cpu = _cpu_seconds(backend) - db0 if backend else None
    per_thousand = seconds / args.n * 1000
    out = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "database": database,
                    "load_average_1m_at_start": load_at_start,
                    "load_average_1m_at_end": round(os.getloadavg()[0], 2)},
        "data": {"tasks": args.n, "mix": counts, "generator": "tests/tasks/dataset_fixtures.py", "synthetic": True},
        "import": {
            "seconds": round(seconds, 1), "seconds_per_1000_tasks": round(per_thousand, 1),
            # this process's CPU time (the database server's is not in it): what the import costs
            # when the machine is not shared
            "cpu_seconds_per_1000_tasks": round(cpu / args.n * 1000, 1),
            # the PostgreSQL backend serving this connection (same machine), from /proc
            "database_cpu_seconds_per_1000_tasks": round(db_cpu / args.n * 1000, 1) if db_cpu is not None else None,
            "imported": task_import.imported, "skipped": task_import.skipped,
            "problems": len(task_import.problems),
            "versions": TaskVersion.objects.count(), "blobs": TaskBlob.objects.count(),
            "static_checks_seconds": round(checks["seconds"], 1),
            "goal_seconds_per_1000": 60, "goal_met": per_thousand < 60,
        },
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["import"], indent=2))
    if "DATABASE_URL" not in os.environ:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
