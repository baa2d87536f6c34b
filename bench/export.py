"""Export benchmark: N tasks (default 6,000, the paper's scale) exported to one archive.

Creates, with bulk inserts into a fresh database, what construction and review leave behind for
N generated tasks: skills with categories, candidate pairs and scenarios, one validated version
per task of about ten files (Dockerfile, three data files, init script, solution, test runner
and tests, instruction, task.toml; about 5 KB, like the scripted construction's tasks), a validation with nop and oracle trials and three test
results, an approval, labels, and for a third of the tasks three rollouts of eight turns (about
1,200 of them successful, the paper's SFT set). Then it times `tasks.exports.write_archive`
of the approved tasks with every part (Harbor dataset, manifests, Hugging Face layout, SFT),
twice, and checks that the two archives are byte-identical.

Usage:
    .venv/bin/python bench/export.py                 # 6,000 tasks, SQLite in a temp dir
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/facet_bench .venv/bin/python bench/export.py --n 2000
Results go to bench/results/export.json (pass --out to change).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import cpu_model  # noqa: E402

WORDS = ["orders", "invoices", "sensors", "logs", "users", "metrics", "events", "payments", "builds", "tickets"]
TOOLS = ["python3", "jq", "awk", "sqlite3", "csvkit", "sed"]


def _csv(rng: random.Random, rows: int) -> str:
    lines = ["id,customer,amount,status,day"]
    for i in range(rows):
        lines.append(f"{i},c{rng.randint(1, 40)},{rng.randint(1, 999)},"
                     f"{rng.choice(['paid', 'paid', 'cancelled', 'refunded'])},2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}")
    return "\n".join(lines) + "\n"


def task_files(i: int, rng: random.Random, categories: list[str], skills: list[str]) -> dict[str, str]:
    from facet_site.lib import harbor

    word = rng.choice(WORDS)
    tool = rng.choice(TOOLS)
    files = {
        "environment/Dockerfile": ("FROM facet-base:bookworm\nWORKDIR /app\nCOPY data/ /app/data/\n"
                                   "COPY init.sh /usr/local/bin/facet-init.sh\nRUN bash /usr/local/bin/facet-init.sh\n"),
        "environment/data/input.csv": _csv(rng, rng.randint(60, 120)),
        "environment/data/customers.csv": "customer,name\n" + "".join(f"c{k},Name {k}\n" for k in range(1, 41)),
        "environment/data/config.json": json.dumps({"task": i, "currency": "EUR", "round": 2, "skip": ["cancelled"]},
                                                   indent=2) + "\n",
        "environment/init.sh": "#!/bin/bash\nset -e\nmkdir -p /app/out\n",
        "solution/solve.sh": (f"#!/bin/bash\nset -euo pipefail\ncd /app\n# task {i}: {word} with {tool}\n"
                              "python3 - <<'PY'\nimport csv, json\ncfg = json.load(open('data/config.json'))\n"
                              "tot = {}\nfor r in csv.DictReader(open('data/input.csv')):\n"
                              "    if r['status'] not in cfg['skip']:\n"
                              "        tot[r['customer']] = tot.get(r['customer'], 0) + int(r['amount'])\n"
                              "with open('out/report.csv', 'w') as f:\n    f.write('customer,total\\n')\n"
                              "    for c in sorted(tot):\n        f.write(f'{c},{tot[c]}\\n')\nPY\n"),
        "tests/test.sh": ("#!/bin/bash\ncd /app\npython3 -m pytest -q -p no:cacheprovider "
                          "--junitxml=/logs/verifier/junit.xml /tests/test_outputs.py\n"
                          "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; "
                          "else echo 0 > /logs/verifier/reward.txt; fi\n"),
        "tests/test_outputs.py": (f"from pathlib import Path\n\n\ndef test_report_exists_{i}():\n"
                                  "    assert Path('/app/out/report.csv').exists()\n\n\n"
                                  "def test_header():\n    assert Path('/app/out/report.csv').read_text()"
                                  ".startswith('customer,total')\n\n\ndef test_no_cancelled():\n"
                                  "    assert 'cancelled' not in Path('/app/out/report.csv').read_text()\n"),
        "instruction.md": (f"# {word.title()} report {i}\n\nTotal the amounts in `/app/data/input.csv` per customer, "
                           f"leaving out the statuses listed under `skip` in `/app/data/config.json`. Write "
                           f"`/app/out/report.csv` with the header `customer,total`, sorted by customer.\n"),
    }
    cfg = harbor.TaskConfig(author_name="facet", difficulty=rng.choice(["easy", "medium", "hard"]),
                            category=categories[0], tags=sorted({s.rsplit("/", 1)[-1] for s in skills}),
                            scenario_id=str(i), version_hash=f"sha256:{i:064x}", skills=skills,
                            agent_timeout_sec=300.0, verifier_timeout_sec=300.0, build_timeout_sec=600.0)
    files["task.toml"] = harbor.canonical_task_toml(cfg)
    return files


def populate(n: int, seed: int) -> dict:
    from django.contrib.auth import get_user_model

    from facet_site.lib import harbor
    from scenarios.models import CandidatePair, PairSkill, Scenario, SynthesisRun
    from skills.models import Category, Skill
    from tasks import versions as task_versions
    from tasks.models import (
        Decision, LabelKind, RolloutBatch, Step, Task, TaskLabel, TaskStatus, TaskVersion, TestResult, Trajectory,
        TrajectoryStatus, Trial, Turn, Validation, ValidationStatus,
    )

    rng = random.Random(seed)
    started = time.perf_counter()
    reviewer = get_user_model().objects.create_user("bench-reviewer", password="x")
    fine = list(Category.objects.filter(parent__isnull=False).select_related("parent"))
    skills = Skill.objects.bulk_create([
        Skill(key=f"clawhub:bench/skill-{k}", source="bench", source_kind="clawhub", name=f"skill-{k}",
              content_hash=f"{k:064x}", category=fine[k % len(fine)]) for k in range(300)])
    skills = list(Skill.objects.select_related("category__parent").order_by("id"))
    run = SynthesisRun.objects.create(name="bench export run")
    pairs = CandidatePair.objects.bulk_create([
        CandidatePair(run=run, skill_set=f"bench-{i}", scenario_text="bench", verdict="accepted", status="done")
        for i in range(n)])
    chosen = [rng.sample(skills, 2) for _ in range(n)]
    PairSkill.objects.bulk_create([PairSkill(pair=p, skill=s, position=j) for p, two in zip(pairs, chosen)
                                   for j, s in enumerate(two)], batch_size=2000)
    scenarios = Scenario.objects.bulk_create([
        Scenario(pair=p, run=run, title=f"{rng.choice(WORDS).title()} report {i}", status="done",
                 consistency="consistent") for i, p in enumerate(pairs)], batch_size=2000)
    tasks = Task.objects.bulk_create([
        Task(scenario=sc, run=run, name=sc.title, status=TaskStatus.VALIDATED, step=Step.DONE,
             review_state="approved", n_tests=3) for sc in scenarios], batch_size=2000)
    versions = []
    for i, (task, two) in enumerate(zip(tasks, chosen)):
        files = task_files(i, rng, [s.category.slug for s in two], [s.key for s in two])
        digest = harbor.content_hash(task_versions.bundle_of(task.name, files))
        versions.append(TaskVersion(task=task, number=1, content_hash=digest, files=files))
    versions = TaskVersion.objects.bulk_create(versions, batch_size=500)
    for task, version in zip(tasks, versions):
        task.current_version = version
    Task.objects.bulk_update(tasks, ["current_version"], batch_size=2000)
    validations = Validation.objects.bulk_create([
        Validation(version=v, status=ValidationStatus.DONE, accepted=True) for v in versions], batch_size=2000)
    trials = Trial.objects.bulk_create(
        [Trial(validation=val, version=val.version, kind=kind, reward=reward, passed=True)
         for val in validations for kind, reward in (("nop", 0.0), ("oracle", 1.0))], batch_size=2000)
    TestResult.objects.bulk_create([TestResult(trial=t, name=f"test_{k}", outcome="passed")
                                    for t in trials if t.kind == "oracle" for k in range(3)], batch_size=5000)
    Decision.objects.bulk_create([Decision(task=t, version=v, content_hash=v.content_hash, verdict="approve",
                                           author=reviewer) for t, v in zip(tasks, versions)], batch_size=2000)
    labels = []
    for task, two in zip(tasks, chosen):
        values = set()
        for s in two:
            values |= {(LabelKind.TAG, s.key.rsplit("/", 1)[-1]), (LabelKind.CATEGORY, s.category.slug),
                       (LabelKind.DOMAIN, (s.category.parent or s.category).slug)}
        labels += [TaskLabel(task=task, kind=k, value=v) for k, v in values]
    TaskLabel.objects.bulk_create(labels, batch_size=5000)
    batch = RolloutBatch.objects.create(name="bench rollouts", model="bench/model-a", max_turns=30, timeout_s=900)
    rolled = tasks[: n // 3]
    trajectories = []
    for task in rolled:
        for attempt in range(3):
            passed = rng.random() < 0.2
            trajectories.append(Trajectory(batch=batch, task=task, version=task.current_version, attempt=attempt,
                                           model=batch.model, agent="terminus-2", status=TrajectoryStatus.DONE,
                                           reward=1.0 if passed else 0.0, passed=passed, n_turns=8))
    trajectories = Trajectory.objects.bulk_create(trajectories, batch_size=2000)
    turns = []
    for traj in trajectories:
        for k in range(1, 9):
            turns.append(Turn(trajectory=traj, index=k, analysis=f"Step {k}: the output shows the data so far.",
                              plan="Inspect, then transform and check.", task_complete=k == 8,
                              commands=[{"keystrokes": f"head -n 5 /app/data/input.csv # {k}\n", "duration": 1}],
                              output="$ head -n 5 /app/data/input.csv\n" + "id,customer,amount\n" * 4
                              + "[exit code 0, 0.0 s]"))
    Turn.objects.bulk_create(turns, batch_size=5000)
    return {"tasks": n, "files_per_version": 11, "bytes_per_version": sum(len(t) for t in versions[0].files.values()),
            "trajectories": len(trajectories), "successful_trajectories": sum(t.passed for t in trajectories),
            "turns": len(turns), "populate_seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "export.json"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="facet-bench-export-"))
    os.environ.setdefault("FACET_DATA_DIR", str(work / "data"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "facet_site.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from tasks import exports

    call_command("migrate", verbosity=0)
    database = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    data = populate(args.n, args.seed)
    print(f"populated {data}", flush=True)

    runs = []
    for attempt in (1, 2):
        target = work / f"export-{attempt}.tar.gz"
        t0 = time.perf_counter()
        result = exports.write_archive(target, query="review=approved")
        seconds = time.perf_counter() - t0
        runs.append({"seconds": round(seconds, 2), "sha256": result.sha256, "bytes": result.bytes})
        print(f"export {attempt}: {seconds:.1f} s, {result.bytes:,} bytes, {result.summary['tasks']} tasks, "
              f"{result.summary['sft_trajectories']} SFT", flush=True)
    best = min(r["seconds"] for r in runs)
    out = {
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "database": database,
                    "load_average_1m_at_end": round(os.getloadavg()[0], 2)},
        "data": {**data, "generator": f"bench/export.py (seed {args.seed})", "synthetic": True},
        "export": {
            "query": "review=approved", "parts": list(exports.PARTS), "tasks": result.summary["tasks"],
            "sft_trajectories": result.summary["sft_trajectories"], "archive_bytes": result.bytes,
            "runs": runs, "best_seconds": best, "tasks_per_second": round(result.summary["tasks"] / best, 1),
            "byte_identical": runs[0]["sha256"] == runs[1]["sha256"], "goal_seconds": 60,
            "goal_met": best < 60,
        },
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["export"], indent=2))
    if "DATABASE_URL" not in os.environ:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
