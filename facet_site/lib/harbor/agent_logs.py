"""An agent's turns read back from a Harbor trial's agent/ logs: an ATIF trajectory.json (current
Harbor agents, Terminus-2 included) or Terminus-2's older episode-N/ directories. Django-free.
Agent logs are the agent's own business, so nothing here raises for what a log contains.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_AGENT_LOG_BYTES = 20 * 1024 * 1024
MAX_TURN_OUTPUT = 20_000


@dataclass
class ImportedTurn:
    """One model turn read back from an agent's logs."""

    index: int  # from 1
    analysis: str = ""
    plan: str = ""
    commands: list[str] = field(default_factory=list)
    output: str = ""
    task_complete: bool = False
    tokens_in: int = 0
    tokens_out: int = 0


def _terminus_answer(text: str) -> dict:
    """The JSON object in a Terminus-2 reply (analysis, plan, commands, task_complete), or {}."""
    text = (text or "").strip()
    if not text:
        return {}
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
    candidates = [fenced.group(1)] if fenced else []
    start, end = text.find("{"), text.rfind("}")
    if start >= 0 and end > start:
        candidates.append(text[start:end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _keystrokes(arguments: Any) -> str | None:
    if not isinstance(arguments, dict):
        return None
    for key in ("keystrokes", "command", "cmd"):
        if isinstance(arguments.get(key), str):
            return arguments[key].rstrip("\n")
    return None


def _atif_turns(data: Any, file: str) -> list[ImportedTurn]:
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise ValueError(f"{file}: not an ATIF trajectory (steps must be a list)")
    turns: list[ImportedTurn] = []
    for step in data["steps"]:
        if not isinstance(step, dict) or step.get("source") != "agent":
            continue
        message = _str(step.get("message"))
        answer = _terminus_answer(message)
        turn = ImportedTurn(index=len(turns) + 1, analysis=_str(answer.get("analysis")) or
                            (message if not answer else ""), plan=_str(answer.get("plan")),
                            task_complete=answer.get("task_complete") is True)
        for call in step.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            if call.get("function_name") == "mark_task_complete":
                turn.task_complete = True
                continue
            text = _keystrokes(call.get("arguments"))
            if text is not None:
                turn.commands.append(text)
        if not step.get("tool_calls") and isinstance(answer.get("commands"), list):
            turn.commands = [t for c in answer["commands"] if (t := _keystrokes(c)) is not None]
        observation = step.get("observation") if isinstance(step.get("observation"), dict) else {}
        results = observation.get("results") if isinstance(observation.get("results"), list) else []
        turn.output = "\n".join(_str(r.get("content")) for r in results if isinstance(r, dict))[:MAX_TURN_OUTPUT]
        metrics = step.get("metrics") if isinstance(step.get("metrics"), dict) else {}
        turn.tokens_in, turn.tokens_out = _int(metrics.get("prompt_tokens")), _int(metrics.get("completion_tokens"))
        turns.append(turn)
    return turns


def _episode_number(path: Path) -> int:
    m = re.match(r"episode-(\d+)$", path.name)
    return int(m.group(1)) if m else -1


def _episode_turns(agent_dir: Path) -> list[ImportedTurn]:
    """Older Terminus-2 logs: agent/episode-N/response.txt is the reply of turn N+1, and the next
    episode's prompt.txt is the terminal output that reply produced."""
    episodes = sorted((p for p in agent_dir.iterdir() if p.is_dir() and not p.is_symlink()
                       and _episode_number(p) >= 0), key=_episode_number)
    turns: list[ImportedTurn] = []
    for i, ep in enumerate(episodes):
        response = ep / "response.txt"
        if response.is_symlink() or not response.is_file():
            continue
        answer = _terminus_answer(_read(response))
        commands = answer.get("commands") if isinstance(answer.get("commands"), list) else []
        turn = ImportedTurn(index=len(turns) + 1, analysis=_str(answer.get("analysis")),
                            plan=_str(answer.get("plan")), task_complete=answer.get("task_complete") is True,
                            commands=[t for c in commands if (t := _keystrokes(c)) is not None])
        if i + 1 < len(episodes):
            prompt = episodes[i + 1] / "prompt.txt"
            if prompt.is_file() and not prompt.is_symlink():
                turn.output = _read(prompt)[:MAX_TURN_OUTPUT]
        turns.append(turn)
    return turns


def _read(path: Path) -> str:
    with open(path, "rb") as fh:
        return fh.read(MAX_AGENT_LOG_BYTES).decode("utf-8", "replace")


def agent_turns(agent_dir: Path) -> tuple[list[ImportedTurn], str, list[str]]:
    """(turns, the log they came from, warnings) from a trial's agent/ directory: an ATIF
    trajectory.json (current Harbor agents, Terminus-2 included) or Terminus-2's older
    episode-N/ directories. No log in either form gives no turns and no warning."""
    agent_dir = Path(agent_dir)
    if not agent_dir.is_dir() or agent_dir.is_symlink():
        return [], "", []
    atif = agent_dir / "trajectory.json"
    if atif.is_file() and not atif.is_symlink():
        rel = "agent/trajectory.json"
        if atif.stat().st_size > MAX_AGENT_LOG_BYTES:
            return [], "", [f"{rel}: over {MAX_AGENT_LOG_BYTES} bytes; not read"]
        try:
            return _atif_turns(json.loads(atif.read_bytes()), rel), rel, []
        except ValueError as exc:
            return [], "", [f"{rel}: {exc}" if rel in str(exc) else f"{rel}: invalid JSON: {exc}"]
    turns = _episode_turns(agent_dir)
    return turns, ("agent/episode-*/response.txt" if turns else ""), []
