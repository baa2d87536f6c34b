"""Harbor job directories as facet imports them: Harbor's task checksum, agent logs to turns, job
and trial discovery, and what counts as incomplete, malformed or merely a warning."""
import json
from pathlib import Path

from facet_site.lib import harbor
from facet_site.lib import shell_commands

BUNDLE = harbor.TaskBundle(
    name="sum-qty", instruction="Sum the qty column.\n",
    files={"environment/Dockerfile": b"FROM facet-base:bookworm\nWORKDIR /app\n",
           "environment/data/x.csv": b"a,b\n1,2\n", "solution/solve.sh": b"#!/bin/bash\necho 3\n",
           "tests/test.sh": b"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
           "tests/test_outputs.py": b"def test_x():\n    pass\n"})
# Computed by Harbor 0.25.0 itself (`harbor.models.task.task.Task(dir).checksum`, dirhash 0.5.0)
# on this bundle written by harbor.write_task_dir.
HARBOR_CHECKSUM = "1c88d4c6246be474a181a9e62a823d68a6d89d107c78d9937ee5b18b59227657"


def test_task_checksum_is_harbors_dirhash_of_the_written_directory(tmp_path):
    assert harbor.task_checksum(BUNDLE) == HARBOR_CHECKSUM
    written = harbor.write_task_dir(BUNDLE, tmp_path / "sum-qty")
    files = [(p.relative_to(written).as_posix(), p.read_bytes()) for p in sorted(written.rglob("*")) if p.is_file()]
    assert harbor.dirhash(files) == HARBOR_CHECKSUM
    changed = harbor.TaskBundle(name=BUNDLE.name, instruction="Sum it.\n", files=BUNDLE.files)
    assert harbor.task_checksum(changed) != HARBOR_CHECKSUM


def test_dirhash_leaves_out_empty_directories_and_depends_on_names():
    assert harbor.dirhash([("a/b.txt", b"x")]) == harbor.dirhash([("a/b.txt", b"x")])
    assert harbor.dirhash([("a/b.txt", b"x")]) != harbor.dirhash([("a/c.txt", b"x")])
    assert harbor.dirhash([("a/b.txt", b"x")]) != harbor.dirhash([("b.txt", b"x")])


def test_main_program_and_command_records():
    assert shell_commands.main_program("cd /app && cat data.csv | head") == "cat"
    assert shell_commands.main_program("cd /app") == "cd"
    assert shell_commands.main_program("sudo -u app grep -r x .") == "grep"
    assert shell_commands.command_record("echo 10 > /app/out.txt") == {"command": "echo 10 > /app/out.txt", "program": "echo",
                                                           "kind": "action"}
    assert shell_commands.command_record("ls -la")["kind"] == "observation"


def test_atif_trajectory_gives_turns_with_commands_outputs_and_tokens(tmp_path):
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "trajectory.json").write_text(json.dumps({
        "schema_version": "ATIF-v1.4", "session_id": "s", "agent": {"name": "terminus-2", "version": "2"},
        "steps": [
            {"step_id": 1, "source": "system", "message": "You are..."},
            {"step_id": 2, "source": "user", "message": "Sum the qty column."},
            {"step_id": 3, "source": "agent", "message": json.dumps({"analysis": "Look.", "plan": "cat it",
                                                                       "commands": [], "task_complete": False}),
             "tool_calls": [{"tool_call_id": "call_0_1", "function_name": "bash_command",
                             "arguments": {"keystrokes": "cat /app/data.csv\n", "duration": 0.1}}],
             "observation": {"results": [{"source_call_id": "call_0_1", "content": "name,qty\napple,3\n"}]},
             "metrics": {"prompt_tokens": 900, "completion_tokens": 40}},
            {"step_id": 4, "source": "agent", "message": "Done, I think.",
             "tool_calls": [{"tool_call_id": "call_1_task_complete", "function_name": "mark_task_complete",
                             "arguments": {}}],
             "observation": {"results": [{"content": "Are you sure?"}]}},
        ]}))
    turns, source, warnings = harbor.agent_turns(agent)
    assert source == "agent/trajectory.json" and warnings == []
    assert [(t.index, t.commands, t.task_complete) for t in turns] == [(1, ["cat /app/data.csv"], False),
                                                                        (2, [], True)]
    assert (turns[0].analysis, turns[0].plan, turns[0].tokens_in, turns[0].tokens_out) == ("Look.", "cat it", 900, 40)
    assert turns[0].output == "name,qty\napple,3\n"
    assert turns[1].analysis == "Done, I think."


def test_terminus_episode_logs_give_turns(tmp_path):
    agent = tmp_path / "agent"
    for n, (reply, prompt) in enumerate([
            ({"analysis": "a0", "plan": "p0", "commands": [{"keystrokes": "ls\n", "duration": 1}],
              "task_complete": False}, "Task: ..."),
            ({"analysis": "a1", "plan": "p1", "commands": [], "task_complete": True}, "data.csv\n")]):
        ep = agent / f"episode-{n}"
        ep.mkdir(parents=True)
        (ep / "response.txt").write_text("```json\n" + json.dumps(reply) + "\n```")
        (ep / "prompt.txt").write_text(prompt)
    turns, source, _ = harbor.agent_turns(agent)
    assert source.startswith("agent/episode")
    assert [(t.analysis, t.commands, t.output, t.task_complete) for t in turns] == [
        ("a0", ["ls"], "data.csv\n", False), ("a1", [], "", True)]


def test_an_unreadable_agent_log_is_a_warning_not_an_error(tmp_path):
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "trajectory.json").write_text("{not json")
    turns, source, warnings = harbor.agent_turns(agent)
    assert turns == [] and source == "" and warnings and warnings[0].startswith("agent/trajectory.json: invalid JSON")
    assert harbor.agent_turns(tmp_path / "missing") == ([], "", [])


def _trial(job: Path, name: str, result: dict | str | None):
    d = job / name
    (d / "verifier").mkdir(parents=True)
    if result is not None:
        (d / "result.json").write_text(result if isinstance(result, str) else json.dumps(result))
    return d


def test_read_job_sorts_trials_into_complete_incomplete_and_malformed(tmp_path):
    job = tmp_path / "jobs" / "2026-01-01__10-00-00"
    job.mkdir(parents=True)
    (job / "config.json").write_text(json.dumps({"job_name": "nightly"}))
    (job / "result.json").write_text(json.dumps({"id": "5b1c", "finished_at": None, "n_total_trials": 4}))
    _trial(job, "a__1", {"task_name": "sum-qty", "task_checksum": "c", "task_id": {"path": "/x/sum-qty"},
                         "verifier_result": {"rewards": {"reward": 1}},
                         "agent_execution": {"started_at": "2026-01-01T10:00:00Z",
                                             "finished_at": "2026-01-01T10:00:30Z"}})
    _trial(job, "b__2", None)
    _trial(job, "c__3", '{"task_name": "sum-qty", "verifier_res')
    _trial(job, "d__4", {"task_name": "sum-qty", "agent_result": {"n_input_tokens": "many"}})
    read = harbor.read_job(job)
    assert (read.name, read.job_id, read.finished) == ("nightly", "5b1c", False)
    assert [t.name for t in read.trials] == ["a__1"]
    assert read.trials[0].task_path == "/x/sum-qty" and read.trials[0].agent_seconds == 30.0
    assert read.incomplete == ["b__2"]
    problems = {(e.trial, e.file, e.field) for e in read.errors}
    assert ("c__3", "result.json", None) in problems
    assert ("d__4", "result.json", "agent_result.n_input_tokens") in problems


def test_find_job_dirs_in_a_job_a_jobs_directory_and_an_unpacked_archive(tmp_path):
    for job in ("j1", "j2"):
        _trial(tmp_path / "unpacked" / "jobs" / job, "t__1", {"task_name": "x"})
    assert [p.name for p in harbor.find_job_dirs(tmp_path / "unpacked")] == ["j1", "j2"]
    assert harbor.find_job_dirs(tmp_path / "unpacked" / "jobs" / "j1") == [tmp_path / "unpacked" / "jobs" / "j1"]
    assert harbor.find_job_dirs(tmp_path / "nothing-here") == []



CTRF = {"results": {"tool": {"name": "pytest"}, "summary": {"tests": 3},
                    "tests": [{"name": "test_outputs.py::test_a", "status": "passed", "duration": 1},
                              {"name": "test_outputs.py::test_b", "status": "failed", "message": "AssertionError"},
                              {"name": "test_outputs.py::test_c", "status": "pending"}]}}

BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
<testsuite><testcase name="&lol2;"/></testsuite>"""


# ---- job import ------------------------------------------------------------------------------------


def trial_result(**overrides) -> dict:
    data = {
        "id": "7d3c", "task_name": "hello-file", "trial_name": "hello-file__aB3dE9x", "trial_uri": "file:///x",
        "task_id": {"path": "tasks/hello-file"}, "source": None, "task_checksum": "deadbeef",
        "agent_info": {"name": "claude-code", "version": "1.0.3", "model_info": {"name": "claude-opus-4-1",
                                                                               "provider": "anthropic"}},
        "agent_result": {"n_input_tokens": 1200, "n_cache_tokens": 0, "n_output_tokens": 340, "cost_usd": 0.12},
        "verifier_result": {"rewards": {"reward": 1.0}, "statistics": None},
        "exception_info": None,
        "started_at": "2026-06-17T12:00:00.000001Z", "finished_at": "2026-06-17T12:05:00+00:00",
    }
    data.update(overrides)
    return data


def make_trial(job: Path, name: str, result, *, verifier: dict[str, bytes] | None = None) -> None:
    tdir = job / name
    (tdir / "verifier").mkdir(parents=True)
    if result is not None:
        (tdir / "result.json").write_text(result if isinstance(result, str) else json.dumps(result))
    for rel, data in (verifier or {}).items():
        (tdir / "verifier" / rel).write_bytes(data)


def test_read_job_imports_trials_and_names_what_is_wrong(tmp_path):
    job = tmp_path / "2026-06-17__12-00-00"
    job.mkdir()
    (job / "result.json").write_text('{"id": "job", "stats": {}}')
    (job / "config.json").write_text("{}")
    make_trial(job, "hello-file__aB3dE9x", trial_result(),
               verifier={"test-stdout.txt": b"1 passed\n", "ctrf.json": json.dumps(CTRF).encode(), "reward.txt": b"1"})
    make_trial(job, "hello-file__timeout", trial_result(
        trial_name="hello-file__timeout", verifier_result=None, agent_result=None, finished_at=None,
        exception_info={"exception_type": "AgentTimeoutError", "exception_message": "took too long",
                        "exception_traceback": "", "occurred_at": "2026-06-17T12:04:00"}))
    make_trial(job, "hello-file__truncated", '{"task_name": "hello-file", "trial_na')
    make_trial(job, "hello-file__running", None)
    make_trial(job, "hello-file__oddtypes", trial_result(
        trial_name="hello-file__oddtypes", started_at="yesterday",
        agent_result={"n_input_tokens": "many", "n_output_tokens": 5, "cost_usd": None}),
        verifier={"junit.xml": BOMB})
    make_trial(job, "hello-file__noname", {"trial_name": "x"})

    read = harbor.read_job(job)
    errors = read.errors
    by_name = {t.result.trial_name: t.result for t in read.trials}
    # A trial with any error is reported and not imported (oddtypes: read field by field below).
    assert sorted(by_name) == ["hello-file__aB3dE9x", "hello-file__timeout"]

    ok = by_name["hello-file__aB3dE9x"]
    assert (ok.task_name, ok.task_checksum, ok.agent_name, ok.agent_version) == \
        ("hello-file", "deadbeef", "claude-code", "1.0.3")
    assert ok.model == "anthropic/claude-opus-4-1" and ok.reward == 1.0 and ok.exception is None
    assert (ok.tokens_in, ok.tokens_out, ok.cost) == (1200, 340, 0.12)
    assert ok.started_at.year == 2026 and ok.finished_at.minute == 5
    assert ok.verifier_stdout == "1 passed\n" and len(ok.test_results) == 3

    timeout = by_name["hello-file__timeout"]
    assert timeout.reward is None and timeout.effective_reward == 0.0 and timeout.exception == "AgentTimeoutError"
    assert timeout.exception_message == "took too long" and timeout.tokens_in is None and timeout.finished_at is None

    odd = harbor.read_trial_result(job / "hello-file__oddtypes", [])
    assert odd.tokens_in is None and odd.tokens_out == 5 and odd.started_at is None and odd.test_results == []

    text = {(e.trial, e.file, e.field): e.message for e in errors}
    assert any(k[0] == "hello-file__truncated" and "invalid JSON" in v for k, v in text.items())
    assert read.incomplete == ["hello-file__running"]
    running: list = []
    assert harbor.read_trial_result(job / "hello-file__running", running) is None
    assert "missing" in running[0].message
    assert ("hello-file__noname", "result.json", "task_name") in text
    assert ("hello-file__oddtypes", "result.json", "agent_result.n_input_tokens") in text
    assert ("hello-file__oddtypes", "result.json", "started_at") in text
    assert any(k[:2] == ("hello-file__oddtypes", "verifier/junit.xml") and "DOCTYPE" in v for k, v in text.items())
    assert all(isinstance(e, harbor.JobFormatError) and str(e).startswith(e.trial + "/") for e in errors)


def test_read_job_missing_path(tmp_path):
    read = harbor.read_job(tmp_path / "nope")
    assert read.trials == [] and "not a directory" in str(read.errors[0])
