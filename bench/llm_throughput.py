"""LLM throughput benchmark: how many calls facet keeps in flight against a slow endpoint.

A stand-in OpenAI-compatible server (demo/scripted_llm.py) answers every call after `--latency`
seconds (and refuses every `--throttle-every`-th with a 429). A synthesis run over the shared
corpus sample goes through 1 and then 2 worker processes started with the README's plain command
(`facet worker`), on PostgreSQL and Redis. Reported per worker count: peak and mean calls in
flight (seen by the server), calls/s, failed items, duplicate calls (a (stage, subject) paid
twice, or requests beyond the paid calls) and the workers' peak RSS.

Usage (PostgreSQL and Redis must be reachable; the benchmark makes and drops its own database):
    .venv/bin/python bench/llm_throughput.py                   # 2 s latency, 200 skills, 1 and 2 workers
    .venv/bin/python bench/llm_throughput.py --latency 5 --throttle-every 50 --workers 2
Results go to bench/results/llm_throughput.json (pass --out to change). Goal on a 2-core machine at
2 s: >= 64 in flight, >= 15 calls/s, 0 failed items, 0 duplicate calls.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
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
from tests.test_real_services import descendants  # noqa: E402

CORPUS = Path("/work/shared/corpus/openclaw-sample")
FACET = [sys.executable, "-m", "facet_site.cli"]

# Runs inside the benchmark's database (a subprocess with its environment): start a run that stops
# at the repository (no Docker construction), after emptying the request cache so that every
# worker count pays for its calls.
START = r'''
import sys, django
django.setup()
from scenarios import services
from scenarios.models import LLMCacheEntry
LLMCacheEntry.objects.all().delete()
run = services.start_run(name=sys.argv[1], config={"skills": {"max_skills": int(sys.argv[2])},
                         "limits": {"max_pairs": int(sys.argv[3])}, "construction": {"auto": False}})
print(run.pk)
'''
STATUS = r'''
import sys, django
django.setup()
from scenarios.models import SynthesisRun
print(SynthesisRun.objects.get(pk=int(sys.argv[1])).status)
'''
FACTS = r'''
import json, sys, django
django.setup()
from django.db.models import Count
from scenarios.models import CandidatePair, LLMCall, RunSkill, Scenario, SynthesisRun
run = SynthesisRun.objects.get(pk=int(sys.argv[1]))
paid = LLMCall.objects.filter(run=run, status="ok")
print(json.dumps({
    "status": run.status, "message": run.message,
    "items": {m.__name__: dict(m.objects.filter(run=run).values_list("status").annotate(n=Count("id")))
              for m in (RunSkill, CandidatePair, Scenario)},
    "paid_calls": paid.count(),
    "calls_by_status": dict(LLMCall.objects.filter(run=run).values_list("status").annotate(n=Count("id"))),
    "repeated_subjects": paid.values("stage", "subject").annotate(n=Count("id")).filter(n__gt=1).count(),
}))
'''


def run_python(code: str, env: dict, *args: str, attempts: int = 5) -> str:
    """Run `code` against the benchmark's database; a refused connection (the workers' threads may
    hold all of max_connections for a moment) is tried again."""
    for attempt in range(attempts):
        done = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=3600)
        if not done.returncode:
            return done.stdout.strip().splitlines()[-1]
        if "too many clients" not in done.stderr or attempt == attempts - 1:
            raise SystemExit(done.stderr[-3000:])
        time.sleep(5)
    raise AssertionError("unreachable")


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


def measure(env: dict, server: ScriptedLLMServer, *, workers: int, skills: int, pairs: int, logs: Path) -> dict:
    procs = []
    for i in range(workers):
        log = open(logs / f"worker-{workers}-{i}.log", "w")
        # the README's command, nothing added but a node name
        procs.append(subprocess.Popen(FACET + ["worker", "-n", f"bench{i}-{uuid.uuid4().hex[:6]}@%h"], cwd=REPO,
                                      env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    rss_peak, rss_llm, stop = 0.0, 0.0, threading.Event()

    def sample():
        nonlocal rss_peak, rss_llm
        while not stop.is_set():
            pids = {p.pid for p in procs} | set().union(*(descendants(p.pid) for p in procs))
            rss_peak = max(rss_peak, rss_mb(pids))
            rss_llm = max(rss_llm, rss_mb({pid for pid in pids if "--llm-concurrency" in cmdline(pid)}))
            stop.wait(0.25)

    try:
        time.sleep(8)  # the workers connect to Redis and start their pools
        spans_before = len(server.spans)
        requests_before = server.requests
        run_id = run_python(START, env, f"bench {workers} worker(s)", str(skills), str(pairs))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        while run_python(STATUS, env, run_id) in ("queued", "running"):
            if time.monotonic() - started > 3600:
                raise SystemExit("the run did not finish within an hour")
            time.sleep(2)
        elapsed = time.monotonic() - started
        stop.set()
        sampler.join()
    finally:
        for p in procs:
            os.killpg(p.pid, 15)
        for p in procs:
            p.wait(timeout=120)
    facts = json.loads(run_python(FACTS, env, run_id))
    spans = server.spans[spans_before:]
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    requests = server.requests - requests_before
    failed = sum(counts.get("failed", 0) for counts in facts["items"].values())
    return {
        "workers": workers, "run_status": facts["status"], "wall_s": round(elapsed, 1),
        "requests": requests, "paid_calls": facts["paid_calls"], "calls_by_status": facts["calls_by_status"],
        "peak_in_flight": server.httpd.peak_in_flight,
        "mean_in_flight": round(sum(e - s for s, e in spans) / (last - first), 1),
        "calls_per_s": round(len(spans) / (last - first), 2),
        # the same over the time some call was in flight: leaves out retrieval (embedding on the CPU)
        # and the hand-offs between stages
        "busy_s": round(busy_time(spans), 1),
        "calls_per_s_while_busy": round(len(spans) / busy_time(spans), 2),
        "mean_in_flight_while_busy": round(sum(e - s for s, e in spans) / busy_time(spans), 1),
        "failed_items": failed, "items": facts["items"],
        # a (stage, subject) paid twice, or requests beyond the calls stored (each answered request is
        # stored once: ok, or invalid_output before the one re-ask; 429s are refused before an answer)
        "duplicate_calls": facts["repeated_subjects"] + max(
            0, requests - facts["paid_calls"] - facts["calls_by_status"].get("invalid_output", 0)),
        "worker_rss_peak_mb": {"llm_thread_pools": round(rss_llm, 1), "all_worker_processes": round(rss_peak, 1)},
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
    args = parser.parse_args()

    import psycopg
    import redis

    name = f"facet_bench_llm_{os.getpid()}"
    admin = psycopg.connect(f"{args.postgres}/postgres", autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
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
                result = measure(env, server, workers=n, skills=args.skills, pairs=args.pairs, logs=Path(tmp))
                print(json.dumps(result), flush=True)
                results.append(result)
    finally:
        broker.flushdb()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    report = {
        "benchmark": "LLM calls in flight through `facet worker` (bench/llm_throughput.py)",
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "note": "2 cores shared with other work while measured"},
        "data": {"corpus": str(CORPUS), "max_skills": args.skills, "max_pairs": args.pairs},
        "endpoint": {"latency_s": args.latency, "throttle_every": args.throttle_every},
        "services": "PostgreSQL + Redis (broker and endpoint limiter)",
        "worker_command": "facet worker (llm queue: thread pool of FACET_LLM_CONCURRENCY=64; default+docker: prefork)",
        "goal": {"peak_in_flight": 64, "calls_per_s": 15, "failed_items": 0, "duplicate_calls": 0},
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
