"""Dashboard benchmark: page latency of the review dashboard at the paper's scale, over real HTTP.

Seeds a PostgreSQL database (created if missing) with 71,341 skills, 10,000 constructed tasks in
20 runs (scenarios, environments with one or two build attempts, 1–4 versions each,
validations), 50,000 trials with per-test
results, 100,000 review events (decisions and audit events) and the task labels; the summary
columns are filled from the seeded records. Seeding is skipped when the database already holds
that data (pass --reseed to start again).

Then serves the site with gunicorn (2 workers × 4 threads on 127.0.0.1) and drives it with
8 concurrent logged-in clients (urllib with cookie jars), each requesting the pages in turn:

  list      /tasks/ with and without filters, sorts, search and deep pages
  detail    /tasks/<id>/ for random tasks, default tab and the repairs tab
  funnel    /tasks/overview/ overall and per run
  taxonomy  /skills/taxonomy/

and reports p50/p95/max latency per page kind (goal: p95 under 200 ms).

Usage:
    .venv/bin/python bench/dashboard.py                         # postgres://postgres@127.0.0.1:5432/facet_bench_dashboard
    .venv/bin/python bench/dashboard.py --requests 40 --reseed
Results go to bench/results/dashboard.json (pass --out to change).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import cpu_model  # noqa: E402

GOAL_P95_MS = 200
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/facet_bench_dashboard"
N_SKILLS, N_TASKS, N_TRIALS, N_EVENTS, N_RUNS = 71_341, 10_000, 50_000, 100_000, 20
WORDS = ("orders ledger customers invoices sensor readings backup archive report schedule audit csv json yaml "
         "sqlite logs metrics deploy release changelog markdown pdf slides budget inventory shipments").split()


def ensure_database(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --------------------------------------------------------------------------------------------
# Seeding


def seed(rng: random.Random) -> dict:
    from django.db import connection, transaction
    from django.utils import timezone

    from facet_site.roles import REVIEWER
    from facet_site.services import ensure_user
    from scenarios.models import CandidatePair, Consistency, PairSkill, PairVerdict, RunStatus, Scenario, Stage, SynthesisRun, WorkStatus
    from skills.models import Category, Skill
    from tasks.models import (AuditEvent, BuildOutcome, Decision, Environment, EnvironmentBuild, EnvironmentStatus, LabelKind, RejectReason,
                              RepairRound, ReviewState, Task, TaskLabel, TaskStatus, TaskVersion, TestResult, Trial,
                              TrialKind, Validation, ValidationStatus, ReviewVerdict)
    from tasks.summary import families

    timings = {}
    t0 = time.perf_counter()
    leaves = list(Category.objects.filter(parent__isnull=False).select_related("parent"))
    batch = 5000
    skills = []
    for i in range(N_SKILLS):
        cat = rng.choice(leaves)
        words = rng.sample(WORDS, 4)
        skills.append(Skill(key=f"bench:owner{i % 997}/skill-{i}", source="bench", source_kind="directory",
                            owner=f"owner{i % 997}", slug=f"skill-{i}", name=f"{words[0]}-{words[1]}-{i}",
                            description=" ".join(words), content_hash=hashlib.sha256(str(i).encode()).hexdigest(),
                            category=cat, category_confidence=rng.random(), category_source="model",
                            search_document=" ".join(words)))
    Skill.objects.bulk_create(skills, batch_size=batch)
    skill_ids = list(Skill.objects.values_list("id", "category_id"))
    timings["skills"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    reviewers = [ensure_user(username=f"bench-reviewer-{i}", password="bench", role=REVIEWER) for i in range(6)]
    runs = SynthesisRun.objects.bulk_create([
        SynthesisRun(name=f"bench run {i}", status=RunStatus.SUCCEEDED, stage=Stage.DONE,
                     strategy=rng.choice(["forward", "forward", "reverse", "joint"])) for i in range(N_RUNS)])
    cat_by_id = {c.pk: c for c in leaves}
    fam = families()
    pairs, tasks_spec = [], []
    for i in range(N_TASKS):
        run = runs[i % N_RUNS]
        (a, ca), (b, cb) = rng.sample(skill_ids, 2)
        pairs.append(CandidatePair(run=run, skill_set=f"{min(a, b)},{max(a, b)}", scenario_text=" ".join(rng.sample(WORDS, 8)),
                                   verdict=PairVerdict.ACCEPTED, status=WorkStatus.DONE, score=rng.random()))
        tasks_spec.append((run, (a, ca), (b, cb)))
    CandidatePair.objects.bulk_create(pairs, batch_size=batch)
    PairSkill.objects.bulk_create([PairSkill(pair=p, skill_id=s, position=j)
                                   for p, (_, x, y) in zip(pairs, tasks_spec) for j, (s, _) in enumerate((x, y))],
                                  batch_size=batch)
    scenarios = Scenario.objects.bulk_create([
        Scenario(pair=p, run=p.run, status=WorkStatus.DONE, title=f"{' '.join(rng.sample(WORDS, 3))} #{i}",
                 goal="Produce the report", context="A small team", capability="python3, jq", state="/app/data",
                 io_tools="csv in, json out", integrated="...", consistency=Consistency.CONSISTENT)
        for i, p in enumerate(pairs)], batch_size=batch)
    envs = Environment.objects.bulk_create([
        Environment(scenario=s, status=EnvironmentStatus.BUILT, image_tag=f"facet-task:{i:08x}",
                    files={"Dockerfile": "FROM facet-base:bookworm\nWORKDIR /app\nCOPY data /app/data\n",
                           "data/orders.csv": "id,customer,total\n" + "".join(f"{k},c{k % 7},{k * 3}\n" for k in range(40))},
                    initial_state={"files": [{"path": "/app/data/orders.csv", "size": 600}]})
        for i, s in enumerate(scenarios)], batch_size=batch)
    # build attempts: 85% build first time, the rest after one environment repair
    builds = []
    for env in envs:
        first_ok = rng.random() < 0.85
        builds.append(EnvironmentBuild(environment=env, attempt=1, files=env.files, image_tag=env.image_tag,
                                       outcome=BuildOutcome.SUCCEEDED if first_ok else BuildOutcome.BUILD_FAILED,
                                       reason="" if first_ok else "E: Unable to locate package python3-polars",
                                       log="Step 1/3 : FROM facet-base:bookworm\n", seconds=rng.uniform(2, 40)))
        if not first_ok:
            builds.append(EnvironmentBuild(environment=env, attempt=2, files=env.files, image_tag=env.image_tag,
                                           outcome=BuildOutcome.SUCCEEDED, log="Step 1/3 : FROM facet-base:bookworm\n",
                                           seconds=rng.uniform(2, 40)))
    EnvironmentBuild.objects.bulk_create(builds, batch_size=batch)
    timings["scenarios"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    statuses = [TaskStatus.VALIDATED] * 6 + [TaskStatus.DISCARDED] * 3 + [TaskStatus.FAILED]
    tasks = Task.objects.bulk_create([
        Task(scenario=s, run=s.run, environment=e, strategy=s.run.strategy, name=s.title, status=rng.choice(statuses),
             step="done") for s, e in zip(scenarios, envs)], batch_size=batch)
    # versions: 1 + repairs (0..3); trials spread so that the total is N_TRIALS
    versions, repairs_spec = [], []
    for t in tasks:
        n_repairs = rng.choices([0, 1, 2, 3], weights=[60, 25, 10, 5])[0]
        for n in range(1, n_repairs + 2):
            instruction = (f"# {t.name}\n\nRead `/app/data/orders.csv` and write `/app/out/report.json` with the "
                           f"{' '.join(rng.sample(WORDS, 6))}.\n")
            files = {"instruction.md": instruction, "task.toml": 'version = "1.0"\n',
                     "environment/Dockerfile": "FROM facet-base:bookworm\nWORKDIR /app\n",
                     "solution/solve.sh": f"#!/bin/bash\npython3 - <<'EOF'\nprint({n})\nEOF\n",
                     "tests/test.sh": "#!/bin/bash\npytest /tests/test_outputs.py\n",
                     "tests/test_outputs.py": "def test_report():\n    assert True\n" * (1 + n % 3)}
            versions.append(TaskVersion(task=t, number=n, files=files,
                                        content_hash=f"sha256:{hashlib.sha256(f'{t.pk}-{n}'.encode()).hexdigest()}"))
        repairs_spec.append(n_repairs)
    TaskVersion.objects.bulk_create(versions, batch_size=2000)
    by_task: dict[int, list] = {}
    for v in versions:
        by_task.setdefault(v.task_id, []).append(v)
    validations = []
    for t in tasks:
        for v in by_task[t.pk]:
            validations.append(Validation(version=v, status=ValidationStatus.DONE,
                                          accepted=(v.number == len(by_task[t.pk]) and t.status == TaskStatus.VALIDATED),
                                          failure="" if t.status == TaskStatus.VALIDATED else "nop_passed",
                                          total_seconds=rng.uniform(5, 60), build_seconds=rng.uniform(0, 30)))
    Validation.objects.bulk_create(validations, batch_size=batch)
    repairs = []
    for t, n_repairs in zip(tasks, repairs_spec):
        vs = by_task[t.pk]
        for k in range(n_repairs):
            repairs.append(RepairRound(task=t, number=k + 1, artifact=rng.choice(["verifier", "solution", "instruction"]),
                                       failure=rng.choice(["nop_passed", "oracle_failed", "partial_passed"]),
                                       from_version=vs[k], to_version=vs[k + 1], outcome="fixed"))
    RepairRound.objects.bulk_create(repairs, batch_size=batch)
    # trials: N_TRIALS over the validations, round robin nop, oracle, partial...
    trials = []
    kinds = [TrialKind.NOP, TrialKind.ORACLE, TrialKind.PARTIAL]
    for i in range(N_TRIALS):
        val = validations[i % len(validations)]
        kind = kinds[(i // len(validations)) % 3] if i >= len(validations) else TrialKind.ORACLE
        trials.append(Trial(validation=val, version_id=val.version_id, kind=kind, index=i // (3 * len(validations)),
                            reward=1.0 if kind == TrialKind.ORACLE else 0.0, passed=True,
                            seconds=rng.uniform(1, 20), peak_memory_bytes=rng.randint(10, 400) * 2**20,
                            solution_output="ok\n", verifier_output="===== 3 passed in 0.12s =====\n"))
    Trial.objects.bulk_create(trials, batch_size=batch)
    tests = []
    for tr in trials:
        for k in range(rng.randint(2, 6)):
            tests.append(TestResult(trial=tr, name=f"test_outputs.py::test_{k}", outcome="passed" if tr.reward else "failed"))
    TestResult.objects.bulk_create(tests, batch_size=batch)
    timings["tasks_versions_trials"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    n_decisions = N_EVENTS * 2 // 5
    decisions, events = [], []
    now = timezone.now()
    for i in range(n_decisions):
        t = tasks[rng.randrange(len(tasks))]
        v = by_task[t.pk][-1]
        verdict = rng.choice([ReviewVerdict.APPROVE, ReviewVerdict.APPROVE, ReviewVerdict.REJECT, ReviewVerdict.NEEDS_FIX])
        decisions.append(Decision(task=t, version=v, content_hash=v.content_hash, verdict=verdict,
                                  reason="" if verdict == ReviewVerdict.APPROVE else rng.choice(RejectReason.values),
                                  author=rng.choice(reviewers), comment="looks right" if verdict == ReviewVerdict.APPROVE else "see reason"))
    Decision.objects.bulk_create(decisions, batch_size=batch)
    for d in decisions:
        events.append(AuditEvent(actor_id=d.author_id, action="decide", object_type="decision", object_id=str(d.pk),
                                 task_id=d.task_id, before={"review_state": "unreviewed"}, after={"verdict": d.verdict}))
    for i in range(N_EVENTS - 2 * n_decisions):
        t = tasks[rng.randrange(len(tasks))]
        events.append(AuditEvent(actor=rng.choice(reviewers), action=rng.choice(["lock", "release", "view-saved"]),
                                 object_type="task", object_id=str(t.pk), task=t))
    AuditEvent.objects.bulk_create(events, batch_size=batch)
    # spread decisions over the last 60 days (throughput chart)
    with connection.cursor() as cur:
        cur.execute("UPDATE tasks_decision SET created_at = %s - (id %% 60) * interval '1 day'", [now])
        cur.execute("UPDATE tasks_auditevent SET created_at = %s - (id %% 60) * interval '1 day'", [now])
    timings["review_events"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    # labels and summary columns, from the records just written
    labels = []
    for t, (run, (a, ca), (b, cb)) in zip(tasks, tasks_spec):
        seen = set()
        for sid, cid in ((a, ca), (b, cb)):
            cat = cat_by_id[cid]
            for kind, value in ((LabelKind.TAG, f"skill-{sid}"), (LabelKind.CATEGORY, cat.slug),
                                (LabelKind.DOMAIN, cat.parent.slug), (LabelKind.FAMILY, fam.get(cat.slug, ""))):
                if value and (kind, value) not in seen:
                    seen.add((kind, value))
                    labels.append(TaskLabel(task=t, kind=kind, value=value))
    TaskLabel.objects.bulk_create(labels, batch_size=batch)
    last_decision = {}
    for d in decisions:
        last_decision[d.task_id] = d.verdict
    state = {ReviewVerdict.APPROVE: ReviewState.APPROVED, ReviewVerdict.REJECT: ReviewState.REJECTED, ReviewVerdict.NEEDS_FIX: ReviewState.NEEDS_FIX}
    oracle_tests = {}
    counts = {}
    for tc in tests:
        counts[tc.trial_id] = counts.get(tc.trial_id, 0) + 1
    for tr in trials:
        if tr.kind == TrialKind.ORACLE:
            oracle_tests[tr.version_id] = counts.get(tr.pk, 0)
    with transaction.atomic():
        for t in tasks:
            cur = by_task[t.pk][-1]
            Task.objects.filter(pk=t.pk).update(
                current_version=cur, review_state=state.get(last_decision.get(t.pk), ReviewState.UNREVIEWED),
                n_tests=oracle_tests.get(cur.pk), repair_rounds=len(by_task[t.pk]) - 1,
                search_document=f"{t.name}\n{cur.files['instruction.md']}")
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    timings["labels_summary"] = time.perf_counter() - t0
    return {k: round(v, 1) for k, v in timings.items()}


def seeded() -> bool:
    from skills.models import Skill
    from tasks.models import Decision, Task, Trial

    return (Skill.objects.count() >= N_SKILLS and Task.objects.count() >= N_TASKS and Trial.objects.count() >= N_TRIALS
            and Decision.objects.exists())


# --------------------------------------------------------------------------------------------
# Measuring


@contextlib.contextmanager
def serve(env: dict, workers: int, threads: int):
    """gunicorn on a free port of 127.0.0.1 with `env`; yields the base URL once it accepts."""
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "facet_site.wsgi", "-b", f"127.0.0.1:{port}",
         "-w", str(workers), "--threads", str(threads), "--log-level", "warning"],
        cwd=REPO, env=env, start_new_session=True)
    try:
        for _ in range(150):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    """One logged-in browser: a cookie jar over urllib (stdlib, no extra dependency)."""

    def __init__(self, base: str):
        import http.cookiejar
        import urllib.request

        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def cookie(self, name: str) -> str | None:
        return next((c.value for c in self.jar if c.name == name), None)

    def get(self, url: str) -> int:
        import urllib.error

        try:
            with self.opener.open(self.base + url, timeout=60) as r:
                r.read()
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def login(self, username: str) -> None:
        import urllib.parse
        import urllib.request

        self.get("/login/")
        data = urllib.parse.urlencode({"username": username, "password": "bench",
                                       "csrfmiddlewaretoken": self.cookie("csrftoken") or ""}).encode()
        req = urllib.request.Request(self.base + "/login/", data=data, headers={"Referer": self.base + "/login/"})
        with self.opener.open(req, timeout=60) as r:
            r.read()
        if not self.cookie("sessionid"):
            raise SystemExit(f"login as {username} failed")


def page_urls(rng: random.Random, task_ids: list[int], run_ids: list[int], tags: list[str], cats: list[str]) -> dict:
    return {
        "list": lambda: rng.choice([
            "/tasks/", "/tasks/?status=validated", "/tasks/?review=unreviewed&sort=-pass",
            f"/tasks/?page={rng.randint(2, 150)}", f"/tasks/?q={rng.choice(WORDS)}", f"/tasks/?tag={rng.choice(tags)}",
            f"/tasks/?category={rng.choice(cats)}&sort=-tests", f"/tasks/?run={rng.choice(run_ids)}&review=approved",
            "/tasks/?repairs_min=2&sort=name"]),
        "detail": lambda: rng.choice([f"/tasks/{rng.choice(task_ids)}/", f"/tasks/{rng.choice(task_ids)}/?tab=repairs",
                                      f"/tasks/{rng.choice(task_ids)}/?tab=validation"]),
        "funnel": lambda: rng.choice(["/tasks/overview/", f"/tasks/overview/?run={rng.choice(run_ids)}"]),
        "taxonomy": lambda: "/skills/taxonomy/",
    }


def measure(base: str, users: list[str], urls: dict, requests_per_client: int, clients: int, *,
            goal_ms: float = GOAL_P95_MS) -> dict:
    samples: dict[str, list[float]] = {k: [] for k in urls}
    errors: list[str] = []
    lock = threading.Lock()

    def worker(n: int):
        client = Client(base)
        client.login(users[n % len(users)])
        for i in range(requests_per_client):
            for kind, make in urls.items():
                url = make()
                t0 = time.perf_counter()
                status = client.get(url)
                ms = (time.perf_counter() - t0) * 1000
                with lock:
                    if status != 200:
                        errors.append(f"{url}: HTTP {status}")
                    samples[kind].append(ms)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    out = {}
    for kind, xs in samples.items():
        xs.sort()
        out[kind] = {"requests": len(xs), "p50_ms": round(statistics.median(xs), 1),
                     "p95_ms": round(xs[max(0, int(len(xs) * 0.95) - 1)], 1), "max_ms": round(xs[-1], 1),
                     "goal_p95_ms": goal_ms, "meets_goal": xs[max(0, int(len(xs) * 0.95) - 1)] < goal_ms}
    return {"pages": out, "errors": errors[:20], "error_count": len(errors), "wall_seconds": round(wall, 1),
            "requests_per_second": round(sum(len(x) for x in samples.values()) / wall, 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default=os.environ.get("FACET_BENCH_DATABASE_URL", DEFAULT_DB))
    parser.add_argument("--reseed", action="store_true")
    parser.add_argument("--seed-only", action="store_true", help="seed the database and stop")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=30, help="requests per client per page kind")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "dashboard.json")
    args = parser.parse_args(argv)

    if args.reseed:
        drop_database(args.database)
    ensure_database(args.database)
    work = Path(tempfile.mkdtemp(prefix="facet-bench-dashboard-"))
    env = {**os.environ, "DATABASE_URL": args.database, "FACET_DATA_DIR": str(work / "data"),
           "DJANGO_SETTINGS_MODULE": "facet_site.settings", "DEBUG": "0", "ALLOWED_HOSTS": "127.0.0.1,localhost",
           "SECRET_KEY": "bench-" + hashlib.sha256(os.urandom(16)).hexdigest()}
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    rng = random.Random(11)
    seed_seconds = None
    if not seeded():
        print("seeding (71,341 skills, 10,000 tasks, 50,000 trials, 100,000 review events)…", flush=True)
        t0 = time.perf_counter()
        stage_seconds = seed(rng)
        seed_seconds = {"total": round(time.perf_counter() - t0, 1), **stage_seconds}
        print(f"seeded in {seed_seconds['total']} s: {stage_seconds}", flush=True)
    if args.seed_only:
        return 0
    call_command("collectstatic", verbosity=0, interactive=False)

    from django.contrib.auth.models import User

    from scenarios.models import SynthesisRun
    from skills.models import Skill
    from tasks.models import AuditEvent, Decision, LabelKind, Task, TaskLabel, TestResult, Trial

    counts = {"skills": Skill.objects.count(), "tasks": Task.objects.count(), "trials": Trial.objects.count(),
              "test_results": TestResult.objects.count(),
              "review_events": Decision.objects.count() + AuditEvent.objects.count()}
    task_ids = list(Task.objects.values_list("id", flat=True))
    run_ids = list(SynthesisRun.objects.values_list("id", flat=True))
    tags = list(TaskLabel.objects.filter(kind=LabelKind.TAG).values_list("value", flat=True).distinct()[:500])
    cats = list(TaskLabel.objects.filter(kind=LabelKind.CATEGORY).values_list("value", flat=True).distinct())
    users = list(User.objects.filter(username__startswith="bench-reviewer-").values_list("username", flat=True))

    with serve(env, args.workers, args.threads) as base:
        urls = page_urls(rng, task_ids, run_ids, tags, cats)
        measure(base, users, urls, 2, 2)  # warm-up: imports, connections, caches
        result_pages = measure(base, users, urls, args.requests, args.clients)

    result = {
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "database": "postgresql", "load_average_before": os.getloadavg()},
        "data": {**counts, "generator": "bench/dashboard.py seed (seed 11)"},
        "server": {"gunicorn_workers": args.workers, "threads": args.threads, "debug": False},
        "clients": args.clients, "requests_per_client_per_page": args.requests,
        "seed_seconds": seed_seconds, **result_pages,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["pages"], indent=2))
    if result_pages["error_count"]:
        print(f"{result_pages['error_count']} requests failed, e.g. {result_pages['errors'][:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
