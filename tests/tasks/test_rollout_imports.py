"""Harbor job import into rollout batches: a good job (trials matched by name, checksum or
directory), a malformed one, a partial one, a directory of jobs, the import command and the
upload page."""
import io
import json

import pytest
from django.core.management import CommandError, call_command

from facet_site.lib import harbor
from tasks import rollout_imports, versions
from tasks.models import RolloutBatch, Task, TestResult, Trajectory, Trial, Turn
from tests.tasks.rollout_samples import harbor_result, write_trial, zipped


# --- Harbor import ------------------------------------------------------------------------------


def test_a_harbor_job_becomes_a_batch_with_trials_matched_by_name_checksum_or_directory(job_dir, users):
    assert harbor.task_checksum(versions.version_bundle(job_dir["ours"].current_version)) == job_dir["checksum"]
    outcome = rollout_imports.import_results(job_dir["job"], user=users["reviewer"])
    assert outcome.refused == [] and len(outcome.batches) == 1
    batch = outcome.batches[0]
    assert (batch.source, batch.name, batch.status, batch.model, batch.agent) == (
        "harbor", "nightly", "done", "deepseek/deepseek-v4-pro", "terminus-2")
    report = rollout_imports.job_report(batch)
    assert (report["trials"], report["matched"]) == (5, 4)
    assert report["unmatched"] == [{"trial": "fix-git__eee5555", "task_name": "terminal-bench/fix-git",
                                    "reason": f"no task named 'fix-git' and no version with task_checksum {'f' * 16}…"}]
    assert report["matched_by"] == {"name and checksum": 3, "content hash of the task directory": 1}
    ours = list(batch.trajectories.filter(task=job_dir["ours"]).order_by("attempt"))
    assert [(t.attempt, t.passed, t.reward, t.failure) for t in ours] == [
        (0, True, 1.0, ""), (1, False, 0.0, "tests_failed"), (2, False, None, "AgentTimeoutError")]
    assert ours[0].version_id == job_dir["ours"].current_version_id
    assert (ours[0].seconds, ours[0].prompt_tokens, ours[0].source_path.endswith("sum-qty__aaa1111")) == (300.0, 1000,
                                                                                                        True)
    assert [(t.name, t.outcome) for t in ours[1].trial.tests.all()] == [("test_outputs::test_out_exists", "passed"),
                                                                        ("test_outputs::test_total", "failed")]
    turns = list(ours[0].turns.all())
    assert [(t.index, t.state, t.task_complete) for t in turns] == [(1, "observation", False), (2, "action", True)]
    assert turns[0].commands == [{"command": "cat /app/data.csv", "program": "cat", "kind": "observation"}]
    assert ours[1].n_turns == 0  # no agent logs: no turns, still a graded attempt
    assert batch.trajectories.get(task=job_dir["local"]).passed is True
    task = Task.objects.get(pk=job_dir["ours"].pk)
    assert (task.n_rollouts, task.pass_rate) == (3, pytest.approx(1 / 3))
    # the same job again is refused, naming the batch it already is
    with pytest.raises(rollout_imports.ImportRefused, match=f"already imported as batch #{batch.pk}"):
        rollout_imports.import_job(job_dir["job"])


def _counts():
    return (RolloutBatch.objects.count(), Trajectory.objects.count(), Trial.objects.count(), Turn.objects.count(),
            TestResult.objects.count())


def test_a_malformed_trial_refuses_the_whole_job_naming_file_and_field(job_dir):
    write_trial(job_dir["job"], "broken__fff6666", '{"task_name": "sum-qty", "verifier_res')
    bad = harbor_result("sum-qty", checksum=job_dir["checksum"])
    bad["agent_result"]["n_input_tokens"] = "many"
    write_trial(job_dir["job"], "typed__ggg7777", bad)
    before = _counts()
    with pytest.raises(rollout_imports.ImportRefused) as refused:
        rollout_imports.import_job(job_dir["job"])
    assert _counts() == before  # nothing half-imported
    problems = {(p["trial"], p["file"], p["field"]) for p in refused.value.problems}
    assert ("broken__fff6666", "result.json", "") in problems
    assert ("typed__ggg7777", "result.json", "agent_result.n_input_tokens") in problems
    assert "invalid JSON" in next(p["error"] for p in refused.value.problems if p["trial"] == "broken__fff6666")


def test_a_partial_job_is_refused_unless_asked_and_then_lists_what_it_left_out(job_dir):
    write_trial(job_dir["job"], "sum-qty__hhh8888", None)  # still running: no result.json yet
    before = _counts()
    with pytest.raises(rollout_imports.ImportRefused, match="the trial has not finished"):
        rollout_imports.import_job(job_dir["job"])
    assert _counts() == before
    batch = rollout_imports.import_job(job_dir["job"], allow_partial=True)
    assert rollout_imports.job_report(batch)["incomplete"] == ["sum-qty__hhh8888"]
    assert batch.trajectories.count() == 4


def test_import_results_finds_every_job_and_refuses_a_directory_without_one(job_dir, tmp_path):
    second = tmp_path / "jobs" / "other"
    write_trial(second, "sum-qty__iii9999", harbor_result("sum-qty", checksum=job_dir["checksum"]))
    outcome = rollout_imports.import_results(tmp_path / "jobs")
    assert outcome.refused == [], [r.problems for r in outcome.refused]
    assert sorted(b.name for b in outcome.batches) == ["nightly", "other"]
    with pytest.raises(rollout_imports.ImportRefused, match="no Harbor job directory here"):
        rollout_imports.import_results(tmp_path / "src")
    with pytest.raises(rollout_imports.ImportRefused, match="no such file"):
        rollout_imports.import_results(tmp_path / "missing")


def test_the_import_command_prints_the_report_and_fails_on_a_refused_job(job_dir, capsys):
    call_command("import-results", str(job_dir["job"]))
    out = capsys.readouterr().out
    assert "4 of 5 trials matched" in out and "unmatched fix-git__eee5555 (terminal-bench/fix-git)" in out
    write_trial(job_dir["job"], "broken__jjj0000", "{")
    with pytest.raises(CommandError, match=r"1 job\(s\) refused, 0 imported"):
        call_command("import-results", str(job_dir["job"]))
    assert "broken__jjj0000/result.json: invalid JSON" in capsys.readouterr().err


def test_uploading_a_job_archive_imports_it_and_a_bad_one_shows_every_problem(job_dir, client_as):
    c = client_as("reviewer")
    response = c.post("/tasks/rollouts/import/", {"archive": zipped(job_dir["job"])})
    batch = RolloutBatch.objects.get(source="harbor")
    assert response.status_code == 302 and response["Location"] == f"/tasks/rollouts/{batch.pk}/"
    page = c.get(response["Location"]).content.decode()
    assert "4 of 5 trials matched" in page and "fix-git__eee5555" in page
    write_trial(job_dir["job"], "broken__kkk1111", "{")
    (job_dir["job"] / "result.json").write_text(json.dumps({"id": "job-2"}))
    response = c.post("/tasks/rollouts/import/", {"archive": zipped(job_dir["job"])})
    assert response.status_code == 400
    html = response.content.decode()
    assert "Nothing was imported" in html and "broken__kkk1111" in html and "result.json" in html
    assert RolloutBatch.objects.filter(source="harbor").count() == 1
    not_archive = io.BytesIO(b"hello")
    not_archive.name = "job.txt"
    assert c.post("/tasks/rollouts/import/", {"archive": not_archive}).status_code == 400
