"""Fixtures for task construction: a finished run with consistent scenarios over two real skills,
the scripted LLM over HTTP, and the Docker engine (skipped without one unless FACET_REQUIRE_DOCKER=1)."""
import os
import socket

import pytest

from facet_site.lib import docker_engine as de
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
from tests.conftest import docker_engine_with_base_image, write_skill
from tests.skills.samples import CSV_SKILL, SQLITE_SKILL

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
