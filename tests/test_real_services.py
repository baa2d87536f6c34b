"""The demo pipeline on real services, non-interactively (no web server): PostgreSQL, Redis as the
Celery broker, TWO worker processes (one on the default and llm queues, one on the docker queue)
and a real Docker Engine. `facet demo --external-workers` starts no worker of its own: the synthesis
run, the task construction and the rollout batch go through Redis to the two workers, and the
assertions are the funnel, the repaired versions, the discarded task and the rollout counts the
bundled cassette implies (as tests/test_demo.py on SQLite and the filesystem broker).

Proof that the work really ran on the two workers: the llm worker gets a DOCKER_HOST that does not
exist (a Docker step reaching it could not succeed), each worker's log names the jobs it ran, and
those are only its queue's jobs.

Each run gets a fresh PostgreSQL database (created and dropped here), Redis database
REDIS_DB (flushed before and after), a data directory of its own; the workers are stopped and the
sandboxes their processes owned removed whatever happens. Skipped when PostgreSQL or Redis is not
reachable, unless FACET_REQUIRE_SERVICES=1 (CI), which makes that a failure.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from facet_site.lib import docker_engine as de
from tests.conftest import docker_engine_with_base_image
from tests.workers import REPO, WorkerProcess, descendants

pytestmark = pytest.mark.docker

POSTGRES = os.environ.get("FACET_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432")
REDIS = os.environ.get("FACET_TEST_REDIS", "redis://127.0.0.1:6379")
REDIS_DB = 13  # no other test or tool of this project uses it
NO_DOCKER = "unix:///run/facet-llm-worker--no-docker.sock"
FIRST_TIME = {"checkout-incident", "payments-docs", "login-incident", "storefront-incident"}
SOLVED = {"checkout-incident": 2, "payments-docs": 2, "git-release": 3, "login-incident": 1, "crm-export": 3,
          "ops-review": 3, "storefront-incident": 2}


def unavailable(what: str, reason: str):
    if os.environ.get("FACET_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{what} is not reachable ({reason}) and FACET_REQUIRE_SERVICES=1")
    pytest.skip(f"{what} is not reachable ({reason}); FACET_REQUIRE_SERVICES=1 makes this a failure")


@pytest.fixture
def postgres_url():
    import psycopg

    name = f"facet_demo_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        admin = psycopg.connect(f"{POSTGRES}/postgres", autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL at {POSTGRES}", str(exc).strip())
    try:
        admin.execute(f'CREATE DATABASE "{name}"')
        yield f"{POSTGRES}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def redis_url():
    import redis

    url = f"{REDIS}/{REDIS_DB}"
    client = redis.Redis.from_url(url, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        unavailable(f"Redis at {REDIS}", str(exc))
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


@pytest.fixture
def engine():
    client = docker_engine_with_base_image()
    yield client
    client.close()


class Workers:
    def __init__(self, env: dict, logs: Path):
        self.env, self.logs = env, logs
        self.procs: dict[str, WorkerProcess] = {}
        self.pids: set[int] = set()
        self.tag = uuid.uuid4().hex[:8]

    def start(self, name: str, queues: str, **env) -> None:
        self.procs[name] = WorkerProcess(name=f"{name}-{self.tag}", queues=queues, log_path=self.logs / f"{name}.log",
                                         env={**self.env, **env}, concurrency=2, beat=False)

    def log(self, name: str) -> str:
        return self.procs[name].log()

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        for name, proc in self.procs.items():
            while " ready." not in self.log(name):
                assert proc.poll() is None, f"the {name} worker exited:\n{self.log(name)[-3000:]}"
                assert time.monotonic() < deadline, f"the {name} worker is not ready:\n{self.log(name)[-3000:]}"
                time.sleep(0.5)

    def stop(self) -> None:
        for proc in self.procs.values():
            # remembered before they exit: the sandboxes they owned are labelled with their pids
            self.pids |= {proc.pid} | descendants(proc.pid)
            proc.terminate()
        for proc in self.procs.values():
            proc.wait(timeout=90)

    def remove_sandboxes(self) -> int:
        """Sandboxes owned by the workers' processes (owner labels start with host:pid); normally none."""
        from django.conf import settings

        client = de.connect(settings.DOCKER_HOST)
        try:
            host = socket.gethostname()
            return sum(de.cleanup_leftovers(client, owner_prefix=f"{host}:{pid}:") for pid in self.pids)
        finally:
            client.close()


# Read back what the pipeline stored, with the ORM, from the PostgreSQL database (a subprocess: this
# test process's Django is bound to the test database).
FACTS = r'''
import json, django
django.setup()
from django.db import connection
from django.db.models import Count
from scenarios.models import LLMCall, SynthesisRun
from demo.scripted_tasks import BY_SKILLS
from tasks.funnel import funnel
from tasks.models import RolloutBatch, Task

run = SynthesisRun.objects.get(name="demo")
key = lambda task: BY_SKILLS[frozenset(s.name for s in task.scenario.pair.ordered_skills())].key
tasks = {}
for task in Task.objects.filter(run=run).select_related("environment", "scenario__pair"):
    first = task.versions.order_by("number").first()
    tasks[key(task)] = {
        "status": task.status, "discard_reason": task.discard_reason, "versions": task.versions.count(),
        "environment_repairs": task.environment.repair_count,
        "builds": list(task.environment.builds.order_by("attempt").values_list("outcome", flat=True)),
        "repairs": [[r.artifact, r.routed_by, r.failure, r.outcome,
                     sorted(p for p in set(r.from_version.files) | set(r.to_version.files)
                            if r.from_version.files.get(p) != r.to_version.files.get(p))]
                    for r in task.repairs.order_by("number").select_related("from_version", "to_version")],
        "first_trials": list(first.validations.order_by("id").first().trials.order_by("id")
                             .values_list("kind", "reward")) if first and first.validations.exists() else [],
        "passed": task.trajectories.filter(passed=True).count(), "rollouts": task.trajectories.count(),
        "graded": task.trajectories.filter(status="done", trial__isnull=False).count(),
    }
batch = RolloutBatch.objects.get(run=run)
print(json.dumps({
    "vendor": connection.vendor, "run_status": run.status,
    "funnel": {row["stage"]: row["count"] for row in funnel(run)},
    "tasks": tasks,
    "batch": {"status": batch.status, "model": batch.model, "attempts": batch.attempts,
              "trajectories": batch.trajectories.count(), "passed": batch.trajectories.filter(passed=True).count(),
              "turns": sum(batch.trajectories.values_list("n_turns", flat=True))},
    "calls": {f"{s}/{st}": n for s, st, n in LLMCall.objects.values_list("stage", "status").annotate(n=Count("id"))
              .values_list("stage", "status", "n")},
}))
'''


def job_names(log: str) -> dict[str, int]:
    """Jobs a worker ran to the end, by name: Celery logs "Task <name>[<id>] succeeded in ..."."""
    names: dict[str, int] = {}
    for name in re.findall(r"Task ([\w.]+)\[[0-9a-f-]+\] succeeded in", log):
        names[name] = names.get(name, 0) + 1
    return names


def test_the_demo_pipeline_runs_on_postgresql_redis_and_two_workers(postgres_url, redis_url, engine, tmp_path,
                                                                    settings):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FACET_LLM_")}
    env.update(DATABASE_URL=postgres_url, CELERY_BROKER_URL=redis_url, DJANGO_SETTINGS_MODULE="facet_site.settings",
               FACET_DATA_DIR=str(tmp_path / "data"), FACET_MODELS_DIR=str(settings.FACET_MODELS_DIR))
    facet = [sys.executable, "-m", "facet_site.cli"]
    migrate = subprocess.run(facet + ["migrate", "--noinput"], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=600)
    assert migrate.returncode == 0, migrate.stderr[-3000:]

    workers = Workers(env, tmp_path)
    try:
        # LLM-bound work on a "machine" without Docker; Docker-bound work on one with the engine.
        workers.start("llm", "default,llm", DOCKER_HOST=NO_DOCKER)
        workers.start("docker", "docker")
        workers.wait_ready()
        demo = subprocess.run(facet + ["demo", "--external-workers", "--timeout", "1800"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=4000)
        output = demo.stdout + demo.stderr
        assert demo.returncode == 0, output[-5000:] + "\n--- llm worker\n" + workers.log("llm")[-3000:] + \
            "\n--- docker worker\n" + workers.log("docker")[-3000:]
    finally:
        workers.stop()
        leftovers = workers.remove_sandboxes()
    assert leftovers == 0
    assert "Started a Celery worker" not in output and "queued for the workers" in output

    facts_run = subprocess.run([sys.executable, "-c", FACTS], cwd=REPO, env=env, capture_output=True, text=True,
                               timeout=300)
    assert facts_run.returncode == 0, facts_run.stderr[-3000:]
    facts = json.loads(facts_run.stdout.strip().splitlines()[-1])
    assert facts["vendor"] == "postgresql" and facts["run_status"] == "succeeded"

    # The funnel (Table 5) the cassette implies.
    assert facts["funnel"] == {"seeds": 8, "first_build_logs": 8, "initial_environment_success": 7,
                               "environment_repair_recovery": 1, "successful_environments": 8,
                               "entering_validation": 8, "first_pass_valid": 5, "task_repair_recovery": 2,
                               "final_validated": 7}, output[-4000:]
    tasks = facts["tasks"]
    # Environment repair: the git task's first build failed, the repaired init.sh built.
    git = tasks["git-release"]
    assert (git["status"], git["environment_repairs"], git["builds"], git["repairs"], git["versions"]) == (
        "validated", 1, ["build_failed", "succeeded"], [], 1)
    # Solution repair: a new version with a new solve.sh.
    # the repaired solution comes with its partial solutions rewritten too
    assert tasks["crm-export"]["repairs"] == [["solution", "rule", "solution_failed", "fixed", [
        "solution/partials/01-stops-before-last-step.sh", "solution/partials/02-first-half-of-the-workflow.sh",
        "solution/solve.sh", "task.toml"]]]
    # Verifier repair: the first verifier passed the untouched environment (nop reward 1).
    ops = tasks["ops-review"]
    assert ops["repairs"] == [["verifier", "rule", "nop_unexpected_pass", "fixed",
                               ["task.toml", "tests/test_outputs.py"]]]
    assert ["nop", 1.0] in ops["first_trials"]
    # Discarded after five verifier repairs.
    search = tasks["search-kb"]
    assert search["status"] == "discarded" and search["versions"] == 6
    assert "still invalid after 5 repair rounds" in search["discard_reason"]
    assert [r[:4] for r in search["repairs"]] == [["verifier", "llm", "oracle_failed", "still_failing"]] * 5
    for key in FIRST_TIME:
        assert tasks[key]["status"] == "validated" and tasks[key]["repairs"] == [], key
        # nop and oracle twice each (FACET_VALIDATION_TRIAL_RUNS), run concurrently: order varies
        assert sorted(tasks[key]["first_trials"]) == [["nop", 0.0], ["nop", 0.0], ["oracle", 1.0], ["oracle", 1.0],
                                                      ["partial", 0.0], ["partial", 0.0], ["partial", 0.0]], key

    # The rollout batch: 7 validated tasks × 3, each graded, the pass counts of the cassette.
    assert facts["batch"] == {"status": "done", "model": "scripted-demo", "attempts": 3, "trajectories": 21,
                              "passed": 16, "turns": 125}
    for key, solved in SOLVED.items():
        assert (tasks[key]["rollouts"], tasks[key]["graded"], tasks[key]["passed"]) == (3, 3, solved), key
    assert tasks["search-kb"]["rollouts"] == 0
    calls = facts["calls"]
    assert calls["rollout.turn/replayed"] == 125 and set(k.split("/")[1] for k in calls) == {"replayed"}
    assert sum(n for k, n in calls.items() if not k.startswith("rollout.")) == 148

    # Each worker ran its own queues' jobs and nothing else.
    llm_jobs, docker_jobs = job_names(workers.log("llm")), job_names(workers.log("docker"))
    assert {"scenarios.jobs.llm_hypotheses", "scenarios.jobs.llm_judge", "scenarios.jobs.llm_reconstruct",
            "tasks.jobs.llm_step", "tasks.jobs.advance_construction"} <= set(llm_jobs), llm_jobs
    assert not any(".docker_" in name for name in llm_jobs), llm_jobs
    assert {"tasks.jobs.docker_step", "tasks.jobs.docker_rollout"} <= set(docker_jobs), docker_jobs
    assert not any(".llm_" in name for name in docker_jobs), docker_jobs
    assert docker_jobs["tasks.jobs.docker_rollout"] >= 21
    assert f"llm-{workers.tag}@" in workers.log("llm") and f"docker-{workers.tag}@" in workers.log("docker")
