"""`facet demo` end to end, without the web server: the demo corpus, the synthesis run, the task
construction and the rollout batch replayed from the bundled cassette, built, validated and rolled
out for real on a Celery worker the command starts and stops. The funnel, the repairs, the discarded
task and the rollouts' pass counts are what the cassette's answers (demo/scripted_tasks/)
imply."""
import os
import re
from io import StringIO

import pytest
from django.core.management import call_command

from django.contrib.auth import get_user_model
from django.test import Client

from scenarios.models import LLMCall, SynthesisRun
from tasks.funnel import funnel as task_funnel
from tasks.models import (
    BuildOutcome,
    EnvironmentBuild,
    RepairOutcome,
    RolloutBatch,
    Task,
    TaskStatus,
    TaskVersion,
    Trajectory,
    Trial,
    TrialKind,
    Turn,
)
from tests.conftest import docker_engine_with_base_image

GIT = frozenset({"changelog-from-git", "git-history-audit"})
CRM = frozenset({"csv-clean-dedupe", "csv-column-stats"})
OPS = frozenset({"task-due-digest", "ops-checklist-audit"})
SEARCH = frozenset({"incident-report-writer", "markdown-rag-chunker", "json-config-validate"})
FIRST_TIME = [frozenset({"incident-report-writer", "markdown-rag-chunker"}),
              frozenset({"incident-report-writer", "markdown-rag-chunker", "markdown-toc"}),
              frozenset({"incident-report-writer", "markdown-toc"}),
              frozenset({"incident-report-writer", "nginx-access-log-report", "markdown-rag-chunker"})]
CHECKOUT, PAYMENTS, LOGIN, STOREFRONT = FIRST_TIME
# Attempts solved of 3 per validated task, as the cassette's rollout turns play them
# (demo/scripted_tasks/, ROLLOUT_PLANS): a wrong input set, a forgotten step, a
# table of contents in the wrong place; the other tasks are solved every time.
SOLVED = {CHECKOUT: 2, PAYMENTS: 2, GIT: 3, LOGIN: 1, CRM: 3, OPS: 3, STOREFRONT: 2}
ROLLOUT_TURNS = 125  # 20 attempts of 6 turns, one of 5 (it stopped early)


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
    client = docker_engine_with_base_image()
    yield client
    client.close()


def demo(*args) -> str:
    out = StringIO()
    call_command("demo", *args, stdout=out, stderr=out)
    return out.getvalue()


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
    output = demo()
    assert worker_is_gone(output), output
    run = SynthesisRun.objects.get(name="demo")
    funnel = {row["stage"]: row["count"] for row in task_funnel(run)}
    assert funnel == {"seeds": 8, "first_build_logs": 8, "initial_environment_success": 7,
                      "environment_repair_recovery": 1, "successful_environments": 8, "entering_validation": 8,
                      "first_pass_valid": 5, "task_repair_recovery": 2, "final_validated": 7}, output
    assert "Final validated tasks" in output and "admin     login: admin / facet-admin" in output
    assert "review queue: 7 validated tasks waiting for a decision" in output
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
    # the repaired solution comes with its own partial solutions (they follow the new solve.sh)
    assert changed_files(repair) == {"solution/solve.sh", "task.toml", "solution/partials/01-stops-before-last-step.sh",
                                     "solution/partials/02-first-half-of-the-workflow.sh"}
    # the oracle runs twice in every validation (FACET_VALIDATION_TRIAL_RUNS); both crashed alike
    oracles = list(repair.from_version.validations.get().trials.filter(kind="oracle"))
    assert len(oracles) == 2 and all(
        o.solution_exit_code == 1 and "could not convert string to float: ''" in o.solution_output for o in oracles)
    assert crm.status == TaskStatus.VALIDATED and crm.current_version == repair.to_version

    # A verifier that passed without the solution (nop reward 1), repaired without a rebuild.
    ops = tasks[OPS]
    [repair] = ops.repairs.all()
    assert (repair.artifact, repair.routed_by, repair.failure, repair.outcome) == (
        "verifier", "rule", "nop_unexpected_pass", RepairOutcome.FIXED)
    nops = list(repair.from_version.validations.get().trials.filter(kind="nop"))
    assert len(nops) == 2 and all(n.reward == 1.0 for n in nops)
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
        # nop and oracle twice each (FACET_VALIDATION_TRIAL_RUNS), run concurrently: order varies
        assert sorted(validation.trials.values_list("kind", "reward")) == [
            ("nop", 0.0), ("nop", 0.0), ("oracle", 1.0), ("oracle", 1.0),
            ("partial", 0.0), ("partial", 0.0), ("partial", 0.0)]
    assert set(LLMCall.objects.filter(run=run).values_list("status", flat=True)) == {"replayed"}
    assert LLMCall.objects.filter(run=run).exclude(stage="rollout.turn").count() == 148

    # The rollout batch: 7 validated tasks × 3 attempts, every turn replayed and every attempt graded.
    assert_demo_rollouts(run, tasks, output)
    assert_analytics_pages_show_the_rollouts(tasks)

    # `make demo` again: nothing new is made or run (no worker, no build, no trial); how much faster
    # that is, is measured in bench/results/demo.json, not asserted here.
    counts = (SynthesisRun.objects.count(), Task.objects.count(), TaskVersion.objects.count(), LLMCall.objects.count(),
              RolloutBatch.objects.count(), Trajectory.objects.count(), Turn.objects.count(), Trial.objects.count(),
              EnvironmentBuild.objects.count())
    output = demo()
    assert "nothing left to do (8 tasks)" in output and "Started a Celery worker" not in output
    assert "21 trajectories, 21 graded, 16 passed (pass rate 76%)" in output, output
    assert (SynthesisRun.objects.count(), Task.objects.count(), TaskVersion.objects.count(), LLMCall.objects.count(),
            RolloutBatch.objects.count(), Trajectory.objects.count(), Turn.objects.count(), Trial.objects.count(),
            EnvironmentBuild.objects.count()) == counts


def assert_demo_rollouts(run, tasks: dict, output: str) -> None:
    [batch] = RolloutBatch.objects.filter(run=run)
    assert (batch.name, batch.status, batch.model, batch.attempts) == ("demo rollouts", "done", "scripted-demo", 3)
    trajectories = list(batch.trajectories.select_related("trial", "task").order_by("task_id", "attempt"))
    assert len(trajectories) == 7 * 3
    for traj in trajectories:
        turns = list(traj.turns.order_by("index"))
        assert traj.status == "done" and traj.n_turns == len(turns) >= 5, (traj.task.name, traj.message)
        assert turns[0].state == "observation" and turns[-1].task_complete and all(t.llm_call_id for t in turns)
        trial = traj.trial
        assert trial.kind == TrialKind.ROLLOUT and trial.version_id == traj.task.current_version_id
        assert trial.reward == (1.0 if traj.passed else 0.0) and trial.tests.exists()
    assert sum(t.n_turns for t in trajectories) == ROLLOUT_TURNS
    assert LLMCall.objects.filter(run=run, stage="rollout.turn", status="replayed").count() == ROLLOUT_TURNS
    assert not tasks[SEARCH].trajectories.exists()  # the discarded task is not rolled out
    for names, solved in SOLVED.items():
        task = tasks[names]
        task.refresh_from_db()
        assert sum(t.passed for t in trajectories if t.task_id == task.pk) == solved, names
        assert (task.n_rollouts, task.pass_rate) == (3, pytest.approx(solved / 3)), names
        assert f"#{task.pk:<4} {solved}/3 passed" in output, output
    # the attempts that failed failed in the verifier, on the step they got wrong
    login_2 = next(t for t in trajectories if t.task_id == tasks[LOGIN].pk and t.attempt == 1)
    assert login_2.failure == "tests_failed"
    assert login_2.trial.tests.get(name__endswith="test_the_report_has_the_title_and_is_a_draft").outcome == "failed"
    assert any("sed -i '1i <!-- toc -->" in c["command"] for turn in login_2.turns.all() for c in turn.commands)
    assert "16 passed (pass rate 76%)" in output


def rows_of(html: str) -> dict[str, tuple[int, int, int]]:
    """The rates table: label -> (tasks, rollouts, passed)."""
    cells = re.findall(r'<tr><td><a href="[^"]*">([^<]+)</a></td><td class="num">(\d+)</td><td class="num">(\d+)</td>'
                       r'<td class="num">(\d+)</td>', html)
    return {label: (int(a), int(b), int(c)) for label, a, b, c in cells}


def assert_analytics_pages_show_the_rollouts(tasks: dict) -> None:
    client = Client()
    client.force_login(get_user_model().objects.get(username="viewer"))  # the demo's viewer login
    page = client.get("/tasks/analytics/").content.decode()
    assert re.search(r"<b>21</b><span>finished rollouts</span>", page)
    assert re.search(r"<b>7</b><span>tasks rolled out</span>", page)
    assert re.search(r"<b>76%</b><span>strict pass rate</span>", page)
    tags = rows_of(client.get("/tasks/analytics/tags/").content.decode())
    assert tags["incident-report-writer"] == (4, 12, 7) and tags["markdown-toc"] == (2, 6, 3)
    assert tags["git-history-audit"] == (1, 3, 3) and tags["nginx-access-log-report"] == (1, 3, 2)
    assert "json-config-validate" not in tags  # only the discarded task has it
    commands = client.get("/tasks/analytics/commands/").content.decode()
    assert "over the 16 successful trajectories" in commands
    shown = dict(re.findall(r'<tr><td><code>([^<]+)</code></td><td class="num">(\d+)</td>', commands))
    assert {"python3", "head", "ls", "cat", "git", "mkdir"} <= set(shown) and int(shown["python3"]) > 0
    assert re.search(r"observation-only first turns \(16 of 16\)", commands)
    # a task's Rollouts tab shows its transcripts; the batch page its trajectories
    login = tasks[LOGIN]
    tab = client.get(f"/tasks/{login.pk}/?tab=rollouts").content.decode()
    assert "python3 /tmp/agent/write_incident.py" in tab and "test_the_report_has_the_title_and_is_a_draft" in tab
    batch = RolloutBatch.objects.get()
    assert client.get(f"/tasks/rollouts/{batch.pk}/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_without_a_docker_engine_the_demo_runs_the_rest_and_says_how_to_enable_docker():
    output = demo("--no-docker")
    assert worker_is_gone(output), output
    run = SynthesisRun.objects.get(name="demo")
    tasks = list(Task.objects.filter(run=run))
    assert len(tasks) == 8 and {t.status for t in tasks} == {TaskStatus.WAITING_FOR_DOCKER}
    assert all(t.step == "build" and "Docker engine not reachable" in t.message for t in tasks)
    # the LLM steps before the first Docker step did run
    assert all(t.environment.files.get("Dockerfile", "").startswith("FROM facet-base:bookworm") for t in tasks)
    assert "8 task(s) are waiting for a Docker Engine" in output
    assert "bash scripts/start-dockerd" in output and "facet construct --resume" in output
    funnel = {row["stage"]: row["count"] for row in task_funnel(run)}
    assert funnel["seeds"] == 8 and funnel["first_build_logs"] == 0
    assert "Rollouts: none started, they need a Docker Engine" in output and not RolloutBatch.objects.exists()


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_a_demo_that_ran_without_docker_finishes_the_construction_once_an_engine_answers(engine, monkeypatch):
    original = os.environ.get("DOCKER_HOST")
    demo("--no-docker", "--inline")
    assert set(Task.objects.values_list("status", flat=True)) == {TaskStatus.WAITING_FOR_DOCKER}
    # what --no-docker set goes again: the engine answers
    monkeypatch.setenv("DOCKER_HOST", original) if original else monkeypatch.delenv("DOCKER_HOST")
    output = demo("--inline")
    assert "Resumed 8 task(s) that waited for a Docker Engine." in output and "No usable Docker" not in output
    run = SynthesisRun.objects.get(name="demo")
    funnel = {row["stage"]: row["count"] for row in task_funnel(run)}
    assert (funnel["seeds"], funnel["first_pass_valid"], funnel["final_validated"]) == (8, 5, 7), output
    assert Task.objects.count() == 8 and Task.objects.filter(status=TaskStatus.DISCARDED).count() == 1
    # and the rollouts, in this process (--inline): the same pass counts
    batch = RolloutBatch.objects.get()
    assert (batch.status, batch.trajectories.count(), batch.trajectories.filter(passed=True).count()) == (
        "done", 21, 16)
    assert Turn.objects.count() == ROLLOUT_TURNS and "Started a Celery worker" not in output
