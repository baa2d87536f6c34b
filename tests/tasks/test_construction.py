"""End to end on a real Docker Engine with the scripted LLM over HTTP: a scenario becomes a
validated Harbor task, and each kind of failure is repaired at the artifact at fault."""
import pytest
from django.conf import settings

from facet_site.lib import harbor
from scenarios.models import LLMCall
from tasks import construction, funnel, validating, versions
from tasks.models import (
    BuildOutcome,
    EnvironmentBuild,
    RepairOutcome,
    Step,
    Task,
    TaskStatus,
    Trial,
    Validation,
)

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


def construct(make_run, llm_url, *cases, **kwargs):
    run = make_run(*cases, url=llm_url, **kwargs)
    construction.construct_run(run.pk)
    return run, list(Task.objects.filter(run=run).order_by("id"))


def test_a_task_passes_validation_the_first_time(engine, make_run, llm_url):
    run, [task] = construct(make_run, llm_url, "")
    assert task.status == TaskStatus.VALIDATED and task.step == Step.DONE, task.message
    env = task.environment
    assert env.status == "built" and env.repair_count == 0 and env.initial_state
    assert "/app/data/orders.csv" in env.initial_state["snapshot"]["files"]
    assert LLMCall.objects.get(pk=env.llm_calls["materialize"]).stage == "task.materialize"
    assert env.prompt_versions == {"manifest": "v2", "materialize": "v2"}
    [build] = env.builds.all()
    assert build.outcome == BuildOutcome.SUCCEEDED and build.image_tag.startswith("facet-env:")
    [version] = task.versions.all()
    assert task.current_version == version and version.number == 1
    assert set(version.files) >= {"instruction.md", "task.toml", "environment/Dockerfile", "environment/init.sh",
                                  "solution/solve.sh", "tests/test.sh", "tests/test_outputs.py"}
    assert version.content_hash == harbor.content_hash(versions.version_bundle(version))
    [validation] = version.validations.all()
    assert validation.accepted and validation.build_cached  # built once, by the build step
    assert validation.image_tag == build.image_tag
    kinds = list(validation.trials.values_list("kind", "reward", "passed"))
    # the nop and the oracle run twice each (FACET_VALIDATION_TRIAL_RUNS), then the partials: the
    # most complete cut of solve.sh beside the two partial solutions the solution stage wrote
    assert kinds[:4] == [("nop", 0.0, True), ("nop", 0.0, True), ("oracle", 1.0, True), ("oracle", 1.0, True)]
    assert kinds[4:] == [("partial", 0.0, True)] * 3
    assert validation.settings["partials_grain"] == "commands+written"
    oracle = validation.trials.get(kind="oracle", index=0)
    assert oracle.tests.count() == 3 and set(oracle.tests.values_list("outcome", flat=True)) == {"passed"}
    assert "/app/out/report.csv" in oracle.fs_diff["added"] and oracle.seconds > 0
    # every generation step was an LLM call naming its stage, subject and prompt version
    stages = set(LLMCall.objects.filter(run=run).values_list("stage", flat=True))
    assert stages == {"task.manifest", "task.materialize", "task.instruction", "task.solution", "task.verifier"}
    assert version.prompt_versions == {"instruction": "v2", "solution": "v2", "verifier": "v2"}
    assert not task.repairs.exists()


def test_a_verifier_that_passes_the_nop_trial_is_repaired_without_rebuilding(engine, make_run, llm_url):
    run, [task] = construct(make_run, llm_url, "nop-pass")
    assert task.status == TaskStatus.VALIDATED, task.message
    first, second = task.versions.order_by("number")
    failed = first.validations.get()
    assert failed.failure == "nop_unexpected_pass" and failed.trials.get(kind="nop", index=0).reward == 1.0
    [repair] = task.repairs.all()
    assert (repair.artifact, repair.routed_by, repair.failure) == ("verifier", "rule", "nop_unexpected_pass")
    assert repair.from_version == first and repair.to_version == second and repair.outcome == RepairOutcome.FIXED
    assert second.parent == first and second.created_by_repair == repair
    # only tests/ changed, so the image is the same one and nothing was built
    changed = {p for p in set(first.files) | set(second.files) if first.files.get(p) != second.files.get(p)}
    assert changed == {"tests/test_outputs.py", "task.toml"}
    passed = second.validations.get()
    assert passed.accepted and passed.build_cached and passed.image_tag == failed.image_tag
    assert EnvironmentBuild.objects.filter(environment=task.environment).count() == 1


def test_a_build_failure_is_fixed_by_environment_repair(engine, make_run, llm_url):
    run, [task] = construct(make_run, llm_url, "build-fail")
    assert task.status == TaskStatus.VALIDATED, task.message
    first, second = task.environment.builds.order_by("attempt")
    assert first.outcome == BuildOutcome.BUILD_FAILED and "facet_module_that_does_not_exist" in first.log
    assert first.log_path and "ModuleNotFoundError" in open(first.log_path).read()
    assert second.outcome == BuildOutcome.SUCCEEDED and task.environment.repair_count == 1
    assert LLMCall.objects.filter(run=run, stage="task.environment_repair").count() == 1


def test_a_failing_solution_is_fixed_by_solution_repair(engine, make_run, llm_url):
    run, [task] = construct(make_run, llm_url, "solution-fail")
    assert task.status == TaskStatus.VALIDATED, task.message
    [repair] = task.repairs.all()
    assert (repair.artifact, repair.failure, repair.outcome) == ("solution", "solution_failed", "fixed")
    first = repair.from_version.validations.get()
    assert first.trials.get(kind="oracle", index=0).solution_exit_code == 1
    changed = {p for p in repair.to_version.files if repair.to_version.files[p] != repair.from_version.files.get(p)}
    # the repaired solution comes with its partial solutions (the crashing first one had none)
    assert changed == {"solution/solve.sh", "task.toml", "solution/partials/01-counts-cancelled-orders.sh",
                       "solution/partials/02-stops-before-status.sh"}


def test_a_task_still_invalid_after_five_repairs_is_discarded(engine, make_run, llm_url):
    run, [task] = construct(make_run, llm_url, "hopeless")
    assert task.status == TaskStatus.DISCARDED
    assert "after 5 repair rounds" in task.discard_reason and "oracle_failed" in task.discard_reason
    repairs = list(task.repairs.order_by("number"))
    assert [r.number for r in repairs] == [1, 2, 3, 4, 5]
    assert {r.routed_by for r in repairs} == {"llm"} and {r.artifact for r in repairs} == {"verifier"}
    assert all(set(r.llm_calls) == {"router", "verifier"} for r in repairs)
    assert {r.outcome for r in repairs} == {RepairOutcome.STILL_FAILING}
    assert task.versions.count() == 6 and Validation.objects.filter(version__task=task).count() == 6
    assert all(not v.accepted for v in Validation.objects.filter(version__task=task))


def test_a_dockerfile_with_another_base_image_is_rejected_before_building(engine, make_run, llm_url):
    run, [task] = construct(make_run, llm_url, "other-base")
    first, second = task.environment.builds.order_by("attempt")
    assert first.outcome == BuildOutcome.LINT_FAILED and "debian:bookworm" in first.reason
    assert not first.image_tag and first.seconds == 0
    assert second.outcome == BuildOutcome.SUCCEEDED and task.status == TaskStatus.VALIDATED


def test_the_funnel_counts_what_the_records_say(engine, make_run, llm_url):
    run, tasks = construct(make_run, llm_url, "", "build-fail", "nop-pass", "hopeless")
    rows = {r["stage"]: r for r in funnel.funnel(run)}
    counts = {k: r["count"] for k, r in rows.items()}
    assert counts == {
        "seeds": 4, "first_build_logs": 4, "initial_environment_success": 3, "environment_repair_recovery": 1,
        "successful_environments": 4, "entering_validation": 4, "first_pass_valid": 2, "task_repair_recovery": 1,
        "final_validated": 3,
    }
    assert rows["first_pass_valid"]["retention"] == 50.0 and rows["seeds"]["retention"] is None
    assert rows["final_validated"]["retention"] == 75.0
    # the same numbers straight from the records
    assert counts["final_validated"] == Task.objects.filter(run=run, status="validated").count()
    assert sum(r["count"] for r in funnel.funnel() if r["stage"] == "seeds") >= 4


def test_packaging_round_trips_with_the_same_content_hash(engine, make_run, llm_url, tmp_path):
    run, [task] = construct(make_run, llm_url, "")
    version = task.current_version
    path = versions.write_harbor_task(version, tmp_path / "task")
    bundle = harbor.read_task_dir(path)
    assert harbor.content_hash(bundle) == version.content_hash
    meta = bundle.config
    assert meta.scenario_id == str(task.scenario_id) and meta.version_hash.startswith("sha256:")
    assert meta.skills and meta.tags and meta.category


@pytest.mark.parametrize("strategy, stages", [
    ("reverse", ["task.instruction", "task.verifier", "task.solution"]),
    ("joint", ["task.joint"]),
])
def test_reverse_and_joint_orders_make_valid_tasks(engine, make_run, llm_url, strategy, stages):
    run, [task] = construct(make_run, llm_url, "", strategy=strategy)
    assert task.strategy == strategy and task.status == TaskStatus.VALIDATED, task.message
    calls = list(LLMCall.objects.filter(run=run, stage__in=stages + ["task.solution", "task.verifier", "task.instruction",
                                                                     "task.joint"]).order_by("id").values_list("stage", flat=True))
    assert calls == stages


def test_a_task_waiting_for_docker_resumes_when_the_engine_is_back(engine, make_run, llm_url, monkeypatch, capsys):
    from django.core.management import call_command

    engine_host = settings.DOCKER_HOST
    monkeypatch.setattr(settings, "DOCKER_HOST", "unix:///nonexistent/facet-test-docker.sock")
    run = make_run("", url=llm_url)
    construction.construct_run(run.pk)
    assert Task.objects.get(run=run).status == TaskStatus.WAITING_FOR_DOCKER
    monkeypatch.setattr(settings, "DOCKER_HOST", engine_host)
    call_command("construct", str(run.pk), "--resume", "--wait")
    out = capsys.readouterr().out
    assert "Resumed 1 task" in out and "Final validated tasks" in out
    assert Task.objects.get(run=run).status == TaskStatus.VALIDATED


def _imported(tmp_path, solve_sh: str, timeout: float = 5.0):
    cfg = harbor.TaskConfig(agent_timeout_sec=timeout, verifier_timeout_sec=30.0)
    bundle = harbor.TaskBundle(name="imported-loop", instruction="Write /app/out.txt containing ok.", config=cfg, files={
        "environment/Dockerfile": b"FROM facet-base:bookworm\nWORKDIR /app\n",
        "solution/solve.sh": solve_sh.encode(),
        "tests/test.sh": b"#!/bin/bash\nif grep -qx ok /app/out.txt 2>/dev/null; then echo 1; else echo 0; fi "
                         b"> /logs/verifier/reward.txt\n",
    })
    return harbor.write_task_dir(bundle, tmp_path / "imported")


def test_an_imported_task_validates_from_the_cli(engine, tmp_path, capsys):
    from django.core.management import call_command

    path = _imported(tmp_path, "#!/bin/bash\necho ok > /app/out.txt\n")
    call_command("validate", "--import", str(path))
    assert "accepted" in capsys.readouterr().out
    task = Task.objects.get(imported=True)
    assert task.status == TaskStatus.VALIDATED and task.current_version.validations.get().accepted


def test_a_solution_that_never_ends_is_stopped_and_recorded(engine, tmp_path, capsys):
    from django.core.management import call_command

    path = _imported(tmp_path, "#!/bin/bash\nwhile :; do :; done\n", timeout=3.0)
    call_command("validate", "--import", str(path))
    validation = Validation.objects.get()
    assert not validation.accepted and validation.failure == "solution_timeout"
    oracle = validation.trials.get(kind="oracle", index=0)
    assert oracle.failure == "solution_timeout" and oracle.seconds < 30
    task = Task.objects.get(imported=True)
    assert task.status == TaskStatus.DISCARDED and "solution_timeout" in task.discard_reason


def test_a_build_that_hangs_is_stopped_and_repaired(engine, make_run, llm_url):
    from tests.tasks.conftest import CONSTRUCTION

    quick = {**CONSTRUCTION, "timeouts": {**CONSTRUCTION["timeouts"], "build_s": 15}}
    run, [task] = construct(make_run, llm_url, "build-hang", construction=quick)
    first, second = task.environment.builds.order_by("attempt")
    assert first.outcome == BuildOutcome.TIMEOUT and "timed out after 15 s" in first.reason
    assert first.seconds < 40
    assert second.outcome == BuildOutcome.SUCCEEDED and task.status == TaskStatus.VALIDATED, task.message


def test_a_solution_printing_a_flood_is_capped_and_still_graded(engine, tmp_path):
    from django.core.management import call_command

    path = _imported(tmp_path, "#!/bin/bash\nyes facet | head -c 50000000\necho ok > /app/out.txt\n", timeout=30.0)
    call_command("validate", "--import", str(path))
    validation = Validation.objects.get()
    assert validation.accepted, validation.reason
    oracle = validation.trials.get(kind="oracle", index=0)
    assert len(oracle.solution_output) < 40_000 and "facet" in oracle.solution_output


def test_a_verifier_that_never_writes_a_reward_is_recorded_as_such(engine, tmp_path):
    from django.core.management import call_command

    path = _imported(tmp_path, "#!/bin/bash\necho ok > /app/out.txt\n")
    (path / "tests" / "test.sh").write_text("#!/bin/bash\necho 'checked nothing; reward.txt is written elsewhere'\n")
    call_command("validate", "--import", str(path))
    validation = Validation.objects.get()
    assert not validation.accepted and validation.failure in ("verifier_no_reward", "static_check_failed")
    assert validation.trials.get(kind="nop", index=0).failure == "verifier_no_reward"


def test_an_engine_that_breaks_mid_validation_leaves_the_task_waiting_then_it_resumes(engine, make_run, llm_url,
                                                                                     monkeypatch):
    from facet_site.lib import docker_engine as de

    def restarting(*args, **kwargs):
        raise de.TransientEngineError("Docker API call failed: connection reset by peer (daemon restarting)")

    monkeypatch.setattr(validating.val, "validate_task", restarting)
    run = make_run("", url=llm_url)
    construction.construct_run(run.pk)
    task = Task.objects.get(run=run)
    assert task.status == TaskStatus.WAITING_FOR_DOCKER and task.step == Step.VALIDATE
    waiting = task.current_version.validations.get()
    assert waiting.status == "waiting_for_docker" and "daemon restarting" in waiting.reason
    assert not waiting.trials.exists()
    monkeypatch.undo()
    construction.construct_run(run.pk)  # advance_construction resumes it: the engine answers
    task.refresh_from_db()
    assert task.status == TaskStatus.VALIDATED, task.message
    assert task.current_version.validations.get().accepted  # the same validation, run once more


def test_an_environment_that_never_builds_is_discarded_after_three_repairs(engine, make_run, llm_url):
    run, [task] = construct(make_run, llm_url, "env-hopeless")
    assert task.status == TaskStatus.DISCARDED and "did not build after 3 repairs" in task.discard_reason
    builds = list(task.environment.builds.order_by("attempt"))
    assert [b.outcome for b in builds] == [BuildOutcome.BUILD_FAILED] * 4
    assert task.environment.status == "failed" and not task.versions.exists()
    rows = {r["stage"]: r["count"] for r in funnel.funnel(run)}
    assert rows["first_build_logs"] == 1 and rows["successful_environments"] == 0 and rows["entering_validation"] == 0


def test_full_logs_of_trials_and_builds_download_from_the_task_page(engine, make_run, llm_url, client_as):
    run, [task] = construct(make_run, llm_url, "build-fail")
    client = client_as("viewer")
    page = client.get(f"/tasks/{task.pk}/").content.decode()
    oracle = Trial.objects.get(version=task.current_version, kind="oracle", index=0)
    assert f"/tasks/trials/{oracle.pk}/logs/verifier.log" in page
    verifier_log = b"".join(client.get(f"/tasks/trials/{oracle.pk}/logs/verifier.log").streaming_content)
    assert b"3 passed" in verifier_log
    failed_build = task.environment.builds.get(attempt=1)
    build_log = b"".join(client.get(f"/tasks/builds/{failed_build.pk}/log").streaming_content)
    assert b"ModuleNotFoundError" in build_log
    assert client.get(f"/tasks/trials/{oracle.pk}/logs/..%2F..%2Fsecret_key").status_code == 404
