"""Samples for the rollout tests and others: a small Harbor task imported as a facet task, what
run_rollout returns for a finished attempt, Harbor trial directories for a job to import, and a
job zipped for upload. The fixture job_dir is in conftest.py."""
import io
import json
import zipfile
from pathlib import Path

from facet_site.lib import harbor
from facet_site.lib import rollout as ro
from tasks import versions
from tasks.models import Task, TaskStatus


XSS = "<script>alert('x')</script>"
CLOSED_SOCKET = "unix:///nonexistent/facet-test-docker.sock"

DATA_CSV = "name,qty\napple,3\npear,5\nplum,2\n"
TEST_PY = '''from pathlib import Path


def test_out_exists():
    assert Path("/app/out.txt").is_file()


def test_total():
    assert Path("/app/out.txt").read_text().strip() == "10"
'''
TEST_SH = """#!/bin/bash
cd /app
python3 -m pytest -q -p no:cacheprovider --junitxml=/logs/verifier/junit.xml /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def task_bundle(name: str = "sum-qty", instruction: str = "") -> harbor.TaskBundle:
    return harbor.TaskBundle(
        name=name, instruction=instruction or ("/app/data.csv lists fruit and quantities. Write the total of the qty "
                                               f"column to /app/out.txt as a single number and a newline ({name}).\n"),
        config=harbor.TaskConfig(tags=["csv"], category="csv-excel-and-spreadsheets", agent_timeout_sec=300.0,
                                 verifier_timeout_sec=120.0),
        files={"environment/Dockerfile": b"FROM facet-base:bookworm\nWORKDIR /app\nCOPY data.csv /app/data.csv\n",
               "environment/data.csv": DATA_CSV.encode(), "tests/test.sh": TEST_SH.encode(),
               "tests/test_outputs.py": TEST_PY.encode(),
               "solution/solve.sh": b"#!/bin/bash\nawk -F, 'NR>1 {s+=$2} END {print s}' /app/data.csv > /app/out.txt\n"})


def make_task(tmp_path: Path, name: str = "sum-qty", status=TaskStatus.VALIDATED, instruction: str = "") -> Task:
    d = harbor.write_task_dir(task_bundle(name, instruction), tmp_path / "src" / name)
    task = versions.import_task_dir(d)
    Task.objects.filter(pk=task.pk).update(status=status)
    task.refresh_from_db()
    return task


class Recorder:
    def __init__(self, calls):
        self.calls = calls


def fake_result(*, passed: bool) -> ro.AgentRun:
    """What run_rollout returns: three turns (observe, act, confirm) and the verifier's verdict."""
    turns = [
        ro.Turn(index=1, analysis=f"Read it first {XSS}", plan="cat", model_text="{}", tokens_in=100, tokens_out=10,
                seconds=1.5, state="observation", commands=[
                    ro.CommandRun(command="cd /app && cat data.csv", output="name,qty\n", exit_code=0, seconds=0.1,
                                  timed_out=False, kind="observation", timeout_s=30)]),
        ro.Turn(index=2, analysis="Sum it", plan="write", model_text="{}", tokens_in=200, tokens_out=20, seconds=2.0,
                state="action", task_complete=True, commands=[
                    ro.CommandRun(command="printf '10\\n' > /app/out.txt", output="", exit_code=0, seconds=0.1,
                                  timed_out=False, kind="action", timeout_s=30)]),
        ro.Turn(index=3, analysis="Confirm", plan="", model_text="{}", tokens_in=300, tokens_out=5, seconds=0.5,
                state="none", task_complete=True, commands=[]),
    ]
    return ro.AgentRun(turns=turns, reward=1.0 if passed else 0.0, passed=passed, stop_reason="completed",
                         total_seconds=9.0, tokens_in=600, tokens_out=35, agent_seconds=4.0, verifier_seconds=3.0,
                         verifier_output="2 passed", test_results=[
                             {"name": "test_outputs.py::test_out_exists", "outcome": "passed"},
                             {"name": "test_outputs.py::test_total", "outcome": "passed" if passed else "failed",
                              "message": "assert '11' == '10'"}])


def harbor_result(task_name, *, checksum=None, task_path=None, reward=1.0, exception=None, model="deepseek-v4-pro",
                  agent="terminus-2", tokens=(1000, 50), trial_name=""):
    return {
        "id": "6d706a03-7fb3-4c0e-88c3-6dcbd04c8ad9", "task_name": task_name, "trial_name": trial_name,
        "trial_uri": f"file:///jobs/j/{trial_name}", "task_id": {"path": task_path or f"/elsewhere/{task_name}"},
        "source": None, "task_checksum": checksum or "0" * 64,
        "config": {"task": {"path": task_path or f"/elsewhere/{task_name}"}, "trial_name": trial_name},
        "agent_info": {"name": agent, "version": "2.0.0", "model_info": {"name": model, "provider": "deepseek"}},
        "agent_result": {"n_input_tokens": tokens[0], "n_cache_tokens": None, "n_output_tokens": tokens[1],
                         "cost_usd": 0.01},
        "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
        "exception_info": None if exception is None else {
            "exception_type": exception, "exception_message": f"{exception} {XSS}", "exception_traceback": "",
            "occurred_at": "2026-01-01T10:05:00Z"},
        "started_at": "2026-01-01T10:00:00Z", "finished_at": "2026-01-01T10:06:00Z",
        "agent_execution": {"started_at": "2026-01-01T10:00:10Z", "finished_at": "2026-01-01T10:05:10Z"},
        "verifier": {"started_at": "2026-01-01T10:05:20Z", "finished_at": "2026-01-01T10:05:50Z"},
    }


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="2">
<testcase classname="test_outputs" name="test_out_exists"/>
<testcase classname="test_outputs" name="test_total">{failure}</testcase></testsuite></testsuites>"""


def write_trial(job: Path, name: str, result: dict | str | None, *, passed=True, atif=True):
    d = job / name
    (d / "verifier").mkdir(parents=True)
    (d / "agent").mkdir()
    if result is not None:
        (d / "result.json").write_text(result if isinstance(result, str) else json.dumps(result))
    (d / "verifier" / "reward.txt").write_text("1\n" if passed else "0\n")
    (d / "verifier" / "test-stdout.txt").write_text("2 passed\n" if passed else "1 failed, 1 passed\n")
    (d / "verifier" / "junit.xml").write_text(JUNIT.format(
        failure="" if passed else '<failure message="assert \'11\' == \'10\'">AssertionError</failure>'))
    if atif:
        (d / "agent" / "trajectory.json").write_text(json.dumps({"schema_version": "ATIF-v1.4", "session_id": "s",
            "agent": {"name": "terminus-2", "version": "2"}, "steps": [
                {"step_id": 1, "source": "user", "message": "task"},
                {"step_id": 2, "source": "agent", "message": json.dumps({"analysis": f"look {XSS}", "plan": "cat"}),
                 "tool_calls": [{"tool_call_id": "c1", "function_name": "bash_command",
                                 "arguments": {"keystrokes": "cat /app/data.csv\n", "duration": 0.1}}],
                 "observation": {"results": [{"content": "name,qty"}]}, "metrics": {"prompt_tokens": 500}},
                {"step_id": 3, "source": "agent", "message": "{}", "tool_calls": [
                    {"tool_call_id": "c2", "function_name": "bash_command",
                     "arguments": {"keystrokes": "echo 10 > /app/out.txt\n"}},
                    {"tool_call_id": "c3", "function_name": "mark_task_complete", "arguments": {}}]}]}))
    return d


def zipped(directory: Path, prefix: str = "") -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for p in sorted(directory.rglob("*")):
            if p.is_file():
                zf.write(p, prefix + p.relative_to(directory.parent).as_posix())
    buf.seek(0)
    buf.name = "job.zip"
    return buf
