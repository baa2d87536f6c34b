"""Fixtures for task construction: a finished run with consistent scenarios over two real skills,
the scripted LLM over HTTP, and the Docker engine (skipped without one unless FACET_REQUIRE_DOCKER=1).
Also the review tests' run, task and selection (tests/tasks/review_records.py) and the rollout
tests' Harbor job directory, job_dir (tests/tasks/rollout_samples.py), and the dataset tests'
world of three generated tasks (tests/tasks/dataset_records.py)."""
import json
import os
import socket

import pytest

from facet_site.lib import docker_engine as de
from facet_site.lib import harbor
from demo import scripted_llm
from scenarios.models import (
    CandidatePair,
    Consistency,
    PairSkill,
    PairVerdict,
    RunStatus,
    Scenario,
    Stage,
    SynthesisRun,
    WorkStatus,
)
from skills import services as skill_services
from skills.models import Skill
from tasks import versions
from tasks.models import ReviewVerdict, TaskStatus
from tests.conftest import docker_engine_with_base_image, write_skill
from tests.skills.samples import CSV_SKILL, SQLITE_SKILL
from tests.tasks import review_records, rollout_samples
from tests.tasks.dataset_records import _generated
from tests.tasks.rollout_samples import harbor_result, write_trial

# Small caps: the generated task.toml asks for these, and validation never waits longer.
CONSTRUCTION = {"max_partials": 2, "timeouts": {"build_s": 240, "solution_s": 30, "verifier_s": 60, "init_check_s": 20}}


@pytest.fixture
def engine():
    client = docker_engine_with_base_image()
    yield client
    # no sandbox of this process may outlive a test
    host = socket.gethostname()
    rows = client.api.containers(all=True, filters={"label": [f"{de.LABEL_SANDBOX}=1"]})
    left = [r for r in rows if (r.get("Labels") or {}).get(de.LABEL_OWNER, "").startswith(f"{host}:{os.getpid()}:tasks")]
    client.close()
    assert not left, f"sandboxes left behind: {[r['Id'][:12] for r in left]}"


@pytest.fixture
def skills(db, tmp_path):
    root = tmp_path / "corpus"
    write_skill(root, "csv", CSV_SKILL)
    write_skill(root, "sqlite", SQLITE_SKILL)
    skill_services.ingest_path(root, label="corpus")
    return list(Skill.objects.order_by("name"))


@pytest.fixture
def llm_url():
    with scripted_llm.ScriptedLLMServer() as url:
        yield url


@pytest.fixture
def make_run(skills):
    def make(*cases, strategy="forward", url="http://127.0.0.1:9/v1", construction=None):
        run = SynthesisRun.objects.create(
            name="construction", status=RunStatus.SUCCEEDED, stage=Stage.DONE, strategy=strategy,
            config={"strategy": strategy, "llm": {"provider": "openai", "base_url": url, "model": "scripted"},
                    "construction": construction or CONSTRUCTION})
        for i, case in enumerate(cases):
            pair = CandidatePair.objects.create(run=run, skill_set=f"{skills[0].pk},{skills[1].pk}" + (f",-{i}" if i else ""),
                                                scenario_text="Total paid orders per customer",
                                                verdict=PairVerdict.ACCEPTED, status=WorkStatus.DONE)
            PairSkill.objects.bulk_create([PairSkill(pair=pair, skill=s, position=j) for j, s in enumerate(skills)])
            Scenario.objects.create(
                pair=pair, run=run, status=WorkStatus.DONE, title=f"Paid orders per customer ({case or 'plain'})",
                goal="Report paid totals per customer", context="A shop's month-end", capability="csv and python3",
                state="orders.csv and customers.csv in /app/data", io_tools="python3, csv",
                integrated=f"The shop totals paid orders per customer. facet-test-case: {case}" if case else
                "The shop totals paid orders per customer.",
                solution_reference={"setup_actions": [], "workflow": ["join orders to customers", "sum paid"],
                                    "state_transitions": ["data → out/report.csv"]},
                instruction_reference={"goal": "report.csv", "inputs": ["/app/data/orders.csv"],
                                       "outputs": ["/app/out/report.csv"], "constraints": ["paid only"]},
                consistency=Consistency.CONSISTENT)
        return run

    return make


@pytest.fixture
def docker_worker(transactional_db, tmp_path):
    """A real Celery worker serving all three queues, Docker included (tests/conftest.py's serves
    default and llm only)."""
    from django.conf import settings

    from tests.workers import WorkerProcess, worker_env

    worker = WorkerProcess(name=f"test-tasks-{os.getpid()}", queues="default,llm,docker",
                           log_path=tmp_path / "worker.log", env=worker_env(settings.BROKER_DIR.parent))
    yield worker
    worker.stop()


# --- review records (tests/tasks/test_review_*.py) ----------------------------------------------


@pytest.fixture
def run():
    return review_records.make_run()


@pytest.fixture
def task(run):
    return review_records.make_task(run)


@pytest.fixture
def selection(run):
    """Five tasks of one run: three validated (one already approved), one discarded, one with no version."""
    tasks = [review_records.make_task(run, name=f"Validated {i}") for i in range(3)]
    discarded = review_records.make_task(run, name="Discarded one", status=TaskStatus.DISCARDED, accepted=False)
    empty = review_records.make_task(run, name="No version", status=TaskStatus.FAILED, version=False)
    review_records.make_task(review_records.make_run("other run"), name="Elsewhere")  # not selected
    return {"validated": tasks, "discarded": discarded, "empty": empty}


# --- a Harbor job to import (tests/tasks/test_rollout_*.py) -------------------------------------


@pytest.fixture
def job_dir(tmp_path, db):
    """A Harbor job over one of our tasks (exported, so its checksum is known), a task that moved
    on since (matched through its directory), and one that is not ours."""
    ours = rollout_samples.make_task(tmp_path, "sum-qty")
    exported = versions.write_harbor_task(ours.current_version, tmp_path / "exported" / "sum-qty")
    checksum = harbor.dirhash([(p.relative_to(exported).as_posix(), p.read_bytes())
                           for p in sorted(exported.rglob("*")) if p.is_file()])
    local = rollout_samples.make_task(tmp_path, "local-one", instruction="Another task.\n")
    local_dir = versions.write_harbor_task(local.current_version, tmp_path / "exported" / "local-one")
    job = tmp_path / "jobs" / "2026-01-01__10-00-00"
    job.mkdir(parents=True)
    (job / "config.json").write_text(json.dumps({"job_name": "nightly"}))
    (job / "result.json").write_text(json.dumps({"id": "job-1", "finished_at": "2026-01-01T11:00:00Z",
                                                 "n_total_trials": 5}))
    write_trial(job, "sum-qty__aaa1111", harbor_result("sum-qty", checksum=checksum, trial_name="sum-qty__aaa1111"))
    write_trial(job, "sum-qty__bbb2222", harbor_result("sum-qty", checksum=checksum, reward=0.0,
                                                       trial_name="sum-qty__bbb2222"), passed=False, atif=False)
    write_trial(job, "sum-qty__ccc3333", harbor_result("sum-qty", checksum=checksum, reward=None,
                                                       exception="AgentTimeoutError"), passed=False)
    write_trial(job, "renamed__ddd4444", harbor_result("renamed", task_path=str(local_dir), reward=1.0))
    write_trial(job, "fix-git__eee5555", harbor_result("terminal-bench/fix-git", checksum="f" * 64))
    return {"job": job, "ours": ours, "local": local, "checksum": checksum}


# --- generated tasks to export (tests/tasks/test_dataset_*.py) ----------------------------------


@pytest.fixture
def world(make_run, users):
    """Three generated tasks (approved with rollouts, rejected, unreviewed) of one run."""
    run = make_run("", "b", "c")
    scenarios = list(run.scenarios.order_by("id"))
    approved = _generated(scenarios[0], run, name="Paid orders per customer", reviewer=users["reviewer"],
                          rollouts=(("model-a", True), ("model-a", False), ("model-a", True), ("model-b", False)))
    rejected = _generated(scenarios[1], run, name="Rejected one", reviewer=users["admin"], verdict=ReviewVerdict.REJECT)
    unreviewed = _generated(scenarios[2], run, name="Not reviewed yet", verdict=None)
    return {"run": run, "approved": approved, "rejected": rejected, "unreviewed": unreviewed}
