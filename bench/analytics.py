"""Analytics benchmark: latency of every analytics page over the dashboard benchmark's data plus
30,000 rollouts, over real HTTP.

Seeds a PostgreSQL database (created if missing; its own, so it never disturbs the dashboard
benchmark's) with bench/dashboard.py's data (71,341 skills, 10,000 tasks in 20 runs with versions,
validations, trials, review events and labels), then 30,000 rollout trajectories on the validated
tasks, each with its trial, per-test results and turns (commands with their program and kind):

  batch A  built-in, model-a, 3 attempts on 6,000 tasks   18,000 trajectories
  batch B  built-in, model-b, 3 attempts on 2,000 tasks    6,000
  batch C  Harbor import, claude-code/model-c, 1 on 6,000   6,000

Per task a difficulty is drawn (Beta(0.6, 1.2): most tasks hard, as in the paper), each attempt
passes with it; 3–25 turns per attempt (mean about 12), 0–3 commands per turn drawn from a
cat-heavy mix (the paper's Table 6). Task.pass_rate and n_rollouts are filled with one UPDATE.
Seeding is skipped when the rollouts are already there (--reseed starts again).

Then serves the site with gunicorn (2 workers × 4 threads) and drives it with 4 concurrent
logged-in clients, each requesting every analytics page in turn (with and without filters), and
reports p50/p95/max per page (goal: p95 under 300 ms), once with every request computing its
aggregates (FACET_ANALYTICS_CACHE_S=0) and once with the default result cache (tasks.analytics.cached).

Usage:
    .venv/bin/python bench/analytics.py                  # postgres://postgres@127.0.0.1:5432/facet_bench_analytics
    .venv/bin/python bench/analytics.py --requests 30 --reseed
Results go to bench/results/analytics.json (pass --out to change).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import dashboard  # noqa: E402
from bench.machine import cpu_model  # noqa: E402

GOAL_P95_MS = 300
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/facet_bench_analytics"
N_ROLLOUTS = 30_000
# (program, kind, weight): most command lines in successful trajectories read (Table 6: cat 46%)
PROGRAMS = [("cat", "observation", 46), ("ls", "observation", 12), ("grep", "observation", 6),
            ("head", "observation", 5), ("python3", "action", 8), ("echo", "action", 5), ("sed", "action", 3),
            ("jq", "observation", 3), ("find", "observation", 3), ("mkdir", "action", 2), ("cp", "action", 2),
            ("sqlite3", "action", 2), ("wc", "observation", 2), ("awk", "observation", 1)]


def _command(rng: random.Random) -> dict:
    program, kind, _ = rng.choices(PROGRAMS, weights=[w for _, _, w in PROGRAMS])[0]
    return {"command": f"{program} /app/data/file{rng.randint(1, 9)}", "program": program, "kind": kind,
            "exit_code": 0, "seconds": round(rng.uniform(0.01, 2), 3)}


def _state(commands: list[dict]) -> str:
    kinds = {c["kind"] for c in commands}
    if not kinds:
        return "none"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def seed_rollouts(rng: random.Random) -> dict:
    from django.db import connection

    from tasks.models import (RolloutBatchStatus, RolloutBatch, Task, TaskStatus, TestResult, Trajectory, TrajectoryStatus,
                              Trial, TrialKind, Turn)

    timings = {}
    t0 = time.perf_counter()
    tasks = list(Task.objects.filter(status=TaskStatus.VALIDATED).order_by("id")
                 .values_list("id", "current_version_id", "n_tests"))
    rng.shuffle(tasks)
    difficulty = {t[0]: rng.betavariate(0.6, 1.2) for t in tasks}
    plans = [("bench model-a × 3", "builtin", "model-a", "terminus-2", 3, tasks[:6000]),
             ("bench model-b × 3", "builtin", "model-b", "terminus-2", 3, tasks[:2000]),
             ("nightly Harbor job", "harbor", "deepseek/model-c", "claude-code", 1, tasks[:6000])]
    trajectories: list[Trajectory] = []
    trials: list[Trial] = []
    specs = []
    for name, source, model, agent, k, selected in plans:
        batch = RolloutBatch.objects.create(name=name, source=source, model=model, agent=agent, attempts=k,
                                            status=RolloutBatchStatus.DONE, selection={"query": "status=validated"},
                                            config={"job_id": name} if source == "harbor" else {})
        for task_id, version_id, n_tests in selected:
            for attempt in range(k):
                passed = rng.random() < difficulty[task_id]
                n_turns = max(3, min(25, int(rng.gauss(12, 5))))
                failure = "" if passed else rng.choices(["tests_failed", "turn_budget", "time_budget", "no_reward"],
                                                         weights=[80, 10, 5, 5])[0]
                trials.append(Trial(version_id=version_id, kind=TrialKind.ROLLOUT, index=attempt,
                                    reward=1.0 if passed else 0.0, passed=passed, failure=failure,
                                    verifier_output="===== passed =====\n" if passed else "===== failed =====\n",
                                    seconds=rng.uniform(30, 600)))
                trajectories.append(Trajectory(batch=batch, task_id=task_id, version_id=version_id, attempt=attempt,
                                               model=model, agent=agent, status=TrajectoryStatus.DONE,
                                               reward=1.0 if passed else 0.0, passed=passed, failure=failure,
                                               n_turns=n_turns, seconds=rng.uniform(30, 600),
                                               prompt_tokens=n_turns * 3000, completion_tokens=n_turns * 200))
                specs.append((n_tests or rng.randint(3, 10), passed, n_turns))
    Trial.objects.bulk_create(trials, batch_size=5000)
    for traj, trial in zip(trajectories, trials):
        traj.trial_id = trial.pk
    Trajectory.objects.bulk_create(trajectories, batch_size=5000)
    timings["trajectories_trials"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    tests: list[TestResult] = []
    n_tests_total = 0
    for trial, (n_tests, passed, _) in zip(trials, specs):
        failing = 0 if passed else rng.choices([0, 1, 2, 3, 4, 5], weights=[3, 35, 25, 15, 12, 10])[0]
        for k in range(n_tests):
            outcome = "passed" if k >= failing else rng.choices(["failed", "error"], weights=[9, 1])[0]
            tests.append(TestResult(trial_id=trial.pk, name=f"test_outputs.py::test_{k}", outcome=outcome))
        if len(tests) >= 50_000:
            TestResult.objects.bulk_create(tests, batch_size=10_000)
            n_tests_total += len(tests)
            tests = []
    TestResult.objects.bulk_create(tests, batch_size=10_000)
    n_tests_total += len(tests)
    timings["test_results"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    turns: list[Turn] = []
    n_turns_total = 0
    for traj, (_, passed, n_turns) in zip(trajectories, specs):
        for i in range(1, n_turns + 1):
            if i == 1:
                commands = [_command(rng) for _ in range(rng.randint(1, 3))]
                for c in commands:
                    if rng.random() < 0.93:
                        c.update(program="cat", kind="observation", command="cat /app/README.md")
            elif i == n_turns:
                commands = []
            else:
                commands = [_command(rng) for _ in range(rng.choice([0, 1, 1, 1, 2, 2, 3]))]
            turns.append(Turn(trajectory_id=traj.pk, index=i, analysis="Looking at the files.", plan="Next step.",
                              commands=commands, output="$ cat /app/README.md\n...\n[exit code 0, 0.1 s]",
                              state=_state(commands), task_complete=i == n_turns, seconds=rng.uniform(1, 30),
                              prompt_tokens=3000, completion_tokens=200))
        if len(turns) >= 50_000:
            Turn.objects.bulk_create(turns, batch_size=10_000)
            n_turns_total += len(turns)
            turns = []
    Turn.objects.bulk_create(turns, batch_size=10_000)
    n_turns_total += len(turns)
    timings["turns"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with connection.cursor() as cur:
        # the summary columns summary.refresh_summary writes, for every task at once
        cur.execute("""
            UPDATE tasks_task t SET n_rollouts = s.n, pass_rate = s.c::float / s.n
            FROM (SELECT task_id, version_id, COUNT(*) AS n, COUNT(*) FILTER (WHERE passed) AS c
                  FROM tasks_trajectory WHERE status = 'done' GROUP BY task_id, version_id) s
            WHERE s.task_id = t.id AND s.version_id = t.current_version_id""")
        # what autovacuum would do by itself a little later: statistics, and visibility maps for
        # index-only scans after the bulk UPDATEs
        cur.execute("VACUUM ANALYZE")
    timings["summary"] = time.perf_counter() - t0
    return {"stages": {k: round(v, 1) for k, v in timings.items()}, "trajectories": len(trajectories),
            "turns": n_turns_total, "test_results": n_tests_total}


def rollouts_seeded() -> bool:
    from tasks.models import Trajectory

    return Trajectory.objects.count() >= N_ROLLOUTS


def page_urls(rng: random.Random, tags: list[str], cats: list[str], families: list[str], batches: list[int]) -> dict:
    a = "/tasks/analytics"
    return {
        "overview": lambda: rng.choice([f"{a}/", f"{a}/?model=model-a", f"{a}/?strategy=forward"]),
        "pass_at_k": lambda: rng.choice([f"{a}/pass-at-k/", f"{a}/pass-at-k/?model=model-b",
                                         f"{a}/pass-at-k/?sort=p3&page={rng.randint(2, 50)}",
                                         f"{a}/pass-at-k/?batch={rng.choice(batches)}"]),
        "tags": lambda: rng.choice([f"{a}/tags/", f"{a}/tags/?model=model-a", f"{a}/tags/?category={rng.choice(cats)}",
                                    f"{a}/tags/?source=harbor&top=40"]),
        "failures": lambda: rng.choice([f"{a}/failures/", f"{a}/failures/?strategy=forward",
                                        f"{a}/failures/?model=model-a&family={rng.choice(families)}"]),
        "strategies": lambda: rng.choice([f"{a}/strategies/", f"{a}/strategies/?run={rng.randint(1, 20)}"]),
        "datasets": lambda: rng.choice([f"{a}/datasets/", f"{a}/datasets/?tag={rng.choice(tags)}"]),
        "commands": lambda: rng.choice([f"{a}/commands/", f"{a}/commands/?model=model-b",
                                        f"{a}/commands/?category={rng.choice(cats)}"]),
        "families": lambda: rng.choice([f"{a}/families/", f"{a}/families/?strategy=reverse"]),
        "csv": lambda: rng.choice([f"{a}/pass-at-k/?format=csv", f"{a}/tags/?format=csv&table=categories",
                                   f"{a}/commands/?format=csv&table=transitions"]),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default=os.environ.get("FACET_BENCH_ANALYTICS_DATABASE_URL", DEFAULT_DB))
    parser.add_argument("--reseed", action="store_true")
    parser.add_argument("--seed-only", action="store_true")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=20, help="requests per client per page kind")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "analytics.json")
    args = parser.parse_args(argv)

    if args.reseed:
        dashboard.drop_database(args.database)
    dashboard.ensure_database(args.database)
    work = Path(tempfile.mkdtemp(prefix="facet-bench-analytics-"))
    env = {**os.environ, "DATABASE_URL": args.database, "FACET_DATA_DIR": str(work / "data"),
           "DJANGO_SETTINGS_MODULE": "facet_site.settings", "DEBUG": "0", "ALLOWED_HOSTS": "127.0.0.1,localhost",
           "SECRET_KEY": "bench-" + hashlib.sha256(os.urandom(16)).hexdigest()}
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    seed_seconds: dict = {}
    if not dashboard.seeded():
        print("seeding the dashboard data (71,341 skills, 10,000 tasks, 50,000 trials, 100,000 review events)…",
              flush=True)
        t0 = time.perf_counter()
        stages = dashboard.seed(random.Random(11))
        seed_seconds["dashboard"] = {"total": round(time.perf_counter() - t0, 1), **stages}
        print(f"  {seed_seconds['dashboard']}", flush=True)
    rollout_counts = None
    if not rollouts_seeded():
        print(f"seeding {N_ROLLOUTS:,} rollouts with trials, tests and turns…", flush=True)
        t0 = time.perf_counter()
        rollout_counts = seed_rollouts(random.Random(23))
        seed_seconds["rollouts"] = {"total": round(time.perf_counter() - t0, 1), **rollout_counts["stages"]}
        print(f"  {seed_seconds['rollouts']}", flush=True)
    if args.seed_only:
        return 0
    call_command("collectstatic", verbosity=0, interactive=False)

    from django.contrib.auth.models import User

    from skills.models import Skill
    from tasks.models import LabelKind, RolloutBatch, Task, TaskLabel, TestResult, Trajectory, Trial, Turn

    counts = {"skills": Skill.objects.count(), "tasks": Task.objects.count(), "trials": Trial.objects.count(),
              "test_results": TestResult.objects.count(), "rollouts": Trajectory.objects.count(),
              "turns": Turn.objects.count(), "labels": TaskLabel.objects.count()}
    tags = list(TaskLabel.objects.filter(kind=LabelKind.TAG).values_list("value", flat=True).distinct()[:500])
    cats = list(TaskLabel.objects.filter(kind=LabelKind.CATEGORY).values_list("value", flat=True).distinct())
    families = list(TaskLabel.objects.filter(kind=LabelKind.FAMILY).values_list("value", flat=True).distinct())
    batches = list(RolloutBatch.objects.values_list("id", flat=True))
    users = list(User.objects.filter(username__startswith="bench-reviewer-").values_list("username", flat=True))

    def run(cache_seconds: int, seed: int) -> dict:
        """One gunicorn server and one measurement, with the result cache on or off."""
        with dashboard.serve({**env, "FACET_ANALYTICS_CACHE_S": str(cache_seconds)}, args.workers, args.threads) as base:
            urls = page_urls(random.Random(seed), tags, cats, families, batches)
            dashboard.measure(base, users, urls, 2, 2, goal_ms=GOAL_P95_MS)  # warm-up: imports, connections (and a few cache entries)
            return dashboard.measure(base, users, urls, args.requests, args.clients, goal_ms=GOAL_P95_MS)

    load_before = os.getloadavg()
    uncached = run(0, 5)
    cached = run(120, 5)
    result = {
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "database": "postgresql", "load_average_before": load_before},
        "data": {**counts, "generator": "bench/dashboard.py seed (seed 11) + bench/analytics.py rollouts (seed 23)"},
        "server": {"gunicorn_workers": args.workers, "threads": args.threads, "debug": False},
        "clients": args.clients, "requests_per_client_per_page": args.requests,
        "seed_seconds": seed_seconds or None,
        # every request computes its aggregates (FACET_ANALYTICS_CACHE_S=0)
        "uncached": uncached,
        # the default: results kept per selection until the data stamp changes (120 s at most)
        "cached": cached,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for mode in ("uncached", "cached"):
        print(mode, json.dumps({k: (v["p50_ms"], v["p95_ms"]) for k, v in result[mode]["pages"].items()}))
        if result[mode]["error_count"]:
            print(f"{result[mode]['error_count']} requests failed, e.g. {result[mode]['errors'][:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
