"""Agent rollouts on a Harbor task: a Terminus-2-style loop of model turns and shell commands in a
sandbox, graded by the task's own verifier. Django-free.

One rollout:

1. A docker_engine.Sandbox is started from the task's environment image, with the limits
   validation uses (no network, CPU/memory/pids/disk caps) and the task's [environment].env.
2. Each turn the model gets the instruction and everything its commands printed so far, and
   answers with one JSON object (`TurnAnswer`): analysis, plan, commands, task_complete.
   The commands run one by one, each with its own timeout (capped) and capped output; the next
   turn sees their output and exit codes.
3. The loop ends when the model says task_complete twice in a row (the first time it is asked
   to confirm), or at the turn budget, the wall-clock budget, a model error, or the sandbox's
   death.
4. Then, and only then, tests/ is uploaded to /tests and `bash /tests/test.sh` runs, and the
   reward and per-test results are read from /logs/verifier by verifier_output, the one reader
   of verifier output (harbor-format.md §3). As in Harbor, the verifier also runs after a model
   error or an exhausted budget: the state is graded whatever stopped the agent.

There is no tmux: every command runs to completion in its own non-interactive `bash -c` (stdin
closed). The working directory carries over between commands (we track it); shell variables,
`export`s and functions do not. The model is told so.

LLM calls use stage "rollout.turn" and subject f"{subject}:turn{n}" (n from 1). Cassettes match
on (stage, subject, n-th call for that pair), so each turn has its own slot: seq 0 is the
turn's answer and seq 1, if present, the answer to LLMClient's own re-ask after invalid JSON.
Pass a subject that is unique per attempt (e.g. "task:17:model:m1:attempt:3"); reusing one
across attempts in the same cassette makes them share slots.

The model's answer, the turn records and the prompt texts are in rollout_turns.py; the command
classification in shell_commands.py.
"""
from __future__ import annotations

import logging
import os
import re
import shlex
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import docker

from facet_site.lib import docker_engine as de
from facet_site.lib import validation as v
from facet_site.lib import verifier_output
from facet_site.lib.llm.errors import InvalidOutput, LLMError, PermanentLLMError
# Re-exported: tasks/ reads a command's kind and a turn's state, and the turn records, from here.
from facet_site.lib.rollout_turns import (  # noqa: F401
    CONFIRM, DEFAULT_COMMAND_TIMEOUT_S, INITIAL, PARSE_ERROR, PROMPT_VERSION, STAGE, SYSTEM_PROMPT, AgentRun,
    CommandRun, StopReason, Turn, TurnAnswer, TurnCommand, agent_run_json, format_duration,
)
from facet_site.lib.shell_commands import TurnState, classify_command, command_programs, turn_state  # noqa: F401

log = logging.getLogger(__name__)

# ============================================================================================
# Running commands


# Marks where our trailer put the working directory in the output; the control characters make
# a collision with real output unlikely, and the model never sees it.
_CWD_MARK = "\x1efacet-cwd:"
_CWD_END = "\x1e"
_CONTROL_KEYS = re.compile(r"^(C-[a-z\\\]]|M-[a-z]|Escape|Enter|Tab|Up|Down|Left|Right|"
                           r"[\x03\x04\x1a])$", re.I)


def _wrap(command: str, cwd: str) -> str:
    # Start where the last command ended, and report where this one ends: the EXIT trap runs
    # on `exit` and errors too, and keeps the command's own exit status.
    trailer = f"printf '{_CWD_MARK}%s{_CWD_END}' \"$PWD\""
    return (f"cd -- {shlex.quote(cwd)} 2>/dev/null\n"
            f"trap {shlex.quote(trailer)} EXIT\n{command}\n")


def _split_cwd(output: str) -> tuple[str, str | None]:
    start = output.rfind(_CWD_MARK)
    if start < 0:
        return output, None
    end = output.find(_CWD_END, start + len(_CWD_MARK))
    if end < 0:
        return output, None
    cwd = output[start + len(_CWD_MARK):end]
    return output[:start] + output[end + 1:], cwd


# ============================================================================================
# The rollout


class _Stop(Exception):
    def __init__(self, reason: str, error: str = ""):
        super().__init__(error or reason)
        self.reason = reason
        self.error = error


def _tokens_of(record: Any) -> tuple[int, int]:
    if record is None:
        return 0, 0
    return int(getattr(record, "tokens_in", 0) or 0), int(getattr(record, "tokens_out", 0) or 0)


def _workdir(client: docker.DockerClient, task: v.TaskFiles, image_tag: str) -> str | None:
    # task.toml's workdir, else the image's
    configured = task.section("environment").get("workdir")
    if isinstance(configured, str) and configured:
        return configured
    return v.image_workdir_of(client, image_tag) or None


class _Rollout:
    def __init__(self, client: docker.DockerClient, *, image_tag: str, task: v.TaskFiles,
                 llm: Any, model_label: str, subject: str, max_turns: int, time_budget_s: float,
                 limits: de.SandboxLimits, command_timeout_cap_s: float,
                 default_command_timeout_s: float, verifier_timeout_s: float,
                 max_output_chars: int, max_context_chars: int, owner: str, stage: str,
                 prompt_version: str, clock: Callable[[], float],
                 on_turn: Callable[[Turn], None] | None = None):
        self.client = client
        self.on_turn = on_turn
        self.image_tag = image_tag
        self.task = task
        self.llm = llm
        self.subject = subject
        self.stage = stage
        self.prompt_version = prompt_version
        self.max_turns = max_turns
        self.time_budget_s = time_budget_s
        self.limits = limits
        self.cap_s = command_timeout_cap_s
        self.default_timeout_s = min(default_command_timeout_s, command_timeout_cap_s)
        self.verifier_timeout_s = verifier_timeout_s
        self.max_output_chars = max_output_chars
        self.max_context_chars = max_context_chars
        self.owner = owner
        self.clock = clock
        self.user = task.user("agent")
        self.traj = AgentRun(turns=[], reward=None, passed=False, test_results=[],
                               stop_reason="turn_budget", total_seconds=0.0, tokens_in=0,
                               tokens_out=0, model_label=model_label, subject=subject,
                               image_tag=image_tag)
        self.started = clock()
        self.messages: list[dict[str, Any]] = []
        self.observations: list[int] = []  # indices of user messages holding command output
        self.cwd = "/"

    # -- budget

    def remaining(self) -> float:
        return self.time_budget_s - (self.clock() - self.started)

    # -- the agent phase

    def agent(self, sb: de.Sandbox, workdir: str | None) -> None:
        self.cwd = workdir or "/"
        system = SYSTEM_PROMPT.format(default_timeout=self.default_timeout_s, cap=self.cap_s)
        first = INITIAL.format(instruction=self.task.read("instruction.md").strip(),
                               cwd=self.cwd, max_turns=self.max_turns,
                               budget=format_duration(self.time_budget_s))
        self.messages = [{"role": "system", "content": system},
                         {"role": "user", "content": first}]
        confirming = False
        for n in range(1, self.max_turns + 1):
            if self.remaining() <= 0:
                raise _Stop("time_budget")
            turn, answer = self.ask(n)
            self.traj.turns.append(turn)
            if answer is None:
                confirming = False  # a reply we could not read confirms nothing
                self.emit(turn)
                continue
            outputs = self.run_commands(sb, turn, answer)
            self.emit(turn)
            if answer.task_complete and confirming:
                raise _Stop("completed")
            parts = [outputs] if outputs else ["(no commands ran)"]
            if answer.task_complete:
                parts.append(CONFIRM)
            left = self.remaining()
            parts.append(f"[turn {n} of {self.max_turns} done; about "
                         f"{format_duration(max(left, 0))} left]")
            self.messages.append({"role": "assistant", "content": turn.model_text})
            self.messages.append({"role": "user", "content": "\n\n".join(parts)})
            self.observations.append(len(self.messages) - 1)
            self.trim_context()
            confirming = answer.task_complete
        raise _Stop("turn_budget")

    def emit(self, turn: Turn) -> None:
        # The caller stores the turn as it happens (a live transcript) and may stop the rollout
        # by raising; whatever it raises leaves run_rollout after the sandbox is removed.
        if self.on_turn is not None:
            self.on_turn(turn)

    def ask(self, n: int) -> tuple[Turn, TurnAnswer | None]:
        t0 = self.clock()
        try:
            result = self.llm.complete(stage=self.stage, subject=f"{self.subject}:turn{n}",
                                       prompt_version=self.prompt_version,
                                       messages=[dict(m) for m in self.messages],
                                       schema=TurnAnswer)
        except InvalidOutput as exc:
            # Not fatal: the model gets to see what was wrong, as any other observation.
            seconds = self.clock() - t0
            tin, tout = _tokens_of(exc.record)
            problem = exc.validation_error or str(exc)
            turn = Turn(index=n, analysis="", plan="", commands=[], model_text=exc.raw_text,
                        tokens_in=tin, tokens_out=tout, seconds=seconds, state="none",
                        parse_error=problem, llm_seconds=seconds)
            self.add_tokens(turn)
            self.messages.append({"role": "assistant", "content": exc.raw_text or "(empty)"})
            self.messages.append({"role": "user", "content": PARSE_ERROR.format(problem=problem)})
            self.observations.append(len(self.messages) - 1)
            return turn, None
        except PermanentLLMError as exc:
            raise _Stop("model_error", f"{type(exc).__name__}: {exc}") from exc
        except LLMError as exc:
            # Transient after the client's own retries: the turn is lost either way, and
            # grading what exists beats throwing the trajectory away.
            raise _Stop("model_error", f"{type(exc).__name__} (transient): {exc}") from exc
        seconds = self.clock() - t0
        record = getattr(result, "record", None)
        answer: TurnAnswer = result.parsed
        text = getattr(record, "response_text", "") or answer.model_dump_json()
        tin, tout = _tokens_of(record)
        turn = Turn(index=n, analysis=answer.analysis, plan=answer.plan, commands=[],
                    model_text=text, tokens_in=tin, tokens_out=tout, seconds=seconds,
                    state="none", task_complete=answer.task_complete, llm_seconds=seconds)
        self.add_tokens(turn)
        return turn, answer

    def add_tokens(self, turn: Turn) -> None:
        self.traj.tokens_in += turn.tokens_in
        self.traj.tokens_out += turn.tokens_out

    def run_commands(self, sb: de.Sandbox, turn: Turn, answer: TurnAnswer) -> str:
        shown: list[str] = []
        try:
            for spec in answer.commands:
                run = self.run_one(sb, spec)
                turn.commands.append(run)
                shown.append(self.describe(run))
                if sb.gone_reason:
                    raise _Stop("sandbox_killed", sb.gone_reason)
        finally:
            turn.seconds += sum(c.seconds for c in turn.commands)
            turn.state = turn_state([c.kind for c in turn.commands if not c.skipped])
        return "\n\n".join(shown)

    def run_one(self, sb: de.Sandbox, spec: TurnCommand) -> CommandRun:
        text = spec.text
        command = text.rstrip("\n")
        run = CommandRun(command=command, output="", exit_code=None, seconds=0.0,
                         timed_out=False, kind=classify_command(command),
                         programs=command_programs(command))
        if not command.strip():
            run.skipped = "empty command"
            return run
        if _CONTROL_KEYS.match(command.strip()):
            run.skipped = "control keys need an interactive terminal, which this is not"
            return run
        remaining = self.remaining()
        if remaining < 1:
            run.skipped = "the time budget is used up"
            return run
        requested = spec.timeout_s if spec.timeout_s and spec.timeout_s > 0 \
            else self.default_timeout_s
        run.timeout_s = max(1.0, min(requested, self.cap_s, remaining))
        try:
            result = sb.exec(_wrap(command, self.cwd), timeout_s=run.timeout_s,
                             user=self.user)
        except de.SandboxGone as exc:
            raise _Stop("sandbox_killed", sb.gone_reason or str(exc)) from exc
        output, cwd = _split_cwd(result.output)
        if cwd:
            self.cwd = cwd
        run.output = v.cap_text(output, self.max_output_chars)
        run.exit_code = result.exit_code
        run.seconds = result.seconds
        run.timed_out = result.timed_out
        run.killed_by = result.killed_by
        return run

    def describe(self, run: CommandRun) -> str:
        head = f"$ {run.command}"
        if run.skipped:
            return f"{head}\n[not run: {run.skipped}]"
        body = run.output.rstrip("\n")
        if run.timed_out:
            status = f"[killed after {run.timeout_s:g} s: timeout]"
        elif run.killed_by:
            status = f"[killed: {run.killed_by} limit]"
        else:
            status = f"[exit code {run.exit_code}, {run.seconds:.1f} s]"
        return f"{head}\n{body}\n{status}" if body else f"{head}\n{status}"

    def trim_context(self) -> None:
        # Oldest outputs go first; the instruction and the model's own replies stay, so it
        # still knows what it did, just not everything it saw.
        total = sum(len(str(m["content"])) for m in self.messages)
        for idx in self.observations:
            if total <= self.max_context_chars:
                break
            content = self.messages[idx]["content"]
            if content.startswith("[facet: output dropped"):
                continue
            note = "[facet: output dropped to keep the conversation short]"
            total -= len(content) - len(note)
            self.messages[idx] = {"role": "user", "content": note}

    # -- grading

    def grade(self, sb: de.Sandbox, workdir: str | None) -> None:
        t0 = self.clock()
        logs = " ".join(v.LOG_DIRS)
        # Only the verifier may write the reward, and /tests is ours: whatever the agent put in
        # either place is noted and removed (a planted conftest.py would run with the tests).
        prep = sb.exec(f"[ -e /tests ] && echo /tests; rm -rf /tests; mkdir -p {logs}; "
                       f"find {v.VERIFIER_LOGS} -mindepth 1 -print -delete; chmod 777 {logs}",
                       timeout_s=60, user="0")
        self.traj.tampering = [line for line in prep.output.splitlines() if line.strip()]
        sb.put_files({"/tests": self.task.dir / "tests"})
        result = sb.exec(["bash", "/tests/test.sh"], timeout_s=self.verifier_timeout_s,
                         workdir=workdir, env=self.task.env("verifier") or None,
                         user=self.task.user("verifier"))
        self.traj.verifier_exit_code = result.exit_code
        self.traj.verifier_output = v.cap_text(result.output, 16 * de.KiB)
        if result.timed_out:
            self.traj.error = f"test.sh did not finish within {self.verifier_timeout_s:g} s"
        out = verifier_output.read_verifier_output(v.read_verifier_logs(sb))
        self.traj.reward, self.traj.rewards = out.reward, out.rewards
        if out.problem and not self.traj.error:
            self.traj.error = out.problem
        self.traj.passed = out.reward is not None and out.reward >= 1.0
        for exc in out.report_errors:
            log.info("rollout %s: %s unreadable: %s", self.subject, exc.file, exc.message)
        self.traj.test_results, self.traj.test_results_source = out.test_dicts, out.tests_source
        self.traj.verifier_seconds = self.clock() - t0


def run_rollout(
    client: docker.DockerClient,
    *,
    image_tag: str,
    task_dir: Path,
    llm: Any,
    model_label: str,
    subject: str,
    max_turns: int = 30,
    time_budget_s: float = 1800,
    limits: de.SandboxLimits = v.DEFAULT_LIMITS,
    command_timeout_cap_s: float = 120,
    default_command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S,
    verifier_timeout_cap_s: float = 600,
    max_output_chars: int = 10_000,
    max_context_chars: int = 200_000,
    owner: str | None = None,
    stage: str = STAGE,
    prompt_version: str = PROMPT_VERSION,
    clock: Callable[[], float] = time.monotonic,
    on_turn: Callable[[Turn], None] | None = None,
) -> AgentRun:
    """Run one agent attempt on the task in task_dir (environment already built as image_tag)
    and grade it with the task's verifier. See the module docstring for the loop.

    llm: an LLMClient, or anything with the same `.complete(stage=, subject=, prompt_version=,
    messages=, schema=)` returning an object with `.parsed` (a TurnAnswer) and `.record` (a
    CallRecord, for the reply text and tokens). subject: unique per attempt; turn n calls the
    model with subject f"{subject}:turn{n}".

    time_budget_s bounds the agent phase (model calls and commands; each command's timeout is
    cut to what is left), lowered to task.toml's [agent] timeout_sec when that is smaller.
    The verifier runs afterwards with task.toml's [verifier] timeout_sec, capped.

    Never raises for what the model or the task does; engine trouble ends the rollout with
    stop_reason "infra_error" and reward None (retry it), and a sandbox that the agent's
    commands got killed (disk limit, a command that would not die) with "sandbox_killed" and
    reward 0, as Harbor scores a trial whose verifier could not run.

    on_turn, if given, is called with each Turn once its commands ran (or its reply failed to
    parse), before the next model call: a caller can store the transcript as it grows. An
    exception it raises ends the rollout without grading and propagates, after the sandbox is
    removed (a cancelled batch stops its trajectories that way).
    """
    started = clock()
    task = v.TaskFiles(Path(task_dir))
    agent_timeout = task.timeout("agent")
    if agent_timeout is not None:
        time_budget_s = min(time_budget_s, agent_timeout)
    verifier_timeout = min(task.timeout("verifier") or verifier_timeout_cap_s,
                           verifier_timeout_cap_s)
    base_owner = owner or f"{socket.gethostname()}:{os.getpid()}"
    # Its own owner label, so the final cleanup touches no one else's sandboxes.
    run_owner = f"{base_owner}:rollout:{uuid.uuid4().hex[:12]}"
    ro = _Rollout(client, image_tag=image_tag, task=task, llm=llm, model_label=model_label,
                  subject=subject, max_turns=max_turns, time_budget_s=time_budget_s,
                  limits=limits, command_timeout_cap_s=command_timeout_cap_s,
                  default_command_timeout_s=default_command_timeout_s,
                  verifier_timeout_s=verifier_timeout, max_output_chars=max_output_chars,
                  max_context_chars=max_context_chars, owner=run_owner, stage=stage,
                  prompt_version=prompt_version, clock=clock, on_turn=on_turn)
    traj = ro.traj
    try:
        workdir = _workdir(client, task, image_tag)
        with de.Sandbox(client, image_tag, owner=run_owner, limits=v.task_limits(task, limits),
                        environment=task.env("environment"),
                        labels={"facet.rollout": subject[:128]}) as sb:
            prep = sb.exec(f"mkdir -p {' '.join(v.LOG_DIRS)} && chmod 777 "
                           f"{' '.join(v.LOG_DIRS)}", timeout_s=30, user="0")
            if not prep.ok:
                raise de.PermanentEngineError(f"could not create /logs: {prep.output[-300:]}")
            ro.started = clock()
            try:
                ro.agent(sb, workdir)
            except _Stop as stop:
                traj.stop_reason = stop.reason  # type: ignore[assignment]
                traj.error = stop.error
            traj.agent_seconds = clock() - ro.started
            if traj.stop_reason == "sandbox_killed":
                traj.reward, traj.passed = 0.0, False
            else:
                ro.grade(sb, workdir)
    except de.SandboxGone as exc:
        if not traj.turns:
            # Before the agent ran anything: not the agent's doing.
            traj.stop_reason = "infra_error"
            traj.error = f"SandboxGone: {exc}"
        else:
            # test.sh (or something the agent left running) got the sandbox killed while
            # grading: no reward, which Harbor's metrics count as 0.
            traj.error = traj.error or f"the sandbox was killed while grading: {exc}"
        traj.reward, traj.passed = None, False
    except de.DockerEngineError as exc:
        traj.stop_reason = "infra_error"
        traj.error = f"{type(exc).__name__}: {exc}"
        traj.reward, traj.passed, traj.test_results = None, False, []
    finally:
        try:
            de.cleanup_leftovers(client, owner=run_owner)
        except de.DockerEngineError as exc:
            log.warning("could not remove the sandboxes of %s: %s", run_owner, exc)
    traj.total_seconds = clock() - started
    return traj
