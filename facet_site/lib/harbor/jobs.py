"""Harbor job directories as facet imports them: finding them, and reading every trial's
result.json (Harbor's TrialResult), verifier output (through verifier_output) and agent turns
(through agent_logs), with where each trial's task came from. Django-free (harbor-format.md §4.4).

    jobs/<job>/                   config.json (JobConfig), result.json (JobResult, aggregates only)
    jobs/<job>/<trial>/           result.json (TrialResult: authoritative), config.json,
                                  agent/ (trajectory.json, episode-N/...), verifier/ (reward,
                                  test-stdout.txt, junit/ctrf reports), exception.txt

What is an error and what is not:

* a trial without result.json is *incomplete* (Harbor writes it last: the job is still
  running, or was interrupted) and listed as such;
* a result.json that is not JSON, lacks task_name, or has a wrongly typed field is an *error*
  naming the trial, the file and the field (JobFormatError), and the trial is not imported;
  so is an unreadable or unsafe test report in verifier/;
* agent logs are the agent's own business (any agent may run under Harbor): an unreadable
  trajectory.json is a *warning* and the trial simply has no turns.

`reward` is None when verifier_result is null (Harbor counts that as 0: see
HarborTrialResult.effective_reward).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from facet_site.lib.harbor.agent_logs import ImportedTurn, agent_turns
from facet_site.lib.verifier_output import (MAX_REPORT_BYTES, TestCase, finite_number, read_verifier_output,
                                            reward_of)

# Verifier logs can be huge (a runaway test printing forever); we only keep a bounded prefix. Reports
# are bounded by verifier_output.MAX_REPORT_BYTES, agent logs by MAX_AGENT_LOG_BYTES (agent_logs.py).
MAX_LOG_BYTES = 5 * 1024 * 1024


class JobFormatError(ValueError):
    """A problem with one trial of a Harbor job directory (`trial` is its directory name)."""

    def __init__(self, trial: str, file: str, message: str, *, field: str | None = None):
        self.trial = trial
        self.file = file
        self.field = field
        self.message = message
        super().__init__(f"{trial}/{file}: {message}")


@dataclass
class HarborTrialResult:
    """One trial's result.json (Harbor's TrialResult) with its verifier's stdout and test report."""

    task_name: str
    task_checksum: str | None
    trial_name: str
    agent_name: str | None
    agent_version: str | None
    model: str | None
    reward: float | None
    exception: str | None
    tokens_in: int | None
    tokens_out: int | None
    cost: float | None
    started_at: datetime | None
    finished_at: datetime | None
    verifier_stdout: str | None
    test_results: list[TestCase] = field(default_factory=list)
    rewards: dict[str, float] = field(default_factory=dict)
    exception_message: str | None = None

    @property
    def effective_reward(self) -> float:
        """Harbor's job metrics count a trial without a verifier result as reward 0 (§3.4, §4.4)."""
        return self.reward if self.reward is not None else 0.0



# --------------------------------------------------------------------------------------------------
# One trial
# --------------------------------------------------------------------------------------------------


def _parse_time(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"expected an ISO timestamp, got {value!r}")
    return datetime.fromisoformat(value)


def _read_capped(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(MAX_LOG_BYTES)


def _verifier_logs(vdir: Path, trial: str, errors: list[JobFormatError]) -> dict[str, bytes]:
    logs: dict[str, bytes] = {}
    if not vdir.is_dir() or vdir.is_symlink():
        return logs
    for p in sorted(vdir.iterdir()):
        # Only regular files directly in verifier/: a trial dir is untrusted and links could point anywhere.
        if p.is_symlink() or not p.is_file():
            continue
        if p.suffix in (".xml", ".json") and p.stat().st_size > MAX_REPORT_BYTES:
            errors.append(JobFormatError(trial, f"verifier/{p.name}", f"over {MAX_REPORT_BYTES} bytes; not read"))
            continue
        logs[p.name] = p.read_bytes() if p.suffix in (".xml", ".json") else _read_capped(p)
    return logs


def read_trial_result(tdir: Path, errors: list[JobFormatError]) -> HarborTrialResult | None:
    """One trial directory's result.json and verifier/ files. What is wrong is appended to `errors`:
    None for a trial that cannot be used at all, a wrongly typed field is left None."""
    trial = tdir.name
    rpath = tdir / "result.json"
    if rpath.is_symlink() or not rpath.is_file():
        errors.append(JobFormatError(trial, "result.json", "missing (trial did not finish or was interrupted)"))
        return None
    if rpath.stat().st_size > MAX_REPORT_BYTES:
        errors.append(JobFormatError(trial, "result.json", f"over {MAX_REPORT_BYTES} bytes; not read"))
        return None
    try:
        data = json.loads(rpath.read_bytes())
    except ValueError as exc:
        errors.append(JobFormatError(trial, "result.json", f"invalid JSON (truncated write?): {exc}"))
        return None
    if not isinstance(data, dict):
        errors.append(JobFormatError(trial, "result.json", "must be a JSON object"))
        return None
    task_name = data.get("task_name")
    if not isinstance(task_name, str) or not task_name:
        errors.append(JobFormatError(trial, "result.json", "task_name is missing or not a string", field="task_name"))
        return None

    def bad(field_: str, message: str) -> None:
        errors.append(JobFormatError(trial, "result.json", f"{field_}: {message}", field=field_))

    def obj(value: Any, field_: str) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            bad(field_, f"must be an object, got {type(value).__name__}")
            return {}
        return value

    def typed(container: dict, key: str, field_: str, kinds: tuple, convert=None):
        value = container.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, kinds):
            bad(field_, f"unexpected value {value!r}")
            return None
        return convert(value) if convert else value

    trial_name = data.get("trial_name") if isinstance(data.get("trial_name"), str) else trial
    checksum = typed(data, "task_checksum", "task_checksum", (str,))
    agent_info = obj(data.get("agent_info"), "agent_info")
    model_info = obj(agent_info.get("model_info"), "agent_info.model_info")
    model = typed(model_info, "name", "agent_info.model_info.name", (str,))
    provider = typed(model_info, "provider", "agent_info.model_info.provider", (str,))
    if model and provider and not model.startswith(provider + "/"):
        model = f"{provider}/{model}"
    agent_result = obj(data.get("agent_result"), "agent_result")
    verifier_result = obj(data.get("verifier_result"), "verifier_result")
    exc_info = obj(data.get("exception_info"), "exception_info")

    rewards: dict[str, float] = {}
    raw_rewards = verifier_result.get("rewards")
    if raw_rewards is not None:
        if isinstance(raw_rewards, dict):
            for k, v in raw_rewards.items():
                num = finite_number(v)
                if num is None:
                    bad(f"verifier_result.rewards.{k}", f"not a number: {v!r}")
                else:
                    rewards[str(k)] = num
        else:
            bad("verifier_result.rewards", "must be an object")
    reward = reward_of(rewards)

    times = {}
    for key in ("started_at", "finished_at"):
        try:
            times[key] = _parse_time(data.get(key))
        except ValueError as exc:
            bad(key, str(exc))
            times[key] = None

    logs = _verifier_logs(tdir / "verifier", trial, errors)
    stdout = logs.get("test-stdout.txt")
    if "test-stderr.txt" in logs:  # older Harbor split stderr out (§4.4)
        stdout = (stdout or b"") + b"\n--- stderr ---\n" + logs["test-stderr.txt"]
    # result.json's verifier_result is authoritative for the reward; the files give the tests.
    reports = read_verifier_output({k: v for k, v in logs.items() if k.endswith((".xml", ".json"))})
    for exc in reports.report_errors:
        errors.append(JobFormatError(trial, f"verifier/{exc.file}", exc.message))

    return HarborTrialResult(
        task_name=task_name,
        task_checksum=checksum,
        trial_name=trial_name,
        agent_name=typed(agent_info, "name", "agent_info.name", (str,)),
        agent_version=typed(agent_info, "version", "agent_info.version", (str,)),
        model=model,
        reward=reward,
        exception=typed(exc_info, "exception_type", "exception_info.exception_type", (str,)),
        exception_message=typed(exc_info, "exception_message", "exception_info.exception_message", (str,)),
        tokens_in=typed(agent_result, "n_input_tokens", "agent_result.n_input_tokens", (int,)),
        tokens_out=typed(agent_result, "n_output_tokens", "agent_result.n_output_tokens", (int,)),
        cost=typed(agent_result, "cost_usd", "agent_result.cost_usd", (int, float), float),
        started_at=times["started_at"],
        finished_at=times["finished_at"],
        verifier_stdout=None if stdout is None else stdout.decode("utf-8", "replace"),
        test_results=reports.tests,
        rewards=rewards,
    )


# --------------------------------------------------------------------------------------------------
# Job directories
# --------------------------------------------------------------------------------------------------


@dataclass
class TrialRead:
    """A trial as facet imports it: Harbor's result, where the task came from, the agent's turns."""

    name: str  # the trial directory's name
    path: Path
    result: HarborTrialResult
    task_path: str | None  # where Harbor read the task from (result.task_id / config.task)
    turns: list[ImportedTurn]
    turns_source: str
    agent_seconds: float | None
    verifier_seconds: float | None
    seconds: float | None


@dataclass
class JobRead:
    """Every usable trial of one job directory, with what was wrong with the others."""

    path: Path
    name: str
    job_id: str  # JobResult.id, else the directory name: what makes a re-import recognisable
    trials: list[TrialRead] = field(default_factory=list)
    errors: list[JobFormatError] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)  # trial directories without result.json
    warnings: list[str] = field(default_factory=list)
    finished: bool | None = None  # the job's own result.json has finished_at (None: no such file)


def _json_file(path: Path) -> Any:
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_REPORT_BYTES:
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
        job.errors.append(JobFormatError(path.name, ".", "not a directory"))
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
            result = read_trial_result(tdir, job.errors)
        except OSError as exc:
            job.errors.append(JobFormatError(tdir.name, ".", f"unreadable: {exc}"))
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
