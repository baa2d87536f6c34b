"""`facet demo` end to end, without the web server: the demo corpus, the synthesis run and the task
construction replayed from the bundled cassette, built and validated for real on a Celery worker the
command starts and stops. The funnel, the repairs and the discarded task are what the cassette's
answers (scenarios/scripted_demo_tasks.py) imply."""
import os
import re
import time
from io import StringIO

import pytest
from django.core.management import call_command

from facet_site.lib import docker_engine as de
from scenarios.models import LLMCall, SynthesisRun
from tasks import services
from tasks.models import BuildOutcome, RepairOutcome, Task, TaskStatus, TaskVersion

GIT = frozenset({"changelog-from-git", "git-history-audit"})
CRM = frozenset({"csv-clean-dedupe", "csv-column-stats"})
OPS = frozenset({"task-due-digest", "ops-checklist-audit"})
SEARCH = frozenset({"incident-report-writer", "markdown-rag-chunker", "json-config-validate"})
FIRST_TIME = [frozenset({"incident-report-writer", "markdown-rag-chunker"}),
              frozenset({"incident-report-writer", "markdown-rag-chunker", "markdown-toc"}),
              frozenset({"incident-report-writer", "markdown-toc"}),
              frozenset({"incident-report-writer", "nginx-access-log-report", "markdown-rag-chunker"})]


@pytest.fixture(autouse=True)
def docker_host_restored(monkeypatch):
    """The command sets DOCKER_HOST for --no-docker; each test starts and ends with the environment's."""
    original = os.environ.get("DOCKER_HOST")
    monkeypatch.setenv("DOCKER_HOST", "placeholder")  # records the original value (or its absence)
    if original is None:
        monkeypatch.delenv("DOCKER_HOST")
    else:
        monkeypatch.setenv("DOCKER_HOST", original)


@pytest.fixture
def engine():
    try:
        client = de.connect()
    except de.EngineUnavailable as exc:
        if os.environ.get("FACET_REQUIRE_DOCKER") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    if de.find_image(client, de.BASE_IMAGE_TAG) is None:
        pytest.skip("the base image is missing: run `facet base-image`")
    yield client
    client.close()


def demo(*args) -> tuple[str, float]:
    out = StringIO()
    started = time.monotonic()
    call_command("demo", *args, stdout=out, stderr=out)
    return out.getvalue(), time.monotonic() - started


def by_skills() -> dict:
    tasks = {}
    for task in Task.objects.filter(run__name="demo").select_related("environment", "scenario__pair"):
        names = frozenset(s.name for s in task.scenario.pair.ordered_skills())
        tasks[names] = task
    return tasks


def changed_files(repair) -> set:
    a, b = repair.from_version.files, repair.to_version.files
    return {p for p in set(a) | set(b) if a.get(p) != b.get(p)}


def worker_is_gone(output: str) -> bool:
    pid = int(re.search(r"Started a Celery worker \(pid (\d+)", output).group(1))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_make_demo_constructs_the_whole_funnel_and_a_second_run_reuses_it(engine):
    output, cold = demo()
    assert worker_is_gone(output), output
    run = SynthesisRun.objects.get(name="demo")
    funnel = {row["stage"]: row["count"] for row in services.funnel(run)}
    assert funnel == {"seeds": 8, "first_build_logs": 8, "initial_environment_success": 7,
                      "environment_repair_recovery": 1, "successful_environments": 8, "entering_validation": 8,
                      "first_pass_valid": 5, "task_repair_recovery": 2, "final_validated": 7}, output
    assert "Final validated tasks" in output and "admin     login: admin / facet-admin" in output
    tasks = by_skills()
    assert len(tasks) == 8

    # A build failure fixed by environment repair: git had no identity in the fresh image.
    git = tasks[GIT]
    assert git.status == TaskStatus.VALIDATED and git.environment.repair_count == 1
    first, second = git.environment.builds.order_by("attempt")
    assert first.outcome == BuildOutcome.BUILD_FAILED and "unable to auto-detect email address" in first.log
    assert second.outcome == BuildOutcome.SUCCEEDED
    assert "GIT_COMMITTER_EMAIL" in second.files["init.sh"] and "GIT_COMMITTER_EMAIL" not in first.files["init.sh"]
    assert not git.repairs.exists() and git.versions.count() == 1

    # A solution repaired: the first solve.sh crashed on an empty cell.
    crm = tasks[CRM]
    [repair] = crm.repairs.all()
    assert (repair.artifact, repair.routed_by, repair.failure, repair.outcome) == (
        "solution", "rule", "solution_failed", RepairOutcome.FIXED)
    assert changed_files(repair) == {"solution/solve.sh", "task.toml"}
    oracle = repair.from_version.validations.get().trials.get(kind="oracle")
    assert oracle.solution_exit_code == 1 and "could not convert string to float: ''" in oracle.solution_output
    assert crm.status == TaskStatus.VALIDATED and crm.current_version == repair.to_version

    # A verifier that passed without the solution (nop reward 1), repaired without a rebuild.
    ops = tasks[OPS]
    [repair] = ops.repairs.all()
    assert (repair.artifact, repair.routed_by, repair.failure, repair.outcome) == (
        "verifier", "rule", "nop_unexpected_pass", RepairOutcome.FIXED)
    assert repair.from_version.validations.get().trials.get(kind="nop").reward == 1.0
    assert changed_files(repair) == {"tests/test_outputs.py", "task.toml"}
    assert repair.to_version.validations.get().build_cached and ops.environment.builds.count() == 1

    # One task discarded after the repair budget: the verifier kept the chunker's default windows.
    search = tasks[SEARCH]
    assert search.status == TaskStatus.DISCARDED
    assert "still invalid after 5 repair rounds; last failure oracle_failed" in search.discard_reason
    repairs = list(search.repairs.order_by("number"))
    assert [(r.artifact, r.routed_by, r.failure, r.outcome) for r in repairs] == [
        ("verifier", "llm", "oracle_failed", RepairOutcome.STILL_FAILING)] * 5
    assert search.versions.count() == 6 and all(changed_files(r) == {"tests/test_outputs.py", "task.toml"}
                                                  for r in repairs)

    # The rest were valid at their first validation: nop 0, oracle 1, three partial solutions below 1.
    for names in FIRST_TIME:
        task = tasks[names]
        assert task.status == TaskStatus.VALIDATED and not task.repairs.exists(), (names, task.message)
        validation = task.current_version.validations.get()
        assert validation.accepted
        assert list(validation.trials.values_list("kind", "reward")) == [
            ("nop", 0.0), ("oracle", 1.0), ("partial", 0.0), ("partial", 0.0), ("partial", 0.0)]
    assert set(LLMCall.objects.filter(run=run).values_list("status", flat=True)) == {"replayed"}
    assert LLMCall.objects.filter(run=run).count() == 148

    # `make demo` again: nothing new, and much faster.
    counts = (SynthesisRun.objects.count(), Task.objects.count(), TaskVersion.objects.count(), LLMCall.objects.count())
    output, warm = demo()
    assert "nothing left to do (8 tasks)" in output and "Started a Celery worker" not in output
    assert (SynthesisRun.objects.count(), Task.objects.count(), TaskVersion.objects.count(),
            LLMCall.objects.count()) == counts
    assert warm < cold / 4, (cold, warm)


@pytest.mark.django_db(transaction=True)
def test_without_a_docker_engine_the_demo_runs_the_rest_and_says_how_to_enable_docker():
    output, _ = demo("--no-docker")
    assert worker_is_gone(output), output
    run = SynthesisRun.objects.get(name="demo")
    tasks = list(Task.objects.filter(run=run))
    assert len(tasks) == 8 and {t.status for t in tasks} == {TaskStatus.WAITING_FOR_DOCKER}
    assert all(t.step == "build" and "Docker engine not reachable" in t.message for t in tasks)
    # the LLM steps before the first Docker step did run
    assert all(t.environment.files.get("Dockerfile", "").startswith("FROM facet-base:bookworm") for t in tasks)
    assert "8 task(s) are waiting for a Docker Engine" in output
    assert "bash scripts/start-dockerd" in output and "facet construct --resume" in output
    funnel = {row["stage"]: row["count"] for row in services.funnel(run)}
    assert funnel["seeds"] == 8 and funnel["first_build_logs"] == 0


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_a_demo_that_ran_without_docker_finishes_the_construction_once_an_engine_answers(engine, monkeypatch):
    original = os.environ.get("DOCKER_HOST")
    demo("--no-docker", "--inline")
    assert set(Task.objects.values_list("status", flat=True)) == {TaskStatus.WAITING_FOR_DOCKER}
    # what --no-docker set goes again: the engine answers
    monkeypatch.setenv("DOCKER_HOST", original) if original else monkeypatch.delenv("DOCKER_HOST")
    output, _ = demo("--inline")
    assert "Resumed 8 task(s) that waited for a Docker Engine." in output and "No usable Docker" not in output
    run = SynthesisRun.objects.get(name="demo")
    funnel = {row["stage"]: row["count"] for row in services.funnel(run)}
    assert (funnel["seeds"], funnel["first_pass_valid"], funnel["final_validated"]) == (8, 5, 7), output
    assert Task.objects.count() == 8 and Task.objects.filter(status=TaskStatus.DISCARDED).count() == 1
