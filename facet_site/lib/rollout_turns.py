"""What a rollout's model answers and what is kept of each turn, and the texts the model is sent,
Django-free. `facet_site.lib.rollout` runs the loop and re-exports everything here.

`TurnAnswer` is the one JSON object the model returns per turn (analysis, plan, commands,
task_complete); `Turn`, `CommandRun` and `AgentRun` are the transcript a rollout returns and
tasks/ stores. The prompt texts are versioned by PROMPT_VERSION: change it when they change, so a
stored trajectory says which wording its model saw.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from facet_site.lib.shell_commands import TurnState

STAGE = "rollout.turn"
PROMPT_VERSION = "rollout-terminus-v1"

StopReason = Literal["completed", "turn_budget", "time_budget", "model_error", "infra_error",
                     "sandbox_killed"]

DEFAULT_COMMAND_TIMEOUT_S = 30.0

# ============================================================================================
# What the model answers


class TurnCommand(BaseModel):
    """One command. `keystrokes` is Terminus-2's name, `command` the plain one; either works."""

    model_config = ConfigDict(extra="ignore")

    keystrokes: str | None = None
    command: str | None = None
    timeout_s: float | None = Field(default=None, description="seconds before it is killed")

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        # Terminus-2 calls the wait "duration"; models trained on it will keep using that.
        if isinstance(data, dict) and data.get("timeout_s") is None:
            for alias in ("duration", "timeout", "timeout_sec"):
                if isinstance(data.get(alias), (int, float)):
                    data = {**data, "timeout_s": data[alias]}
                    break
        return data

    @model_validator(mode="after")
    def _one_text(self) -> TurnCommand:
        if self.keystrokes is None and self.command is None:
            raise ValueError('each command needs "keystrokes" or "command"')
        return self

    @property
    def text(self) -> str:
        return self.command if self.command is not None else (self.keystrokes or "")


class TurnAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    analysis: str = ""
    plan: str = ""
    commands: list[TurnCommand] = Field(default_factory=list)
    task_complete: bool = False


# ============================================================================================
# What one rollout did


@dataclass
class CommandRun:
    command: str
    output: str  # as the model saw it: head and tail kept, cwd marker removed
    exit_code: int | None  # None: killed, not run, or the sandbox died
    seconds: float
    timed_out: bool
    kind: str = ""  # classify_command(command)
    programs: list[str] = field(default_factory=list)  # command_programs(command)
    timeout_s: float = 0.0  # the timeout it actually ran with
    skipped: str = ""  # why it did not run ("" when it ran)
    killed_by: str = ""  # docker_engine's "", "timeout", "memory", "disk"


@dataclass
class Turn:
    index: int  # from 1, as in the LLM subject
    analysis: str
    plan: str
    commands: list[CommandRun]
    model_text: str
    tokens_in: int
    tokens_out: int
    seconds: float  # model call plus commands
    state: TurnState
    task_complete: bool = False
    parse_error: str = ""  # the reply was not a valid TurnAnswer (even after the re-ask)
    llm_seconds: float = 0.0


@dataclass
class AgentRun:
    """One rollout: the agent's turns and the verifier's verdict on the state they left."""

    turns: list[Turn]
    reward: float | None  # None: the verifier wrote no readable reward, or did not run
    passed: bool  # reward >= 1
    test_results: list[dict]  # {name, outcome, message, seconds} from JUnit XML or CTRF
    stop_reason: StopReason
    total_seconds: float
    tokens_in: int
    tokens_out: int
    model_label: str = ""
    subject: str = ""
    image_tag: str = ""
    error: str = ""  # the model/engine error behind model_error/infra_error/sandbox_killed
    agent_seconds: float = 0.0
    verifier_seconds: float = 0.0
    verifier_exit_code: int | None = None  # informational, as in Harbor
    verifier_output: str = ""  # capped
    rewards: dict = field(default_factory=dict)  # every numeric metric of reward.json
    test_results_source: str | None = None
    # Files the agent left in /logs/verifier (deleted before grading: only the verifier may
    # write the reward), and whether it had created /tests.
    tampering: list[str] = field(default_factory=list)

    @property
    def states(self) -> list[str]:
        return [t.state for t in self.turns]

    def to_dict(self) -> dict:
        return asdict(self)


# ============================================================================================
# Prompt


SYSTEM_PROMPT = """You are an AI agent solving a task in a Linux terminal (Debian, running as \
the container's default user). You work in turns. In each turn you see the output of the \
commands you ran last, and you reply with exactly one JSON object and nothing else:

{{
  "analysis": "what the output so far tells you, and what is still missing",
  "plan": "what you will do next, and why",
  "commands": [
    {{"command": "cat /app/data.csv", "timeout_s": 10}}
  ],
  "task_complete": false
}}

Rules:
- "commands" run one after another, each in a fresh non-interactive bash (stdin is closed, \
there is no terminal). The working directory carries over to the next command; shell \
variables, exports and functions do not, so put dependent steps in one command (use && or a \
script file). Interactive programs (editors, pagers waiting for keys, REPLs) do not work: write \
files with heredocs, printf or a script instead.
- "timeout_s" is how long the command may run (default {default_timeout:g} s, at most \
{cap:g} s); a command still running then is killed. Long output is shortened to its beginning \
and end.
- There is no network access.
- Set "task_complete" to true when the task is done. You will be asked to confirm once; after \
you confirm, the task is graded automatically and you cannot change anything anymore.
- Use an empty "commands" list if you only want to think or to confirm.
"""

INITIAL = """Task:

{instruction}

The current working directory is {cwd}. You have {max_turns} turns and about {budget} of \
time. Begin."""

CONFIRM = """You marked the task as complete. Once you confirm, your solution is graded as it \
is and you cannot make further changes. If you are sure, reply again with "task_complete": true \
(you may leave "commands" empty). Otherwise set it to false and continue."""

PARSE_ERROR = """Your previous reply could not be used, and none of its commands ran:
{problem}

Reply with exactly one JSON object with the keys "analysis", "plan", "commands" (a list of \
{{"command": ..., "timeout_s": ...}}) and "task_complete"."""


def format_duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} minutes" if seconds >= 120 else f"{seconds:.0f} seconds"


def agent_run_json(traj: AgentRun) -> str:
    """An AgentRun as indented JSON (what a rollout's log file holds)."""
    return json.dumps(traj.to_dict(), indent=2, default=str)
