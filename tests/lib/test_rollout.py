"""Agent rollouts on a tiny Harbor task in a real sandbox, driven by scripted models.

The Docker tests skip without an engine unless FACET_REQUIRE_DOCKER=1 (CI), where they fail.
classify_command and the answer schema are pure and run anywhere.
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from facet_site.lib import docker_engine as de
from facet_site.lib import rollout as ro
from facet_site.lib import shell_commands
from facet_site.lib.llm import CallRecord, InvalidOutput, LLMClient, LLMSettings, PermanentLLMError
from facet_site.lib.llm.jsonout import JSONNotFound, describe_error, parse_structured
from facet_site.lib.llm.records import StructuredResult

pytestmark = pytest.mark.docker

OWNER = f"pytest-rollout:{socket.gethostname()}:{os.getpid()}"
SMALL = de.SandboxLimits(cpus=1.0, memory_bytes=512 * de.MiB, pids=256, disk_bytes=256 * de.MiB,
                         tmp_bytes=64 * de.MiB, output_bytes=256 * de.KiB, disk_poll_s=0.5)

# ---------------------------------------------------------------------------- the task

DATA_CSV = "name,qty\napple,3\npear,5\nplum,2\n"
INSTRUCTION = ("/app/data.csv lists fruit and quantities. Write the total of the qty column to "
               "/app/out.txt as a single number followed by a newline.\n")
TESTS = '''from pathlib import Path

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
TASK_TOML = """version = "1.0"

[agent]
timeout_sec = 300

[verifier]
timeout_sec = 60
"""


def make_task(root: Path) -> Path:
    task = root / "sum-qty"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "environment" / "Dockerfile").write_text(
        "FROM facet-base:bookworm\nWORKDIR /app\nCOPY data.csv /app/data.csv\n")
    (task / "environment" / "data.csv").write_text(DATA_CSV)
    (task / "instruction.md").write_text(INSTRUCTION)
    (task / "task.toml").write_text(TASK_TOML)
    (task / "tests" / "test_outputs.py").write_text(TESTS)
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nawk -F, 'NR>1 {s+=$2} END {print s}' /app/data.csv > /app/out.txt\n")
    return task


@pytest.fixture(scope="module", autouse=True)
def _remove_leftovers():
    """Whatever this module's sandboxes left behind goes, even after a failed test."""
    yield
    try:
        engine = de.connect(os.environ.get("DOCKER_HOST"))
    except de.EngineUnavailable:
        return
    # Each rollout labels its sandbox f"{OWNER}:rollout:<id>"; cleanup_leftovers matches
    # owners exactly, so the prefix is matched here.
    for row in engine.api.containers(all=True, filters={"label": [f"{de.LABEL_SANDBOX}=1"]}):
        if (row.get("Labels") or {}).get(de.LABEL_OWNER, "").startswith(OWNER + ":"):
            engine.api.remove_container(row["Id"], force=True, v=True)
    engine.close()


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    return make_task(tmp_path_factory.mktemp("rollout"))


@pytest.fixture(scope="module")
def image_tag(client, base_image, task_dir) -> str:
    return de.build_image(client, task_dir / "environment", base_image=base_image,
                          timeout_s=180).image_tag


def _own_sandboxes(client) -> list[str]:
    rows = client.api.containers(all=True, filters={"label": [f"{de.LABEL_SANDBOX}=1"]})
    return [r["Id"] for r in rows
            if (r.get("Labels") or {}).get(de.LABEL_OWNER, "").startswith(OWNER)]


# ---------------------------------------------------------------------------- a scripted model


class ScriptedLLM:
    """Answers .complete() from a script, like LLMClient would: the text is parsed against the
    schema, and text that does not parse raises InvalidOutput. An Exception in the script is
    raised; when the script runs out, `then` (if given) is repeated."""

    def __init__(self, script: list[Any], then: Any = None):
        self.script = list(script)
        self.then = then
        self.calls: list[dict[str, Any]] = []

    def complete(self, *, stage, subject, prompt_version, messages, schema):
        self.calls.append({"stage": stage, "subject": subject, "messages": messages})
        if self.script:
            reply = self.script.pop(0)
        elif self.then is not None:
            reply = self.then
        else:
            raise AssertionError(f"the script has no answer for call {len(self.calls)}")
        if isinstance(reply, Exception):
            raise reply
        text = reply if isinstance(reply, str) else json.dumps(reply)
        record = CallRecord(stage=stage, subject=subject, model="scripted",
                            prompt_version=prompt_version, messages=messages,
                            response_text=text, tokens_in=100, tokens_out=20)
        try:
            parsed = parse_structured(text, schema)
        except (JSONNotFound, ValidationError) as exc:
            record.status = "invalid_output"
            raise InvalidOutput("invalid", raw_text=text, validation_error=describe_error(exc),
                                record=record) from exc
        return StructuredResult(parsed=parsed, record=record)


def turn(*commands: str | tuple[str, float], complete: bool = False, analysis: str = "a",
         plan: str = "p") -> dict:
    cmds = []
    for c in commands:
        if isinstance(c, tuple):
            cmds.append({"keystrokes": c[0] + "\n", "timeout_s": c[1]})
        else:
            cmds.append({"keystrokes": c + "\n", "timeout_s": 10})
    return {"analysis": analysis, "plan": plan, "commands": cmds, "task_complete": complete}


def rollout(client, image_tag, task_dir, llm, **kwargs) -> ro.AgentRun:
    kwargs.setdefault("max_turns", 8)
    kwargs.setdefault("limits", SMALL)
    return ro.run_rollout(client, image_tag=image_tag, task_dir=task_dir, llm=llm,
                          model_label="scripted", subject=kwargs.pop("subject", "task:sum:a1"),
                          owner=OWNER, **kwargs)


def _user_messages(call: dict) -> list[str]:
    return [m["content"] for m in call["messages"] if m["role"] == "user"]


# ---------------------------------------------------------------------------- Docker tests


def test_scripted_success_observe_act_complete_confirm(client, image_tag, task_dir):
    llm = ScriptedLLM([
        turn("cat /app/data.csv", "ls -la"),
        turn("awk -F, 'NR>1 {s+=$2} END {print s}' data.csv > out.txt"),
        turn("cat /app/out.txt", complete=True),
        turn(complete=True),
    ])
    traj = rollout(client, image_tag, task_dir, llm)
    assert traj.stop_reason == "completed", traj.error
    assert traj.reward == 1.0 and traj.passed
    assert traj.states == ["observation", "action", "observation", "none"]
    assert [c.kind for c in traj.turns[0].commands] == ["observation", "observation"]
    assert traj.turns[0].commands[0].output == DATA_CSV
    assert traj.turns[0].commands[0].exit_code == 0
    assert traj.turns[2].commands[0].output.strip() == "10"
    assert traj.turns[1].commands[0].programs == ["awk"]
    assert sorted(t["name"].split("::")[-1] for t in traj.test_results) == [
        "test_out_exists", "test_total"]
    assert all(t["outcome"] == "passed" for t in traj.test_results)
    assert traj.test_results_source == "junit.xml"
    # The subject scheme, and what each turn saw.
    assert [c["subject"] for c in llm.calls] == [f"task:sum:a1:turn{n}" for n in (1, 2, 3, 4)]
    assert {c["stage"] for c in llm.calls} == {"rollout.turn"}
    first = _user_messages(llm.calls[0])
    assert INSTRUCTION.strip() in first[0] and "/app" in first[0]
    second = _user_messages(llm.calls[1])[-1]
    assert "$ cat /app/data.csv" in second and "apple,3" in second and "[exit code 0" in second
    assert "confirm" in _user_messages(llm.calls[3])[-1]
    assert traj.tokens_in == 400 and traj.tokens_out == 80
    assert traj.turns[0].tokens_in == 100
    assert traj.total_seconds > 0 and traj.verifier_seconds > 0
    assert traj.tampering == []
    assert json.loads(ro.agent_run_json(traj))["stop_reason"] == "completed"
    assert _own_sandboxes(client) == []


def test_a_model_that_never_completes_hits_the_turn_budget(client, image_tag, task_dir):
    llm = ScriptedLLM([], then=turn("ls /app"))
    traj = rollout(client, image_tag, task_dir, llm, max_turns=3)
    assert traj.stop_reason == "turn_budget"
    assert len(traj.turns) == 3 and len(llm.calls) == 3
    assert traj.reward == 0.0 and not traj.passed
    assert traj.states == ["observation"] * 3


def test_a_hanging_command_times_out_and_the_rollout_continues(client, image_tag, task_dir):
    llm = ScriptedLLM([
        turn(("while true; do :; done", 2)),
        turn("echo 10 > /app/out.txt", complete=True),
        turn(complete=True),
    ])
    traj = rollout(client, image_tag, task_dir, llm)
    hung = traj.turns[0].commands[0]
    assert hung.timed_out and hung.timeout_s == 2
    assert 2 <= hung.seconds < 8
    assert "[killed after 2 s: timeout]" in _user_messages(llm.calls[1])[-1]
    assert traj.stop_reason == "completed"
    assert traj.reward == 1.0


def test_a_wrong_answer_gets_reward_0_and_the_failing_test_is_named(client, image_tag, task_dir):
    llm = ScriptedLLM([
        turn("cd /app", "echo 9 > out.txt", complete=True),  # relative path: cwd carried over
        turn(complete=True),
    ])
    traj = rollout(client, image_tag, task_dir, llm)
    assert traj.stop_reason == "completed"
    assert traj.reward == 0.0 and not traj.passed
    outcomes = {t["name"].split("::")[-1]: t["outcome"] for t in traj.test_results}
    assert outcomes == {"test_out_exists": "passed", "test_total": "failed"}
    failed = next(t for t in traj.test_results if t["outcome"] == "failed")
    assert "9" in failed["message"]
    assert traj.states == ["mixed", "none"]


def test_long_output_is_capped_and_the_working_directory_carries_over(client, image_tag,
                                                                       task_dir):
    llm = ScriptedLLM([turn("export X=1; cd /tmp && seq 1 200000", "pwd", 'echo "[$X]"')], then=turn("true"))
    traj = rollout(client, image_tag, task_dir, llm, max_turns=1, max_output_chars=2000)
    big, pwd, var = traj.turns[0].commands
    assert len(big.output) < 2100 and "characters dropped here" in big.output
    assert big.output.startswith("1\n2\n3\n") and big.output.endswith("200000\n")
    assert pwd.output.strip() == "/tmp"  # the marker survived the engine's own output cap
    assert var.output.strip() == "[]"  # shell variables do not carry over, as the prompt says


def test_invalid_replies_model_errors_and_agent_written_rewards(client, image_tag, task_dir):
    # An unreadable reply is shown to the model; task_complete must then be said twice again;
    # a reward the agent writes itself is removed before grading; a permanent model error ends
    # the loop but the state is still graded.
    llm = ScriptedLLM([
        "I think I will just look around first.",
        turn("echo 10 > /app/out.txt; echo 1 > /logs/verifier/reward.txt", complete=True),
        PermanentLLMError("auth failed"),
    ])
    traj = rollout(client, image_tag, task_dir, llm)
    assert traj.turns[0].parse_error and traj.turns[0].state == "none"
    assert traj.turns[0].model_text == "I think I will just look around first."
    assert "could not be used" in _user_messages(llm.calls[1])[-1]
    assert traj.stop_reason == "model_error" and "auth failed" in traj.error
    assert traj.tampering == ["/logs/verifier/reward.txt"]
    assert traj.reward == 1.0  # out.txt is right; the planted reward.txt played no part
    assert len(traj.turns) == 2


def test_time_budget_cuts_a_command_short_and_stops(client, image_tag, task_dir):
    llm = ScriptedLLM([turn(("sleep 30", 20))], then=turn("ls"))
    traj = rollout(client, image_tag, task_dir, llm, time_budget_s=2)
    assert traj.stop_reason == "time_budget"
    first = traj.turns[0].commands[0]
    assert first.timed_out and first.timeout_s <= 2
    assert traj.agent_seconds < 6
    assert traj.reward == 0.0


def test_replayed_llmclient_follows_the_stage_and_subject_scheme(client, image_tag, task_dir,
                                                                  tmp_path):
    subject = "task:sum-qty:model:replay:attempt:1"
    answers = {
        1: ["not json at all", json.dumps(turn("cat /app/data.csv"))],  # seq 1: the re-ask
        2: [json.dumps(turn("printf '10\\n' > /app/out.txt", complete=True))],
        3: ["```json\n" + json.dumps(turn(complete=True)) + "\n```"],
    }
    cassette = tmp_path / "rollout.jsonl"
    with cassette.open("w") as fh:
        for n, replies in answers.items():
            for seq, text in enumerate(replies):
                fh.write(json.dumps({
                    "stage": "rollout.turn", "subject": f"{subject}:turn{n}", "seq": seq,
                    "prompt_version": ro.PROMPT_VERSION, "model": "recorded-model",
                    "request_hash": "", "messages": [], "response_text": text,
                    "usage": {"prompt_tokens": 1000, "completion_tokens": 50},
                    "finish_reason": "stop", "source": "http",
                    "recorded_at": "2025-01-01T00:00:00+00:00"}) + "\n")
    records: list[CallRecord] = []
    llm = LLMClient(LLMSettings(provider="replay", cassette_path=str(cassette)),
                    recorder=records.append)
    traj = ro.run_rollout(client, image_tag=image_tag, task_dir=task_dir, llm=llm,
                          model_label="recorded-model", subject=subject, limits=SMALL,
                          owner=OWNER)
    assert traj.stop_reason == "completed", traj.error
    assert traj.reward == 1.0
    assert traj.states == ["observation", "action", "none"]
    assert [(r.subject, r.status) for r in records] == [
        (f"{subject}:turn1", "invalid_output"), (f"{subject}:turn1", "replayed"),
        (f"{subject}:turn2", "replayed"), (f"{subject}:turn3", "replayed")]
    assert traj.tokens_in == 3000 and traj.tokens_out == 150  # the re-ask's tokens: see report


# ---------------------------------------------------------------------------- pure functions


OBSERVATIONS = [
    "cat /app/data.csv", "ls -la /app 2>/dev/null | grep csv", "head -n 3 f; tail f",
    "grep -rn 'TODO' src/ | wc -l", "find . -name '*.py'", "find . -exec cat {} +", "wc -c f",
    "less f", "file f && stat f", "pwd", "echo hello", "echo 'a > b'", "grep '>' f",
    "jq '.items[0]' data.json", "cat <<EOF\nrm -rf /\nEOF", "sed -n '1,5p' f",
    "awk -F, '{s+=$2} END {print s}' data.csv", "sort f | uniq -c", "cd /app && ls",
    "git status && git log --oneline -3", "python3 --version", "pip list",
    "sudo -u app cat /etc/passwd", "timeout 5 cat f", "echo \"$(cat x)\"",
    "for f in *.csv; do wc -l $f; done", "diff <(sort a) <(sort b)", "ls | tee /dev/null",
    "export A=1", "ls # > not-a-redirect", "curl -s http://localhost:8000/health",
    "sqlite3 app.db 'SELECT count(*) FROM t'", "ls -la \\\n  /app", "cat f >&2",
]
ACTIONS = [
    "echo 10 > /app/out.txt", "printf 'x' >> log", "cat > /app/x <<EOF\nhello\nEOF",
    "sed -i 's/a/b/' f", "find . -name '*.pyc' -delete", "find . -exec rm {} \\;",
    "python3 solve.py", "bash run.sh", "mkdir -p out", "touch a", "rm -f a", "mv a b",
    "cp a b", "chmod +x s.sh", "git commit -am x", "pip install requests",
    "jq '.a' f.json > g.json", "make 2>&1 | tee build.log", "echo $(rm -f x)",
    "for f in *.csv; do rm $f; done", "awk '{print $1 > \"out\"}' f", "sort -o out in",
    "ls | xargs rm", "uniq in out", "curl -o f http://x/y", "sqlite3 db 'DELETE FROM t'",
    "bash -c 'touch x'", "vim x", "apt-get install -y jq", "kill 1234",
    "echo 'unterminated",  # does not parse: counted as an action
]


@pytest.mark.parametrize("cmd", OBSERVATIONS)
def test_classify_observations(cmd):
    assert shell_commands.classify_command(cmd) == "observation"


@pytest.mark.parametrize("cmd", ACTIONS)
def test_classify_actions(cmd):
    assert shell_commands.classify_command(cmd) == "action"


def test_command_programs_and_turn_states():
    assert shell_commands.command_programs("cd /app && sudo grep -r x . | wc -l") == ["cd", "grep", "wc"]
    assert shell_commands.command_programs("ls | xargs -n1 rm") == ["ls", "rm"]
    assert shell_commands.command_programs("echo 'open") == []
    assert shell_commands.turn_state([]) == "none"
    assert shell_commands.turn_state(["observation", "observation"]) == "observation"
    assert shell_commands.turn_state(["action"]) == "action"
    assert shell_commands.turn_state(["observation", "action"]) == "mixed"


def test_answer_schema_accepts_keystrokes_command_and_duration():
    a = ro.TurnAnswer.model_validate({"commands": [{"keystrokes": "ls\n", "duration": 3},
                                                   {"command": "pwd"}]})
    assert [c.text for c in a.commands] == ["ls\n", "pwd"]
    assert a.commands[0].timeout_s == 3 and a.commands[1].timeout_s is None
    assert a.task_complete is False
    with pytest.raises(ValidationError):
        ro.TurnAnswer.model_validate({"commands": [{"timeout_s": 3}]})


def test_cwd_marker_round_trip():
    wrapped = ro._wrap("ls", "/app dir")
    assert wrapped.startswith("cd -- '/app dir'")
    text, cwd = ro._split_cwd("out\n" + ro._CWD_MARK + "/srv" + ro._CWD_END)
    assert (text, cwd) == ("out\n", "/srv")
    assert ro._split_cwd("plain") == ("plain", None)
