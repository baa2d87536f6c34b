"""The API, the task pages and the CLI over records made through the ORM (no Docker needed), and
what happens when no engine is reachable."""

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from facet_site.lib import harbor
from scenarios import run_config
from tasks import construction, environments, repair, versions
from tasks.models import (
    Environment,
    EnvironmentBuild,
    RepairRound,
    RolloutBatch,
    Step,
    Task,
    TaskStatus,
    TestResult,
    Trajectory,
    Trial,
    Validation,
    ValidationStatus,
)

pytestmark = pytest.mark.django_db

XSS = "<script>alert('pwned')</script>"
CLOSED_SOCKET = "unix:///nonexistent/facet-test-docker.sock"


@pytest.fixture
def task(make_run):
    run = make_run("")
    construction.create_tasks(run)
    task = Task.objects.get(run=run)
    env_files = {"Dockerfile": "FROM facet-base:bookworm\nWORKDIR /app\nCOPY data/ /app/data/\n", "data/x.txt": "x\n"}
    Environment.objects.filter(pk=task.environment_id).update(files=env_files, status="built")
    files = versions.make_files(task, environment=env_files, instruction=f"Do it {XSS}", solve_sh="#!/bin/bash\necho ok\n",
                                test_sh="#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n", test_py="def test_x():\n    pass\n",
                                run_cfg=run_config.construction_config(run))
    v1 = versions.create_version(task, files)
    files2 = dict(files, **{"tests/test_outputs.py": "def test_y():\n    assert False\n"})
    v2 = versions.create_version(task, files2, parent=v1)
    failed = Validation.objects.create(version=v1, status=ValidationStatus.DONE, accepted=False,
                                       failure="nop_unexpected_pass", reason=f"nop: reward 1 {XSS}")
    trial = Trial.objects.create(validation=failed, version=v1, kind="nop", reward=1.0, passed=False,
                                 failure="nop_unexpected_pass", reason=XSS, seconds=0.5)
    TestResult.objects.create(trial=trial, name=f"test_x {XSS}", outcome="passed")
    repair = RepairRound.objects.create(task=task, number=1, artifact="verifier", failure="nop_unexpected_pass",
                                        failure_reason=XSS, triggered_by=failed, from_version=v1, to_version=v2)
    EnvironmentBuild.objects.create(environment=task.environment, attempt=1, outcome="succeeded", files=env_files)
    Task.objects.filter(pk=task.pk).update(current_version=v2, status=TaskStatus.VALIDATED, step=Step.DONE,
                                           name=f"Orders {XSS}")
    task.refresh_from_db()
    task.repair = repair
    return task


def test_the_api_lists_and_shows_tasks_with_versions_trials_and_repairs(task, client, token_for):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token_for('viewer')}"}
    listing = client.get("/api/tasks?status=validated", **auth).json()
    assert [t["id"] for t in listing["items"]] == [task.pk]
    assert client.get("/api/tasks?status=nonsense", **auth).status_code == 422
    detail = client.get(f"/api/tasks/{task.pk}", **auth).json()
    assert [v["number"] for v in detail["versions"]] == [1, 2]
    [repair] = detail["repairs"]
    assert repair["artifact"] == "verifier" and repair["failure"] == "nop_unexpected_pass"
    trial = detail["versions"][0]["validations"][0]["trials"][0]
    assert trial["kind"] == "nop" and trial["reward"] == 1.0 and trial["tests"][0]["outcome"] == "passed"
    funnel = client.get(f"/api/funnel?run={task.run_id}", **auth).json()
    assert funnel[0] == {"stage": "seeds", "label": "Scenario–skill seeds", "count": 1, "retention": None}


def test_only_reviewers_may_queue_a_validation_through_the_api(task, client, token_for, django_capture_on_commit_callbacks):
    viewer = client.post(f"/api/tasks/{task.pk}/validate", HTTP_AUTHORIZATION=f"Bearer {token_for('viewer')}")
    assert viewer.status_code == 403
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        ok = client.post(f"/api/tasks/{task.pk}/validate", HTTP_AUTHORIZATION=f"Bearer {token_for('reviewer')}")
    assert ok.status_code == 202 and ok.json()["status"] == "queued" and len(callbacks) == 1
    assert Validation.objects.get(pk=ok.json()["id"]).version == task.current_version
    assert client.get("/api/tasks").status_code == 401


def test_the_task_pages_show_the_chain_and_escape_model_text(task, client_as):
    client = client_as("viewer")
    page = client.get("/tasks/?status=validated")
    assert page.status_code == 200 and f"/tasks/{task.pk}/" in page.content.decode()
    assert "Final validated tasks" in client.get(f"/tasks/funnel/?run={task.run_id}").content.decode()
    detail = client.get(f"/tasks/{task.pk}/").content.decode()
    assert "nop_unexpected_pass" in detail and "v1 → v2" in detail
    assert XSS not in detail and "&lt;script&gt;" in detail
    assert "Validate v2" not in detail  # viewers get no button
    partial = client.get(f"/tasks/{task.pk}/", HTTP_HX_REQUEST="true")
    assert partial.status_code == 286 and 'id="status"' in partial.content.decode()


def test_the_validate_button_is_for_reviewers(task, client_as, django_capture_on_commit_callbacks):
    assert client_as("viewer").post(f"/tasks/{task.pk}/validate/").status_code == 403
    client = client_as("reviewer")
    assert "Validate v2" in client.get(f"/tasks/{task.pk}/").content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(f"/tasks/{task.pk}/validate/")
    assert response.status_code == 302
    assert Validation.objects.filter(version=task.current_version, status="queued").count() == 1
    assert len(callbacks) == 1  # the Docker job, queued by the service once the request commits


def test_resuming_a_batch_queues_its_pending_trajectories_again(task, client_as, monkeypatch,
                                                               django_capture_on_commit_callbacks):
    from tasks import jobs

    batch = RolloutBatch.objects.create(name="b", model="m", attempts=1, status="running")
    pending = Trajectory.objects.create(batch=batch, task=task, version=task.current_version, attempt=1, model="m")
    Trajectory.objects.create(batch=batch, task=task, version=task.current_version, attempt=2, model="m",
                              status="done", passed=True)
    queued: list[int] = []
    monkeypatch.setattr(jobs.docker_rollout, "delay", queued.append)
    with django_capture_on_commit_callbacks(execute=True):
        response = client_as("reviewer").post(f"/tasks/rollouts/{batch.pk}/resume/", follow=True)
    assert response.redirect_chain[-1][0] == f"/tasks/rollouts/{batch.pk}/"
    assert queued == [pending.pk]
    assert "1 trajectories of batch" in response.content.decode()


def test_pages_need_a_login(task, client):
    assert client.get("/tasks/").status_code == 302


def test_without_an_engine_a_task_waits_for_docker_and_nothing_else_breaks(make_run, llm_url, monkeypatch):
    monkeypatch.setattr(settings, "DOCKER_HOST", CLOSED_SOCKET)  # read once in settings.py
    run = make_run("", url=llm_url)
    construction.construct_run(run.pk)
    task = Task.objects.get(run=run)
    assert task.status == TaskStatus.WAITING_FOR_DOCKER and task.step == Step.BUILD and task.claimed_at is None
    assert task.message.startswith(f"Docker engine not reachable at {CLOSED_SOCKET}; see README")
    assert task.environment.files["Dockerfile"].startswith("FROM facet-base:bookworm")  # the LLM steps ran
    # resuming with no engine leaves it waiting
    assert construction.resume_waiting() == 0
    assert Task.objects.get(pk=task.pk).status == TaskStatus.WAITING_FOR_DOCKER


def test_validate_without_an_engine_leaves_the_validation_waiting(task, monkeypatch, capsys):
    monkeypatch.setattr(settings, "DOCKER_HOST", CLOSED_SOCKET)  # read once in settings.py
    with pytest.raises(CommandError, match="Docker engine not reachable"):
        call_command("validate", str(task.current_version_id))
    waiting = Validation.objects.get(version=task.current_version)
    assert waiting.status == ValidationStatus.WAITING_FOR_DOCKER and "see README" in waiting.reason
    call_command("validate", "--pending")
    assert "waiting for Docker" in capsys.readouterr().out


def test_validate_names_a_missing_version(db):
    with pytest.raises(CommandError, match="no task version with id 999"):
        call_command("validate", "999")


def test_packaging_writes_the_version_with_its_metadata(task, tmp_path):
    path = versions.write_harbor_task(task.current_version, tmp_path / "t")
    bundle = harbor.read_task_dir(path)
    assert harbor.content_hash(bundle) == task.current_version.content_hash
    assert bundle.config.scenario_id == str(task.scenario_id) and bundle.config.skills


def test_the_router_blames_the_artifact_the_failure_type_points_at(task):
    v = Validation(failure="solution_timeout")
    assert repair.preclassify(v) == "solution"
    assert repair.preclassify(Validation(failure="build_failed")) == "environment"
    assert repair.preclassify(Validation(failure="partial_unexpected_pass")) == "verifier"
    assert repair.preclassify(Validation(failure="oracle_failed")) is None
    static = Validation(failure="static_check_failed",
                        static_findings=[{"check": "solution_writes_reward", "severity": "error", "message": ""}])
    assert repair.preclassify(static) == "solution"


def test_an_environment_with_secrets_or_tests_is_refused_by_the_lint():
    problems = environments.lint_environment({
        "Dockerfile": "FROM ubuntu:24.04\nCOPY tests/ /tests/\n", "tests/test_outputs.py": "x",
        "data/key.pem": "-----BEGIN RSA PRIVATE KEY-----\nabc\n"})
    text = "\n".join(problems)
    assert "ubuntu:24.04" in text and "tests/test_outputs.py" in text and "private key" in text


def test_the_admin_lists_the_records_read_only(task, client_as):
    client = client_as("admin")
    for model in ("task", "taskversion", "validation", "trial", "repairround", "environmentbuild", "environment"):
        assert client.get(f"/admin/tasks/{model}/").status_code == 200, model
    version = task.current_version
    page = client.get(f"/admin/tasks/taskversion/{version.pk}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
