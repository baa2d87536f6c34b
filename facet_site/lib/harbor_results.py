"""Harbor job directories as facet imports them: the trials with their results, where each
trial's task came from, the agent's turns from its logs, and Harbor's task checksum.
Django-free; builds on harbor.py's per-trial result reading (harbor-format.md §4.4).

    jobs/<job>/                   config.json (JobConfig), result.json (JobResult, aggregates only)
    jobs/<job>/<trial>/           result.json (TrialResult: authoritative), config.json,
                                  agent/ (trajectory.json, episode-N/...), verifier/ (reward,
                                  test-stdout.txt, junit/ctrf reports), exception.txt

What is an error and what is not:

* a trial without result.json is *incomplete* (Harbor writes it last: the job is still
  running, or was interrupted) and listed as such;
* a result.json that is not JSON, lacks task_name, or has a wrongly typed field is an *error*
  naming the trial, the file and the field (harbor.JobFormatError);
* agent logs are the agent's own business (any agent may run under Harbor): an unreadable
  trajectory.json is a *warning* and the trial simply has no turns.

`task_checksum` reproduces Harbor's `Task.checksum`: dirhash (the "Dirhash Standard", entry
properties name and data, sha256, empty directories left out) over the task directory. Our own
task versions are written deterministically (harbor.task_dir_entries), so the checksum a trial
reports can be compared with each version's without touching the disk.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from facet_site.lib import harbor
from facet_site.lib.rollout import classify_command, command_programs

__all__ = ["ImportedTurn", "JobRead", "TrialRead", "agent_turns", "dirhash", "find_job_dirs",
           "main_program", "read_job", "task_checksum"]

MAX_AGENT_LOG_BYTES = 20 * 1024 * 1024
MAX_TURN_OUTPUT = 20_000

# Shell builtins that only move around or set shell state: "cd /app && cat x" is a cat.
_NAVIGATION = {"cd", "pushd", "popd", "export", "set", "unset", "source", ".", "shopt", "umask",
               "alias", "true", ":"}


# --------------------------------------------------------------------------------------------
# Harbor's task checksum


def dirhash(files: Iterable[tuple[str, bytes]]) -> str:
    """sha256 dirhash of a tree given as (POSIX relative path, bytes) for every file.

    Per the Dirhash Standard (andhus/dirhash 0.5, Harbor's dependency): a file's entry is
    "data:<sha256 of its bytes>\\0name:<name>", a directory's "dirhash:<its dirhash>\\0name:<name>"
    (each sorted by property string), a directory's dirhash the sha256 of its entries, sorted,
    joined with "\\0\\0". Directories without files do not count."""
    tree: dict[str, Any] = {}
    for path, data in files:
        node = tree
        parts = path.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = hashlib.sha256(data).hexdigest()

    def digest(node: dict) -> str | None:
        entries = []
        for name, value in node.items():
            if isinstance(value, dict):
                sub = digest(value)
                if sub is None:
                    continue
                props = [f"dirhash:{sub}", f"name:{name}"]
            else:
                props = [f"data:{value}", f"name:{name}"]
            entries.append("\000".join(sorted(props)))
        if not entries:
            return None
        return hashlib.sha256("\000\000".join(sorted(entries)).encode("utf-8")).hexdigest()

    return digest(tree) or hashlib.sha256(b"").hexdigest()


def task_checksum(bundle: harbor.TaskBundle) -> str:
    """The task_checksum Harbor records for `bundle` written by harbor.write_task_dir."""
    return dirhash((path, data) for path, data, _mode in harbor.task_dir_entries(bundle) if data is not None)


# --------------------------------------------------------------------------------------------
# Agent logs -> turns


@dataclass
class ImportedTurn:
    index: int  # from 1
    analysis: str = ""
    plan: str = ""
    commands: list[str] = field(default_factory=list)
    output: str = ""
    task_complete: bool = False
    tokens_in: int = 0
    tokens_out: int = 0


def main_program(command: str) -> str:
    """The program a command line is about: the first one that is not cd, export and the like
    ("cd /app && cat x" -> "cat"); "" when it does not parse."""
    programs = command_programs(command)
    for prog in programs:
        if prog not in _NAVIGATION:
            return prog
    return programs[0] if programs else ""


def command_record(command: str, **extra: Any) -> dict:
    """How one command is stored in Turn.commands: the text, its main program and its kind
    (observation | action), which the command-pattern statistics group by in SQL."""
    return {"command": command, "program": main_program(command)[:60], "kind": classify_command(command), **extra}


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


# --------------------------------------------------------------------------------------------
# Job directories


@dataclass
class TrialRead:
    name: str  # the trial directory's name
    path: Path
    result: harbor.TrialResult
    task_path: str | None  # where Harbor read the task from (result.task_id / config.task)
    turns: list[ImportedTurn]
    turns_source: str
    agent_seconds: float | None
    verifier_seconds: float | None
    seconds: float | None


@dataclass
class JobRead:
    path: Path
    name: str
    job_id: str  # JobResult.id, else the directory name: what makes a re-import recognisable
    trials: list[TrialRead] = field(default_factory=list)
    errors: list[harbor.JobFormatError] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)  # trial directories without result.json
    warnings: list[str] = field(default_factory=list)
    finished: bool | None = None  # the job's own result.json has finished_at (None: no such file)


def _json_file(path: Path) -> Any:
    if path.is_symlink() or not path.is_file() or path.stat().st_size > harbor.MAX_REPORT_BYTES:
        return None
    try:
        return json.loads(path.read_bytes())
    except ValueError:
        return None


def _seconds(block: Any) -> float | None:
    if not isinstance(block, dict):
        return None
    try:
        start, end = block.get("started_at"), block.get("finished_at")
        if isinstance(start, str) and isinstance(end, str):
            return max(0.0, (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())
    except ValueError:
        return None
    return None


def _task_path(raw: dict) -> str | None:
    for holder in (raw.get("task_id"), (raw.get("config") or {}).get("task") if isinstance(raw.get("config"), dict)
                   else None):
        if isinstance(holder, dict) and isinstance(holder.get("path"), str) and holder["path"]:
            return holder["path"]
    return None


def _is_job_dir_itself(path: Path) -> bool:
    # A job's own files: config.json names the job, result.json has the aggregates.
    config = _json_file(path / "config.json")
    if isinstance(config, dict) and "job_name" in config:
        return True
    result = _json_file(path / "result.json")
    return isinstance(result, dict) and ("n_total_trials" in result or "stats" in result)


def _is_trial_dir(path: Path) -> bool:
    if path.is_symlink() or not path.is_dir() or _is_job_dir_itself(path):
        return False
    if (path / "result.json").is_file() or (path / "trial.log").is_file():
        return True
    config = _json_file(path / "config.json")
    return isinstance(config, dict) and "task" in config


def find_job_dirs(root: Path, *, depth: int = 3) -> list[Path]:
    """The job directories at or below `root` (a job directory, a jobs/ directory holding several,
    or an unpacked archive with either inside), nearest first."""
    root = Path(root)
    if not root.is_dir() or root.is_symlink():
        return []
    children = [c for c in sorted(root.iterdir()) if not c.name.startswith(".") and c.is_dir() and not c.is_symlink()]
    if any(_is_trial_dir(c) for c in children):
        return [root]
    if depth <= 0:
        return []
    found: list[Path] = []
    for child in children:
        found.extend(find_job_dirs(child, depth=depth - 1))
    return found


def read_job(path: Path) -> JobRead:
    """Every trial of one job directory. Never raises for what is in the directory."""
    path = Path(path)
    job_result = _json_file(path / "result.json")
    job_config = _json_file(path / "config.json")
    job_id = ""
    finished = None
    if isinstance(job_result, dict):
        job_id = str(job_result.get("id") or "")
        finished = bool(job_result.get("finished_at"))
    name = path.name
    if isinstance(job_config, dict) and isinstance(job_config.get("job_name"), str) and job_config["job_name"]:
        name = job_config["job_name"]
    job = JobRead(path=path, name=name, job_id=job_id or name, finished=finished)
    if not path.is_dir():
        job.errors.append(harbor.JobFormatError(path.name, ".", "not a directory"))
        return job
    for tdir in sorted(path.iterdir(), key=lambda p: p.name):
        if tdir.name.startswith(".") or tdir.is_symlink() or not tdir.is_dir():
            continue
        rpath = tdir / "result.json"
        if not rpath.exists():
            job.incomplete.append(tdir.name)
            continue
        before = len(job.errors)
        try:
            # harbor's own reader of one trial: it records what is wrong and returns None for a
            # trial it cannot use at all.
            result = harbor._read_trial(tdir, job.errors)  # noqa: SLF001
        except OSError as exc:
            job.errors.append(harbor.JobFormatError(tdir.name, ".", f"unreadable: {exc}"))
            continue
        if result is None or len(job.errors) > before:
            continue
        raw = _json_file(rpath) or {}
        turns, source, warnings = agent_turns(tdir / "agent")
        job.warnings.extend(f"{tdir.name}/{w}" for w in warnings)
        job.trials.append(TrialRead(
            name=tdir.name, path=tdir, result=result, task_path=_task_path(raw), turns=turns, turns_source=source,
            agent_seconds=_seconds(raw.get("agent_execution")), verifier_seconds=_seconds(raw.get("verifier")),
            seconds=_seconds(raw)))
    return job
