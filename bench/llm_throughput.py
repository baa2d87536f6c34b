"""LLM throughput benchmark: how many calls facet keeps in flight against a slow endpoint.

A stand-in OpenAI-compatible server (demo/scripted_llm.py) answers every call after `--latency`
seconds (and refuses every `--throttle-every`-th with a 429). A synthesis run over the shared
corpus sample goes through 1 and then 2 worker processes started with the README's plain command
(`facet worker`), on PostgreSQL and Redis. Reported per worker count: peak and mean calls in
flight (seen by the server), calls/s, failed items, duplicate calls (a (stage, subject) paid
twice, or requests beyond the paid calls), the workers' peak RSS, the peak of PostgreSQL
connections (all, and per llm worker process), where the run's time went (each stage's first and
last call, the gaps between stages) and the machine's load average before and after.

The benchmark itself stays light while it measures: one PostgreSQL connection, held by one thread,
reads the run's status, pg_stat_activity and /proc four times a second; Django is loaded in a
subprocess only to start the run and, once it is over, to count its records.

Usage (PostgreSQL and Redis must be reachable; the benchmark makes and drops its own database):
    .venv/bin/python bench/llm_throughput.py                   # 2 s latency, 200 skills, 1 and 2 workers
    .venv/bin/python bench/llm_throughput.py --latency 5 --throttle-every 50 --workers 2
Results go to bench/results/llm_throughput.json (pass --out to change). Goal on a 2-core machine at
2 s: >= 64 in flight, >= 15 calls/s, 0 failed items, 0 duplicate calls. Other work on the machine
lowers calls/s (each call costs the workers some CPU): compare `load_before`/`load_after` with
the number of CPUs, and read `calls_per_s_while_busy` and `stages` to see where time went.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from demo.scripted_llm import ScriptedLLMServer  # noqa: E402
from tests.workers import descendants  # noqa: E402

CORPUS = Path("/work/shared/corpus/openclaw-sample")
FACET = [sys.executable, "-m", "facet_site.cli"]
POLL_S = 0.25

# Runs inside the benchmark's database (a subprocess with its environment): start a run that stops
# at the repository (no Docker construction), after emptying the request cache so that every
# worker count pays for its calls.
START = r"""
import sys, django
django.setup()
from scenarios import services
from scenarios.models import LLMCacheEntry
LLMCacheEntry.objects.all().delete()
run = services.start_run(name=sys.argv[1], config={"skills": {"max_skills": int(sys.argv[2])},
                         "limits": {"max_pairs": int(sys.argv[3])}, "construction": {"auto": False}})
print(run.pk)
"""
# Once the run is over: its records, its paid calls, and when each stage's calls went out and came
# back (a call's start is its stored time less its latency), in seconds from the run's start.
FACTS = r"""
import json, sys, django
django.setup()
from django.db.models import Count
from scenarios.models import CandidatePair, LLMCall, RunSkill, Scenario, SynthesisRun
run = SynthesisRun.objects.get(pk=int(sys.argv[1]))
paid = LLMCall.objects.filter(run=run, status="ok")
stages = {}
for stage, created, latency_ms in paid.values_list("stage", "created_at", "latency_ms"):
    name = stage.split(".")[0]
    end = (created - run.started_at).total_seconds()
    s = stages.setdefault(name, {"calls": 0, "first_s": end, "last_s": end})
    s["calls"] += 1
    s["first_s"], s["last_s"] = min(s["first_s"], end - latency_ms / 1000), max(s["last_s"], end)
print(json.dumps({
    "status": run.status, "message": run.message,
    "run_s": round((run.finished_at - run.started_at).total_seconds(), 1) if run.finished_at else None,
    "items": {m.__name__: dict(m.objects.filter(run=run).values_list("status").annotate(n=Count("id")))
              for m in (RunSkill, CandidatePair, Scenario)},
    "paid_calls": paid.count(),
    "calls_by_status": dict(LLMCall.objects.filter(run=run).values_list("status").annotate(n=Count("id"))),
    "repeated_subjects": paid.values("stage", "subject").annotate(n=Count("id")).filter(n__gt=1).count(),
    "stages": stages,
}))
"""


def run_python(code: str, env: dict, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return done.stdout.strip().splitlines()[-1]


def rss_mb(pids: set[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def busy_time(spans: list[tuple[float, float]]) -> float:
    """Seconds during which at least one request was in flight (the union of the spans)."""
    total, end = 0.0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Watch:
    """One thread, one database connection: the run's status, the workers' RSS and the database
    connections, every POLL_S seconds, until the run is over."""

    def __init__(self, database_url: str, run_id: int, procs: list[subprocess.Popen]):
        import psycopg

        self.conn = psycopg.connect(database_url, autocommit=True)
        self.database = self.conn.info.dbname
        self.run_id, self.procs = run_id, procs
        self.status = "queued"
        self.rss_peak = self.rss_llm = 0.0
        self.connections_peak = 0
        self.llm_worker_connections_peak = 0
        self.cpu: dict[int, tuple[bool, float]] = {}  # pid -> (an llm worker?, CPU seconds last seen)
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.finished.set()
        self.thread.join()
        self.conn.close()

    def _run(self) -> None:
        while not self.finished.is_set():
            self.status = self.conn.execute("SELECT status FROM scenarios_synthesisrun WHERE id = %s",
                                            (self.run_id,)).fetchone()[0]
            rows = self.conn.execute(
                "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = %s"
                " AND pid <> pg_backend_pid() GROUP BY 1", (self.database,)).fetchall()
            self.connections_peak = max(self.connections_peak, sum(n for _, n in rows))
            self.llm_worker_connections_peak = max(
                [self.llm_worker_connections_peak] + [n for name, n in rows if name.startswith("facet llm worker")])
            pids = {p.pid for p in self.procs} | set().union(*(descendants(p.pid) for p in self.procs))
            self.rss_peak = max(self.rss_peak, rss_mb(pids))
            llm = {pid for pid in pids if "--llm-concurrency" in cmdline(pid)}
            self.rss_llm = max(self.rss_llm, rss_mb(llm))
            for pid in pids:
                used = cpu_s(pid)
                if used is not None:
                    self.cpu[pid] = (pid in llm, used)
            if self.status not in ("queued", "running"):
                self.finished.set()
            self.finished.wait(POLL_S)


def wait_until_ready(database_url: str, nodes: list[str], procs: list[subprocess.Popen]) -> None:
    """Until every worker's two Celery workers (default+docker, and llm: "<node>-llm") have written
    their heartbeat, which they do once they consume their queues; a loaded machine takes longer."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        for _ in range(int(300 / POLL_S)):
            ready = conn.execute("SELECT count(*) FROM facet_site_workerheartbeat WHERE split_part(hostname, '@', 1)"
                                 " = ANY(%s)", ([n for node in nodes for n in (node, f"{node}-llm")],)).fetchone()[0]
            if ready == 2 * len(nodes):
                return
            if any(p.poll() is not None for p in procs):
                raise SystemExit("a worker exited before it was ready (see its log)")
            time.sleep(POLL_S)
    raise SystemExit("the workers were not ready within 5 minutes")


def job_seconds(logs: Path, workers: int, job: str) -> list[float]:
    """How long each run of `job` took, from the workers' logs ("Task <job>[id] succeeded in 5.2s")."""
    found = []
    for log in logs.glob(f"worker-{workers}-*.log"):
        found += [float(m) for m in re.findall(rf"Task {re.escape(job)}\[[^]]+\] succeeded in ([0-9.]+)s", log.read_text())]
    return found


def measure(env: dict, server: ScriptedLLMServer, *, workers: int, skills: int, pairs: int, logs: Path) -> dict:
    procs, nodes = [], []
    load_before = load()
    for i in range(workers):
        log = open(logs / f"worker-{workers}-{i}.log", "w")
        nodes.append(f"bench{i}-{uuid.uuid4().hex[:6]}")
        # the README's command, nothing added but a node name
        procs.append(subprocess.Popen(FACET + ["worker", "-n", f"{nodes[-1]}@%h"], cwd=REPO,
                                      env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    try:
        wait_until_ready(env["DATABASE_URL"], nodes, procs)
        spans_before = len(server.spans)
        requests_before = server.requests
        server.httpd.peak_in_flight = 0
        run_id = int(run_python(START, env, f"bench {workers} worker(s)", str(skills), str(pairs)))
        started = time.monotonic()
        with Watch(env["DATABASE_URL"], run_id, procs) as watch:
            if not watch.finished.wait(3600):
                raise SystemExit("the run did not finish within an hour")
        elapsed = time.monotonic() - started
    finally:
        for p in procs:
            os.killpg(p.pid, 15)
        for p in procs:
            p.wait(timeout=120)
    load_after = load()
    facts = json.loads(run_python(FACTS, env, str(run_id)))
    spans = server.spans[spans_before:]
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    requests = server.requests - requests_before
    failed = sum(counts.get("failed", 0) for counts in facts["items"].values())
    busy = busy_time(spans)
    order = ["hypotheses", "judge", "reconstruct"]
    stages = {name: {k: round(v, 1) if isinstance(v, float) else v for k, v in facts["stages"][name].items()}
              for name in order if name in facts["stages"]}
    for before, after in zip(order, order[1:]):
        if before in stages and after in stages:
            # hypotheses -> judge: retrieval (embedding every hypothesis on the CPU) and two hand-offs
            stages[after]["gap_before_s"] = round(stages[after]["first_s"] - stages[before]["last_s"], 1)
    return {
        "workers": workers, "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": load_before, "load_after": load_after,
        "run_status": facts["status"], "wall_s": round(elapsed, 1), "run_s": facts["run_s"],
        "requests": requests, "paid_calls": facts["paid_calls"], "calls_by_status": facts["calls_by_status"],
        "peak_in_flight": server.httpd.peak_in_flight,
        "mean_in_flight": round(sum(e - s for s, e in spans) / (last - first), 1),
        "calls_per_s": round(len(spans) / (last - first), 2),
        "calls_per_s_wall": round(len(spans) / elapsed, 2),
        "busy_s": round(busy, 1),
        "calls_per_s_while_busy": round(len(spans) / busy, 2),
        "mean_in_flight_while_busy": round(sum(e - s for s, e in spans) / busy, 1),
        "stages": stages,
        "retrieval_job_s": round(max(job_seconds(logs, workers, "scenarios.jobs.retrieve"), default=0.0), 1),
        "failed_items": failed, "items": facts["items"],
        # a (stage, subject) paid twice, or requests beyond the calls stored (each answered request is
        # stored once: ok, or invalid_output before the one re-ask; 429s are refused before an answer)
        "duplicate_calls": facts["repeated_subjects"] + max(
            0, requests - facts["paid_calls"] - facts["calls_by_status"].get("invalid_output", 0)),
        "worker_rss_peak_mb": {"llm_thread_pools": round(watch.rss_llm, 1), "all_worker_processes": round(watch.rss_peak, 1)},
        "worker_cpu_s": {"llm_thread_pools": round(sum(c for is_llm, c in watch.cpu.values() if is_llm), 1),
                         "all_worker_processes": round(sum(c for _, c in watch.cpu.values()), 1)},
        "db_connections_peak": {"all": watch.connections_peak, "one_llm_worker": watch.llm_worker_connections_peak},
    }


FIELDS = {
    "calls_per_s": "answered requests / seconds from the first request to the last answer",
    "calls_per_s_wall": "answered requests / seconds from the run's start to the benchmark seeing it finished",
    "calls_per_s_while_busy": "the same over the seconds some call was in flight (leaves out retrieval and hand-offs)",
    "stages": "per stage: paid calls, first call out and last answer in seconds from the run's start, and the gap "
              "before it (hypotheses -> judge: retrieval, embedding every hypothesis on the CPU)",
    "worker_cpu_s": "CPU seconds the workers used from their start to the run's end (the llm processes, and all): "
                    "per call, what a loaded machine must find for this rate",
    "retrieval_job_s": "the longest retrieve job (the one that embedded the hypotheses and made the pairs), from the worker logs",
    "db_connections_peak": "PostgreSQL connections to the benchmark's database at once: all processes, and the "
                           "most one llm worker process held (its threads share FACET_LLM_DB_CONNECTIONS; a sample may "
                           "count one more for a moment: a closed connection's server process is listed until it exits)",
    "load_before/load_after": "the machine's 1, 5 and 15 minute load averages (os.getloadavg) before the workers "
                              "started and after they stopped; above the CPU count, other work competed for the CPUs",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument("--throttle-every", type=int, default=0)
    parser.add_argument("--skills", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=150)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--postgres", default=os.environ.get("FACET_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432"))
    parser.add_argument("--redis", default=os.environ.get("FACET_TEST_REDIS", "redis://127.0.0.1:6379") + "/11")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "llm_throughput.json")
    parser.add_argument("--note", default="", help="a line on the conditions, kept in the results")
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep the workers' logs in this folder (Celery's received/succeeded lines, with times)")
    args = parser.parse_args()

    import psycopg
    import redis

    name = f"facet_bench_llm_{os.getpid()}"
    admin = psycopg.connect(f"{args.postgres}/postgres", autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    max_connections = admin.execute("SHOW max_connections").fetchone()[0]
    broker = redis.Redis.from_url(args.redis)
    broker.flushdb()
    results = []
    server = ScriptedLLMServer(latency=args.latency, throttle_every=args.throttle_every)
    try:
        with tempfile.TemporaryDirectory() as tmp, server as url:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("FACET_LLM_", "DATABASE_", "CELERY_"))}
            env.update(DATABASE_URL=f"{args.postgres}/{name}", CELERY_BROKER_URL=args.redis,
                       DJANGO_SETTINGS_MODULE="facet_site.settings", FACET_DATA_DIR=str(Path(tmp) / "data"),
                       FACET_MODELS_DIR=str(REPO / "var" / "models"), FACET_LLM_PROVIDER="openai",
                       FACET_LLM_BASE_URL=url, FACET_LLM_MODEL="scripted", FACET_LLM_TIMEOUT="120")
            for step in (["migrate", "--noinput"], ["ingest", str(CORPUS), "--label", "openclaw-sample", "--no-progress"]):
                done = subprocess.run(FACET + step, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
                if done.returncode:
                    raise SystemExit(done.stdout[-2000:] + done.stderr[-3000:])
            for n in [int(w) for w in args.workers.split(",")]:
                logs = args.logs or Path(tmp)
                logs.mkdir(parents=True, exist_ok=True)
                result = measure(env, server, workers=n, skills=args.skills, pairs=args.pairs, logs=logs)
                print(json.dumps(result), flush=True)
                results.append(result)
    finally:
        broker.flushdb()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    report = {
        "benchmark": "LLM calls in flight through `facet worker` (bench/llm_throughput.py)",
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    **({"note": args.note} if args.note else {})},
        "data": {"corpus": str(CORPUS), "max_skills": args.skills, "max_pairs": args.pairs},
        "endpoint": {"latency_s": args.latency, "throttle_every": args.throttle_every},
        "services": f"PostgreSQL (max_connections {max_connections}) + Redis (broker and endpoint limiter)",
        "worker_command": "facet worker (llm queue: thread pool of FACET_LLM_CONCURRENCY=64 sharing "
                          "FACET_LLM_DB_CONNECTIONS=16 database connections; default+docker: prefork)",
        "goal": {"peak_in_flight": 64, "calls_per_s": 15, "failed_items": 0, "duplicate_calls": 0},
        "fields": FIELDS,
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
