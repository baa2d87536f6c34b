"""Validation of a generated Harbor task in Docker: the FACET acceptance rule, made stricter.

A task is accepted when

* its environment builds (the Dockerfile passes docker_engine's lint first),
* the verifier gives reward 0 on the untouched environment (the *nop* trial),
* the verifier gives reward 1 after solution/solve.sh ran (the *oracle* trial), and solve.sh
  exits 0 (Harbor only looks at the reward; we also want a clean reference solution),
* the verifier stays below reward 1 after each *partial* solution (truncations of solve.sh at
  command boundaries), so a verifier that accepts half the work is caught, and
* no static check of the files found an error (tests that run the solution, a test.sh that never
  writes a reward, a solution that writes the reward itself, answers baked into the image ...).

Every trial runs in a fresh docker_engine.Sandbox (no network, CPU/memory/pids/disk/time limits)
made from the environment image, the way Harbor runs it (harbor-format.md §3): tests/ is uploaded
to /tests only at grade time, solution/ to /solution only for the oracle and partial trials,
/logs/verifier is created writable, `bash /tests/test.sh` runs in the task's working directory
with [verifier].env and as [verifier].user, and only /logs/verifier/reward.json or reward.txt
counts, never test.sh's exit code.

Django-free. Engine trouble (daemon restarting, connection reset) is raised as
docker_engine.TransientEngineError for the job layer to retry; whatever a task does wrong is
recorded in the ValidationReport instead. No container outlives validate_task: every sandbox of
one validation carries its own owner label and is removed by that label in a `finally`.
"""
from __future__ import annotations

import json
import logging
import math
import os
import posixpath
import re
import socket
import subprocess
import tempfile
import time
import tomllib
import uuid
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import docker
import requests

from facet_site.lib import docker_engine as de

log = logging.getLogger(__name__)

# Failure types, in the vocabulary the repair stage maps to fixes (pipeline-notes.md).
BUILD_FAILED = "build_failed"
INVALID_TASK = "invalid_task"  # a required file is missing or task.toml does not parse
NOP_UNEXPECTED_PASS = "nop_unexpected_pass"
ORACLE_FAILED = "oracle_failed"
SOLUTION_FAILED = "solution_failed"
SOLUTION_TIMEOUT = "solution_timeout"
VERIFIER_NO_REWARD = "verifier_no_reward"
VERIFIER_TIMEOUT = "verifier_timeout"
PARTIAL_UNEXPECTED_PASS = "partial_unexpected_pass"
STATIC_CHECK_FAILED = "static_check_failed"
INFRA_ERROR = "infra_error"

FAILURE_TYPES = (BUILD_FAILED, INVALID_TASK, NOP_UNEXPECTED_PASS, ORACLE_FAILED, SOLUTION_FAILED,
                 SOLUTION_TIMEOUT, VERIFIER_NO_REWARD, VERIFIER_TIMEOUT, PARTIAL_UNEXPECTED_PASS,
                 STATIC_CHECK_FAILED, INFRA_ERROR)

# Harbor's defaults when task.toml says nothing (harbor-format.md §2.1).
HARBOR_DEFAULT_TIMEOUT_S = 600.0
DEFAULT_WORKDIR = "/app"
VERIFIER_LOGS = "/logs/verifier"
LOG_DIRS = ("/logs/verifier", "/logs/agent", "/logs/artifacts")

# Validation runs untrusted code on shared workers: these are generous for a generated task and
# small next to Harbor's 600 s defaults, which generated task.toml files tend to copy.
DEFAULT_LIMITS = de.SandboxLimits(cpus=1.0, memory_bytes=2 * de.GiB, pids=1024,
                                  disk_bytes=2 * de.GiB)


@dataclass(frozen=True)
class ValidationTimeouts:
    """Explicit values win; otherwise task.toml's, capped by the max_* values."""

    build_s: float | None = None
    solution_s: float | None = None
    verifier_s: float | None = None
    max_build_s: float = 900.0
    max_solution_s: float = 600.0
    max_verifier_s: float = 600.0


@dataclass
class TrialResult:
    kind: str  # "nop" | "oracle" | "partial"
    reward: float | None  # None when the verifier wrote no (readable) reward
    passed: bool  # the expectation for this kind was met
    test_results: list[dict] = field(default_factory=list)  # {name, outcome, message, seconds}
    solution_exit_code: int | None = None
    verifier_exit_code: int | None = None  # informational: Harbor ignores it
    solution_output: str = ""  # capped (report_output_bytes, head and tail)
    verifier_output: str = ""
    fs_diff: dict | None = None  # against e0, after the solution ran (oracle/partial)
    solution_seconds: float | None = None
    verifier_seconds: float = 0.0
    total_seconds: float = 0.0
    peak_memory_bytes: int | None = None
    failure: str | None = None  # one of FAILURE_TYPES
    reason: str | None = None
    index: int = 0  # which partial solution (0 for nop/oracle)
    rewards: dict = field(default_factory=dict)  # every numeric metric of reward.json
    test_results_source: str | None = None  # the results file parsed, e.g. "junit.xml"

    @property
    def name(self) -> str:
        return f"partial_{self.index}" if self.kind == "partial" else self.kind

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ValidationReport:
    task_dir: str
    image_tag: str | None
    build: de.BuildResult | None
    build_seconds: float
    trials: list[TrialResult]
    static_findings: list[dict]  # {check, severity: "error"|"warning", message}
    accepted: bool
    failure: str | None  # the first failure type, in trial order
    reason: str | None
    initial_state: dict | None = None  # e0, see capture_initial_state
    build_log: str = ""  # capped; the build's log on success and on failure
    settings: dict = field(default_factory=dict)  # timeouts, limits, workdir actually used
    total_seconds: float = 0.0

    def trial(self, name: str) -> TrialResult | None:
        return next((t for t in self.trials if t.name == name), None)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["build"] = asdict(self.build) if self.build else None
        if data["build"]:
            data["build"]["log"] = cap_text(data["build"]["log"], 16 * de.KiB)
        return data


class TaskFiles:
    """The parts of a Harbor task directory validation reads, with task.toml parsed."""

    def __init__(self, task_dir: Path):
        self.dir = Path(task_dir)
        self.findings: list[dict] = []
        self.config: dict[str, Any] = {}
        for rel in ("instruction.md", "task.toml", "environment/Dockerfile", "solution/solve.sh",
                    "tests/test.sh"):
            if not (self.dir / rel).is_file():
                self.findings.append(_finding("missing_file", "error", f"{rel} is missing"))
        toml_path = self.dir / "task.toml"
        if toml_path.is_file():
            try:
                self.config = tomllib.loads(toml_path.read_text())
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                self.findings.append(_finding("task_toml_invalid", "error",
                                              f"task.toml does not parse: {exc}"))

    @property
    def invalid(self) -> bool:
        return any(f["severity"] == "error" for f in self.findings)

    def section(self, name: str) -> dict:
        value = self.config.get(name)
        return value if isinstance(value, dict) else {}

    def timeout(self, section: str) -> float | None:
        value = self.section(section).get("timeout_sec", HARBOR_DEFAULT_TIMEOUT_S)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            return None  # Harbor: null agent timeout means none; the cap applies
        return float(value)

    def env(self, section: str) -> dict[str, str]:
        return _resolve_env(self.section(section).get("env"))

    def user(self, section: str) -> str | None:
        value = self.section(section).get("user")
        return None if value is None else str(value)

    def read(self, rel: str) -> str:
        path = self.dir / rel
        if path.is_symlink() or not path.is_file():  # never read host files through a link
            return ""
        return path.read_text(errors="replace")


# --------------------------------------------------------------------------------------------
# Static checks


def _finding(check: str, severity: str, message: str) -> dict:
    return {"check": check, "severity": severity, "message": message}


_NETWORK_AT_GRADE_TIME = re.compile(
    r"\b(pip3?\s+install|uv\s+(pip|add|sync|run)|curl\s|wget\s|apt(-get)?\s+install|"
    r"npm\s+(install|i)\b|astral\.sh)", re.I)
_ABSOLUTE_PATH = re.compile(r"(?<![\w./-])(/(?:app|srv|opt|data|workspace|home|var/www)"
                            r"(?:/[\w.@+-]+)+)")


def _text_files(directory: Path, limit: int = 200) -> dict[str, str]:
    found: dict[str, str] = {}
    if not directory.is_dir():
        return found
    for path in sorted(directory.rglob("*")):
        if len(found) >= limit:
            break
        # Symlinks are not followed: a task from elsewhere could point one at a host file.
        if not path.is_symlink() and path.is_file() and path.stat().st_size <= 1 * de.MiB:
            data = path.read_bytes()
            if b"\0" not in data:
                found[path.relative_to(directory.parent).as_posix()] = data.decode(
                    "utf-8", errors="replace")
    return found


def static_checks(task_dir: Path) -> list[dict]:
    """Findings about the task's files that need no Docker. Severity "error" rejects the task.

    The errors are the things Harbor would run but that make the task worthless: tests that use
    the reference solution (it is not there when an agent is graded), a verifier that never
    writes a reward, a solution that writes the reward itself. Warnings point at likely trouble.
    """
    task = TaskFiles(task_dir)
    findings = list(task.findings)
    tests = _text_files(task.dir / "tests")
    test_sh = tests.get("tests/test.sh", "")
    solve_sh = task.read("solution/solve.sh")
    instruction = task.read("instruction.md")

    for rel, text in tests.items():
        if re.search(r"(?<![\w.-])/solution\b|\bsolve\.sh\b", text):
            findings.append(_finding(
                "tests_use_solution", "error",
                f"{rel} refers to /solution or solve.sh; the solution is not present when an "
                "agent is graded, so tests must check the resulting state instead"))
    if test_sh and not any("reward" in text for text in tests.values()):
        findings.append(_finding(
            "no_reward_written", "error",
            "no file in tests/ mentions reward.txt/reward.json: test.sh must write "
            "/logs/verifier/reward.txt"))
    if re.search(r"/logs/verifier|reward\.(txt|json)", solve_sh):
        findings.append(_finding(
            "solution_writes_reward", "error",
            "solve.sh touches /logs/verifier or a reward file; only the verifier may"))
    if test_sh:
        first = test_sh.splitlines()[0] if test_sh.splitlines() else ""
        if not re.match(r"#!\s*(/usr)?/bin/(env\s+)?(ba)?sh\b", first):
            findings.append(_finding(
                "test_sh_shebang", "warning",
                "tests/test.sh does not start with #!/bin/bash: current Harbor executes it "
                "directly, so the shebang decides the interpreter"))
        if "TEST_DIR" in test_sh:
            findings.append(_finding(
                "test_dir_variable", "warning",
                "test.sh uses $TEST_DIR, which current Harbor no longer sets; use /tests"))
        if m := _NETWORK_AT_GRADE_TIME.search(test_sh):
            findings.append(_finding(
                "grade_time_install", "warning",
                f"test.sh installs or downloads at grade time ({m.group(0).strip()!r}); the "
                "verifier runs offline here and must rely on what the image provides"))
    dockerfile = task.read("environment/Dockerfile")
    if re.search(r"^\s*ENTRYPOINT\b", dockerfile, re.M | re.I):
        findings.append(_finding(
            "entrypoint", "warning",
            "the Dockerfile sets ENTRYPOINT; sandboxes replace it, so nothing it starts runs "
            "during validation (start services in solve.sh or test.sh)"))
    named = set(_ABSOLUTE_PATH.findall(instruction))
    for rel, text in tests.items():
        for path in sorted(set(_ABSOLUTE_PATH.findall(text)) - named):
            if not any(p == path or p.startswith(path + "/") or path.startswith(p + "/")
                       for p in named):
                findings.append(_finding(
                    "path_not_in_instruction", "warning",
                    f"{rel} checks {path}, which instruction.md never names"))
    return findings


# --------------------------------------------------------------------------------------------
# Parsing what the verifier writes


class ResultsParseError(ValueError):
    pass


def parse_reward(reward_txt: bytes | None, reward_json: bytes | None) -> tuple[float | None,
                                                                                dict, str]:
    """(reward, all numeric metrics, problem) the way current Harbor reads them.

    reward.json (an object of numbers) is read first, reward.txt (one number) is the fallback
    and fills in "reward" when the JSON lacks it. problem is "" or says why there is no reward.
    """
    metrics: dict[str, float] = {}
    problems = []
    if reward_json is not None:
        try:
            data = json.loads(reward_json.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            metrics = {str(k): float(v) for k, v in data.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)
                       and math.isfinite(v)}
        except (ValueError, UnicodeDecodeError) as exc:
            problems.append(f"reward.json is unreadable ({exc})")
    if reward_txt is not None and "reward" not in metrics:
        text = reward_txt.decode("utf-8", errors="replace").strip()
        try:
            value = float(text)
            if not math.isfinite(value):
                raise ValueError(text)
            metrics["reward"] = value
        except ValueError:
            problems.append("reward.txt is empty" if not text
                            else f"reward.txt is not a number: {text[:80]!r}")
    reward = metrics.get("reward")
    if reward is None and not problems:
        problems.append("reward.json has no numeric \"reward\"" if reward_json is not None
                        else "the verifier wrote neither /logs/verifier/reward.txt nor "
                             "reward.json")
    return reward, metrics, "; ".join(problems) if reward is None else ""


_MAX_TESTS = 2000
_INLINE_RESULT_BYTES = 256 * 1024
_MAX_MESSAGE = 2000


def parse_junit_xml(data: bytes) -> list[dict]:
    """Test cases of a JUnit XML report (pytest --junitxml): name, outcome, message, seconds.

    A DOCTYPE or ENTITY declaration is refused before parsing: the file comes from untrusted
    code, and entity expansion is the classic way to make a parser eat memory.
    """
    head = data[:65536].lower()
    if b"<!doctype" in head or b"<!entity" in head or b"<!entity" in data.lower():
        raise ResultsParseError("JUnit XML with a DOCTYPE or ENTITY declaration is refused")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise ResultsParseError(f"JUnit XML does not parse: {exc}") from exc
    results = []
    for case in root.iter("testcase"):
        if len(results) >= _MAX_TESTS:
            break
        classname, name = case.get("classname") or "", case.get("name") or "?"
        outcome, message = "passed", ""
        for child in case:
            tag = child.tag
            if tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (child.get("message") or child.text or "").strip()
                break
        try:
            seconds = float(case.get("time") or 0)
        except ValueError:
            seconds = 0.0
        results.append({"name": f"{classname}::{name}" if classname else name,
                        "outcome": outcome, "message": message[:_MAX_MESSAGE],
                        "seconds": seconds})
    return results


def parse_ctrf_json(data: bytes) -> list[dict]:
    """Tests of a CTRF report (pytest --ctrf): results.tests[] with name, status, message."""
    try:
        doc = json.loads(data.decode("utf-8"))
        tests = doc["results"]["tests"]
        if not isinstance(tests, list):
            raise TypeError("results.tests is not a list")
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise ResultsParseError(f"not a CTRF report: {exc}") from exc
    results = []
    for test in tests[:_MAX_TESTS]:
        if not isinstance(test, dict):
            continue
        status = str(test.get("status") or "other")
        outcome = {"passed": "passed", "failed": "failed", "skipped": "skipped",
                   "pending": "skipped"}.get(status, status)
        message = str(test.get("message") or test.get("trace") or "")
        duration = test.get("duration")
        seconds = float(duration) / 1000 if isinstance(duration, (int, float)) else 0.0
        results.append({"name": str(test.get("name") or "?"), "outcome": outcome,
                        "message": message[:_MAX_MESSAGE], "seconds": seconds})
    return results


def results_from_file(name: str, data: bytes) -> list[dict] | None:
    lower = name.lower()
    if lower.endswith(".xml"):
        return parse_junit_xml(data)
    if lower.endswith(".json") and lower not in ("reward.json",):
        if b'"results"' in data[:4096] or "ctrf" in lower:
            return parse_ctrf_json(data)
    return None


# --------------------------------------------------------------------------------------------
# Partial solutions


_SETUP_COMMAND = re.compile(r"^\s*(set|cd|export|shopt|trap|umask|:|true)\b|^\s*$")


def _is_complete_shell(text: str) -> bool:
    # bash itself decides where a command ends: heredocs, quotes, if/for/case, functions.
    # A prefix whose heredoc runs to end-of-file parses with only a warning, so any output
    # counts as incomplete.
    try:
        proc = subprocess.run(["bash", "-n"], input=text.encode(), capture_output=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        # No bash on this host (or it hung): cut at lines that do not continue, as a fallback.
        return not text.rstrip("\n").endswith("\\")
    return proc.returncode == 0 and not proc.stderr.strip()


def solution_steps(solve_sh: str, max_lines: int = 400) -> list[str]:
    """solve.sh split into top-level commands (each may span lines), comments kept in place."""
    lines = solve_sh.splitlines(keepends=True)
    if len(lines) > max_lines:  # one bash -n per line; longer scripts are split coarsely
        lines = lines[:max_lines - 1] + ["".join(lines[max_lines - 1:])]
    steps: list[str] = []
    pending = ""
    for line in lines:
        pending += line if line.endswith("\n") else line + "\n"
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            continue  # comments and blank lines join the next command
        if _is_complete_shell(pending):
            steps.append(pending)
            pending = ""
    if pending.strip():
        steps.append(pending)
    return steps


def derive_partial_solutions(solve_sh: str, max_count: int = 3) -> list[str]:
    """Truncations of solve.sh at command boundaries: about a third, a half, and all but the
    last of its substantive commands (setup such as `set -e` or `cd` does not count).

    Each must leave the task unsolved; a verifier that gives reward 1 to one of them checks too
    little. A solution with fewer than two substantive commands yields none.
    """
    steps = solution_steps(solve_sh)
    substantive = [i for i, step in enumerate(steps)
                   if not all(_SETUP_COMMAND.match(line) or line.strip().startswith("#")
                              for line in step.splitlines())]
    n = len(substantive)
    if n < 2:
        return []
    counts: list[int] = []
    for k in (n - 1, n // 2, n // 3):  # most complete first: the likeliest to fool a verifier
        if 1 <= k < n and k not in counts:
            counts.append(k)
    partials = []
    for k in counts[:max_count]:
        cut = substantive[k]  # everything before the (k+1)-th substantive command
        body = "".join(steps[:cut]).rstrip("\n") + "\n"
        partials.append(body + f"# facet: partial solution, {k} of {n} commands\n")
    return partials


# --------------------------------------------------------------------------------------------
# Helpers


def cap_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return (text[:half] + f"\n[facet: {len(text) - 2 * half} characters dropped here]\n"
            + text[-half:])


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _resolve_env(table: Any) -> dict[str, str]:
    # Harbor fills ${VAR} from the host. Validation runs untrusted tasks on shared workers, so
    # only the ${VAR:-default} defaults are used; host variables (credentials) never go in.
    if not isinstance(table, dict):
        return {}
    return {str(k): _ENV_REF.sub(lambda m: m.group(2) or "", str(v)) for k, v in table.items()}


def task_limits(task: TaskFiles, ceiling: de.SandboxLimits) -> de.SandboxLimits:
    """The ceiling, lowered to what task.toml asks for (cpus, memory_mb or memory "2G")."""
    env = task.section("environment")
    cpus = env.get("cpus")
    memory = env.get("memory_mb")
    if memory is None and isinstance(env.get("memory"), str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([GMK])B?\s*", env["memory"].upper())
        if m:
            memory = float(m.group(1)) * {"G": 1024, "M": 1, "K": 1 / 1024}[m.group(2)]
    values: dict[str, Any] = {}
    if isinstance(cpus, (int, float)) and not isinstance(cpus, bool) and cpus > 0:
        values["cpus"] = min(float(cpus), ceiling.cpus)
    if isinstance(memory, (int, float)) and not isinstance(memory, bool) and memory > 0:
        values["memory_bytes"] = min(int(memory * de.MiB), ceiling.memory_bytes)
        values["tmp_bytes"] = min(ceiling.tmp_bytes, values["memory_bytes"] // 2)
    return de.SandboxLimits(**{**asdict(ceiling), **values})


def _effective_timeout(explicit: float | None, from_task: float | None, cap: float) -> float:
    if explicit is not None:
        return float(explicit)
    return min(from_task if from_task is not None else cap, cap)


def image_workdir_of(client: docker.DockerClient, image_tag: str) -> str:
    image = de.find_image(client, image_tag)
    workdir = ((image.attrs.get("Config") or {}).get("WorkingDir") if image else "") or ""
    return workdir


def _snapshot_roots(workdir: str | None, extra: Sequence[str] = ()) -> list[str]:
    root = workdir if workdir and workdir != "/" else DEFAULT_WORKDIR
    return list(dict.fromkeys([posixpath.normpath(root), *extra]))


def _only_under(snap: de.Snapshot, roots: Sequence[str]) -> de.Snapshot:
    keep = [posixpath.normpath(r) for r in roots]
    files = {p: e for p, e in snap.files.items()
             if any(p == r or p.startswith(r.rstrip("/") + "/") for r in keep)}
    return de.Snapshot(roots=list(keep), files=files,
                       missing=[m for m in snap.missing if m in keep],
                       processes=snap.processes, truncated=snap.truncated,
                       taken_at=snap.taken_at)


def _summarize_diff(before: de.Snapshot, after: de.Snapshot, max_files: int = 200) -> dict:
    diff = de.diff_snapshots(before, after).to_dict()
    files = {}
    for path in [*diff["added"], *diff["modified"]][:max_files]:
        entry = after.files.get(path)
        if entry is not None:
            files[path] = {"kind": entry.kind, "size": entry.size, "mode": entry.mode,
                           "sha256": entry.sha256,
                           "text_head": (entry.text_head or "")[:512] or None}
    diff["files"] = files
    diff["truncated"] = before.truncated or after.truncated
    return diff


# --------------------------------------------------------------------------------------------
# Initial state e0


def _initial_state_from(image_tag: str, roots: Sequence[str], workdir: str | None,
                        snapshot: de.Snapshot) -> dict:
    return {
        "image_tag": image_tag,
        "workdir": workdir,
        "roots": list(roots),
        "snapshot": snapshot.to_dict(),
        "services": [p.args for p in snapshot.processes or []],
    }


def capture_initial_state(client: docker.DockerClient, image_tag: str, *,
                          paths: Sequence[str] = (DEFAULT_WORKDIR,),
                          limits: de.SandboxLimits = DEFAULT_LIMITS,
                          owner: str | None = None) -> dict:
    """e0, the realized initial state of an environment image: every file under `paths`
    (size, mode, owner, sha256, head of text files) and the processes running in a fresh
    sandbox. validate_task captures it in its nop sandbox instead, to save a container."""
    with de.Sandbox(client, image_tag, owner=owner, limits=limits) as sb:
        snap = sb.snapshot(list(paths))
        return _initial_state_from(image_tag, paths, None, snap)


# --------------------------------------------------------------------------------------------
# Trials


@dataclass
class _TrialPlan:
    kind: str
    index: int = 0
    solve_sh: bytes | None = None  # replaces solution/solve.sh (partial trials)


class _Validation:
    """One validate_task call: the settings every trial shares."""

    def __init__(self, client: docker.DockerClient, task: TaskFiles, image_tag: str, *,
                 owner: str, limits: de.SandboxLimits, workdir: str | None,
                 snapshot_roots: Sequence[str], solution_timeout_s: float,
                 verifier_timeout_s: float, report_output_bytes: int,
                 keep_logs_dir: Path | None, measure_memory: bool,
                 trial_log_max_bytes: int = 64 * de.MiB):
        self.client = client
        self.task = task
        self.image_tag = image_tag
        self.owner = owner
        self.limits = limits
        self.workdir = workdir
        self.roots = list(snapshot_roots)
        self.solution_timeout_s = solution_timeout_s
        self.verifier_timeout_s = verifier_timeout_s
        self.report_output_bytes = report_output_bytes
        self.keep_logs_dir = keep_logs_dir
        self.measure_memory = measure_memory
        self.trial_log_max_bytes = trial_log_max_bytes
        self.container_env = task.env("environment")
        self.findings: list[dict] = []
        self.e0: de.Snapshot | None = None
        self.initial_state: dict | None = None
        self.phase = "setup"  # whose code runs: "setup", "solution", "verifier"
        self._log_dirs_tmp = tempfile.TemporaryDirectory(prefix="facet-logs-")
        self.log_dirs = Path(self._log_dirs_tmp.name)
        for d in LOG_DIRS:
            (self.log_dirs / posixpath.basename(d)).mkdir()

    def close(self) -> None:
        self._log_dirs_tmp.cleanup()

    def run(self, plan: _TrialPlan) -> TrialResult:
        started = time.monotonic()
        result = TrialResult(kind=plan.kind, reward=None, passed=False, index=plan.index)
        logs = self._logs_dir(result)
        self.phase = "setup"
        sb: de.Sandbox | None = None
        try:
            sb = de.Sandbox(self.client, self.image_tag, owner=self.owner, limits=self.limits,
                            environment=self.container_env,
                            labels={"facet.validation.trial": result.name})
            with sb:
                self._trial(sb, plan, result, logs)
        except de.TransientEngineError:
            raise
        except de.SandboxGone as exc:
            # A watchdog killed the container (time or disk limit): the task's doing. The
            # exec returned first, so the phase says whose code it was.
            gone = (sb.gone_reason if sb is not None else "") or str(exc)
            if self.phase == "solution":
                result.failure = SOLUTION_TIMEOUT if "exceeded" in gone else SOLUTION_FAILED
                result.reason = f"solve.sh: the sandbox was killed ({gone})"
            else:
                result.failure = VERIFIER_TIMEOUT if "exceeded" in gone else VERIFIER_NO_REWARD
                result.reason = f"test.sh: the sandbox was killed ({gone})"
            result.passed = False
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            # Not wrapped by docker_engine (should not happen): classify it the same way.
            raise de.classify_error(exc, f"trial {result.name}") from exc
        except de.PermanentEngineError as exc:
            # The engine refused something we asked for: not the task's fault.
            result.failure, result.reason = INFRA_ERROR, f"{type(exc).__name__}: {exc}"
            result.passed = False
        result.total_seconds = time.monotonic() - started
        if logs is not None:
            (logs / "result.json").write_text(json.dumps(result.to_dict(), indent=2))
        return result

    def _logs_dir(self, result: TrialResult) -> Path | None:
        if self.keep_logs_dir is None:
            return None
        path = Path(self.keep_logs_dir) / f"trial_{result.name}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _trial(self, sb: de.Sandbox, plan: _TrialPlan, result: TrialResult,
               logs: Path | None) -> None:
        if self.e0 is None:
            # The first trial's untouched sandbox is e0: no extra container for it.
            probe = sb.snapshot(self.roots + ["/tests", "/solution"])
            self.e0 = _only_under(probe, self.roots)
            self.initial_state = _initial_state_from(self.image_tag, self.roots,
                                                     self.workdir, self.e0)
            for leaked in ("/tests", "/solution"):
                if leaked not in probe.missing:
                    self.findings.append(_finding(
                        "answers_in_image", "error",
                        f"the image already contains {leaked}; it must be uploaded only at "
                        "trial time"))
        # /logs/{verifier,agent,artifacts} travel in the first upload (an exec costs as much
        # as an upload); they must be writable by everyone when a phase runs as another user.
        files: dict[str, Any] = {"/logs": self.log_dirs}
        solution = None
        if plan.kind != "nop":
            files["/solution"] = self.task.dir / "solution"
            if plan.solve_sh is not None:
                files["/solution/solve.sh"] = plan.solve_sh
            sb.put_files(files)
            self._open_log_dirs(sb)
            if logs is not None and plan.solve_sh is not None:
                (logs / "solve.sh").write_bytes(plan.solve_sh)
            env = {"DEBIAN_FRONTEND": "noninteractive", **self.task.env("solution")}
            self.phase = "solution"
            solution = sb.exec(["bash", "/solution/solve.sh"],
                               timeout_s=self.solution_timeout_s, workdir=self.workdir,
                               env=env, user=self.task.user("agent"),
                               **self._full_log(logs, "solution.log"))
            result.solution_exit_code = solution.exit_code
            result.solution_seconds = solution.seconds
            result.solution_output = cap_text(solution.output, self.report_output_bytes)
            after = sb.snapshot(self.roots + [VERIFIER_LOGS])
            assert self.e0 is not None
            result.fs_diff = _summarize_diff(self.e0, _only_under(after, self.roots))
            left = sorted(p for p in after.files if p.startswith(VERIFIER_LOGS + "/"))
            if left:
                self._clear_verifier_logs(sb, plan, left)
            files = {}

        self.phase = "verifier"
        files["/tests"] = self.task.dir / "tests"
        sb.put_files(files)
        if plan.kind == "nop":
            self._open_log_dirs(sb)
        verifier = sb.exec(["bash", "/tests/test.sh"], timeout_s=self.verifier_timeout_s,
                           workdir=self.workdir, env=self.task.env("verifier") or None,
                           user=self.task.user("verifier"), **self._full_log(logs, "verifier.log"))
        result.verifier_exit_code = verifier.exit_code
        result.verifier_seconds = verifier.seconds
        result.verifier_output = cap_text(verifier.output, self.report_output_bytes)
        self._read_verifier_logs(sb, result, logs)
        if self.measure_memory:
            result.peak_memory_bytes = sb.peak_memory_bytes()
        self._judge(result, solution=solution, verifier=verifier)

    def _full_log(self, logs: Path | None, name: str) -> dict:
        # The whole output streams to the trial's log file as it comes (the exec keeps only a
        # 1 MiB head and tail in memory), so the downloadable log is complete up to the cap.
        if logs is None:
            return {}
        return {"output_path": logs / name, "output_path_max_bytes": self.trial_log_max_bytes}

    def _open_log_dirs(self, sb: de.Sandbox) -> None:
        if self.task.user("agent") is None and self.task.user("verifier") is None:
            return  # root writes anywhere: skip the exec
        dirs = " ".join(LOG_DIRS)
        prep = sb.exec(f"chmod 777 {dirs}", timeout_s=30, user="0")
        if not prep.ok:
            raise de.PermanentEngineError(f"could not open up /logs: {prep.output[-500:]}")

    def _clear_verifier_logs(self, sb: de.Sandbox, plan: _TrialPlan, left: list[str]) -> None:
        # Whatever the solution left in /logs/verifier would be read as the verifier's verdict
        # ("agents writing the reward file themselves"): note it and start the verifier clean.
        sb.exec(f"find {VERIFIER_LOGS} -mindepth 1 -delete; chmod 777 {VERIFIER_LOGS}",
                timeout_s=30, user="0")
        if plan.kind == "oracle":
            self.findings.append(_finding(
                "solution_writes_reward", "error",
                f"solve.sh left files in {VERIFIER_LOGS} ({', '.join(left[:5])}); only the "
                "verifier may write there"))

    def _read_verifier_logs(self, sb: de.Sandbox, result: TrialResult,
                            logs: Path | None) -> None:
        # One archive read lists the directory and brings the small files with it (their
        # text heads); only bigger or binary files cost a download of their own.
        listing = sb.snapshot([VERIFIER_LOGS], max_text_head=_INLINE_RESULT_BYTES,
                              max_files=200, max_bytes=64 * de.MiB)
        contents: dict[str, bytes] = {}
        for path, entry in sorted(listing.files.items()):
            if entry.kind != "file" or entry.size > 32 * de.MiB:
                continue
            name = posixpath.relpath(path, VERIFIER_LOGS)
            head = (entry.text_head or "").encode()
            if entry.text_head is not None and len(head) == entry.size:
                data: bytes | None = head
            else:
                try:
                    data = sb.get_file(path, max_bytes=32 * de.MiB)
                except (ValueError, IsADirectoryError):
                    continue
            if data is None:
                continue
            contents[name] = data
            if logs is not None and "/" not in name and name not in ("solution.log",
                                                                       "verifier.log",
                                                                       "result.json"):
                (logs / name).write_bytes(data)
        reward, metrics, problem = parse_reward(contents.get("reward.txt"),
                                                contents.get("reward.json"))
        result.reward, result.rewards = reward, metrics
        if problem:
            result.reason = problem
        if "reward.txt" in contents and "reward.json" in contents:
            txt, _, _ = parse_reward(contents["reward.txt"], None)
            if txt is not None and metrics.get("reward") is not None and txt != metrics["reward"]:
                self.findings.append(_finding(
                    "reward_files_disagree", "warning",
                    f"reward.txt says {txt} and reward.json says {metrics['reward']}; Harbor "
                    "versions differ in which one they read"))
        # JUnit first (what pytest --junitxml writes), CTRF as the fallback.
        for name in sorted(contents, key=lambda n: (not n.lower().endswith(".xml"), n)):
            try:
                parsed = results_from_file(name, contents[name])
            except ResultsParseError as exc:
                self.findings.append(_finding("results_unreadable", "warning",
                                              f"{VERIFIER_LOGS}/{name}: {exc}"))
                continue
            if parsed is not None:
                result.test_results, result.test_results_source = parsed, name
                break

    def _judge(self, result: TrialResult, *, solution: de.ExecResult | None = None,
               verifier: de.ExecResult | None = None) -> None:
        """Set passed, failure and reason from what the trial saw. The order matters: a
        solution that hung explains a missing reward better than the verifier does."""
        reward = result.reward
        kind = result.kind
        failure, reason = None, None
        if kind == "oracle" and solution is not None and solution.timed_out:
            failure = SOLUTION_TIMEOUT
            reason = f"solve.sh did not finish within {self.solution_timeout_s:g} s"
        elif verifier is not None and verifier.timed_out:
            failure = VERIFIER_TIMEOUT
            reason = f"test.sh did not finish within {self.verifier_timeout_s:g} s"
        elif verifier is not None and verifier.killed_by:
            failure = VERIFIER_NO_REWARD
            reason = f"test.sh was killed ({verifier.killed_by} limit)"
        elif reward is None:
            failure = VERIFIER_NO_REWARD
            reason = result.reason or "no reward"
        elif kind == "nop" and reward > 0:
            failure = NOP_UNEXPECTED_PASS
            reason = f"the verifier gave reward {reward:g} without any solution (expected 0)"
        elif kind == "oracle":
            code = solution.exit_code if solution is not None else None
            if reward < 1:
                if solution is not None and (code != 0 or solution.killed_by):
                    failure = SOLUTION_FAILED
                    how = (f"was killed ({solution.killed_by} limit)" if solution.killed_by
                           else f"exited {code}")
                    reason = f"solve.sh {how}; the verifier gave reward {reward:g}"
                else:
                    failure = ORACLE_FAILED
                    reason = f"the verifier gave reward {reward:g} after the reference solution"
                    failed = [t["name"] for t in result.test_results
                              if t["outcome"] in ("failed", "error")]
                    if failed:
                        reason += f" (failed: {', '.join(failed[:5])})"
            elif code != 0:
                failure = SOLUTION_FAILED
                reason = f"solve.sh exited {code} although the verifier gave reward {reward:g}"
        elif kind == "partial" and reward >= 1:
            failure = PARTIAL_UNEXPECTED_PASS
            reason = (f"partial solution {result.index} (solve.sh cut short) reached reward "
                      f"{reward:g}: the tests do not check enough of the work")
        result.failure, result.passed = failure, failure is None
        result.reason = reason if failure else None


# --------------------------------------------------------------------------------------------
# The entry point


def validate_task(
    client: docker.DockerClient,
    task_dir: Path,
    *,
    base_image: str = de.BASE_IMAGE_TAG,
    limits: de.SandboxLimits = DEFAULT_LIMITS,
    partial_solutions: Sequence[str | bytes] | None = None,
    max_partials: int = 3,
    timeouts: ValidationTimeouts = ValidationTimeouts(),
    keep_logs_dir: Path | None = None,
    owner: str | None = None,
    extra_snapshot_paths: Sequence[str] = (),
    report_output_bytes: int = 16 * de.KiB,
    measure_memory: bool = True,
    trial_log_max_bytes: int = 64 * de.MiB,
) -> ValidationReport:
    """Build the task's environment and run its nop, oracle and partial trials.

    partial_solutions: None derives up to `max_partials` from solve.sh
    (derive_partial_solutions); an empty sequence runs none. Partials run only when the oracle
    passed (against a failing oracle they prove nothing). nop and oracle always both run.

    `limits` is a ceiling: task.toml's cpus and memory lower it. Timeouts come from task.toml
    ([agent] and [verifier] timeout_sec, [environment] build_timeout_sec) capped by `timeouts`.

    With keep_logs_dir, each trial's solution.log and verifier.log hold the command's whole
    output up to `trial_log_max_bytes` (then a marker); the report keeps `report_output_bytes`.

    Raises docker_engine.TransientEngineError when the engine fails under us (retry the whole
    validation); everything else ends up in the report. No sandbox outlives this call.
    """
    started = time.monotonic()
    task_dir = Path(task_dir)
    task = TaskFiles(task_dir)
    findings = static_checks(task_dir)
    owner = owner or f"{socket.gethostname()}:{os.getpid()}"
    # Its own owner label per validation, so the final cleanup touches no one else's sandboxes.
    run_owner = f"{owner}:validate:{uuid.uuid4().hex[:12]}"
    solution_timeout = _effective_timeout(timeouts.solution_s, task.timeout("agent"),
                                          timeouts.max_solution_s)
    verifier_timeout = _effective_timeout(timeouts.verifier_s, task.timeout("verifier"),
                                          timeouts.max_verifier_s)
    task_build_s = task.section("environment").get("build_timeout_sec")
    if not isinstance(task_build_s, (int, float)) or task_build_s <= 0:
        task_build_s = HARBOR_DEFAULT_TIMEOUT_S
    build_timeout = _effective_timeout(timeouts.build_s, float(task_build_s),
                                       timeouts.max_build_s)
    effective_limits = task_limits(task, limits)
    settings = {"solution_timeout_s": solution_timeout, "verifier_timeout_s": verifier_timeout,
                "build_timeout_s": build_timeout, "limits": asdict(effective_limits),
                "owner": run_owner}
    report = ValidationReport(task_dir=str(task_dir), image_tag=None, build=None,
                              build_seconds=0.0, trials=[], static_findings=findings,
                              accepted=False, failure=None, reason=None, settings=settings)
    logs_dir = Path(keep_logs_dir) if keep_logs_dir is not None else None
    if logs_dir is not None:
        logs_dir.mkdir(parents=True, exist_ok=True)

    def finish() -> ValidationReport:
        report.total_seconds = time.monotonic() - started
        errors = [f for f in report.static_findings if f["severity"] == "error"]
        failed = next((t for t in report.trials if not t.passed), None)
        if report.failure is None and failed is not None:
            report.failure, report.reason = failed.failure, f"{failed.name}: {failed.reason}"
        if report.failure is None and errors:
            report.failure = STATIC_CHECK_FAILED
            report.reason = "; ".join(e["message"] for e in errors[:3])
        report.accepted = report.failure is None and bool(report.trials)
        if logs_dir is not None:
            (logs_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=2,
                                                             default=str))
        return report

    if task.invalid:
        report.failure = INVALID_TASK
        report.reason = "; ".join(f["message"] for f in task.findings)
        return finish()

    # Build (lint first: build_image refuses a bad Dockerfile before touching the engine).
    build_started = time.monotonic()
    try:
        build = de.build_image(client, task_dir / "environment", base_image=base_image,
                               timeout_s=build_timeout,
                               labels={"facet.task": task_dir.name[:128]})
    except de.DockerfileLintError as exc:
        report.build_seconds = time.monotonic() - build_started
        report.failure = BUILD_FAILED
        report.reason = "Dockerfile lint: " + "; ".join(exc.problems)
        return finish()
    except de.BuildFailed as exc:  # BuildTimeout included
        report.build_seconds = time.monotonic() - build_started
        report.failure, report.reason = BUILD_FAILED, str(exc)
        report.build_log = cap_text(exc.log, 64 * de.KiB)
        if logs_dir is not None:
            (logs_dir / "build.log").write_text(exc.log)
        return finish()
    except de.BaseImageMissing as exc:
        report.failure, report.reason = INFRA_ERROR, str(exc)
        return finish()
    report.build, report.image_tag = build, build.image_tag
    report.build_seconds = time.monotonic() - build_started
    report.build_log = cap_text(build.log, 16 * de.KiB)
    if logs_dir is not None:
        (logs_dir / "build.log").write_text(
            build.log or f"[facet: {build.image_tag} was already built; nothing ran]\n")

    workdir = task.section("environment").get("workdir")
    workdir = str(workdir) if isinstance(workdir, str) and workdir else None
    image_workdir = image_workdir_of(client, build.image_tag)
    settings["workdir"] = workdir or image_workdir or "/"
    validation = _Validation(
        client, task, build.image_tag, owner=run_owner, limits=effective_limits,
        workdir=workdir, snapshot_roots=_snapshot_roots(workdir or image_workdir,
                                                        extra_snapshot_paths),
        solution_timeout_s=solution_timeout, verifier_timeout_s=verifier_timeout,
        report_output_bytes=report_output_bytes, keep_logs_dir=logs_dir,
        measure_memory=measure_memory, trial_log_max_bytes=trial_log_max_bytes)
    try:
        report.trials.append(validation.run(_TrialPlan("nop")))
        oracle = validation.run(_TrialPlan("oracle"))
        report.trials.append(oracle)
        if oracle.passed:
            if partial_solutions is None:
                partial_solutions = derive_partial_solutions(task.read("solution/solve.sh"),
                                                             max_partials)
            for index, body in enumerate(partial_solutions[:max_partials], 1):
                data = body.encode() if isinstance(body, str) else bytes(body)
                report.trials.append(validation.run(_TrialPlan("partial", index, data)))
    finally:
        validation.close()
        # Normally every Sandbox has removed itself; this catches the ones an engine failure
        # or an interrupt left, by this validation's own owner label.
        try:
            de.cleanup_leftovers(client, owner=run_owner)
        except de.DockerEngineError as exc:
            log.warning("could not remove the sandboxes of %s: %s", run_owner, exc)
    report.initial_state = validation.initial_state
    report.static_findings.extend(validation.findings)
    return finish()


# --------------------------------------------------------------------------------------------
# The plain docker CLI, for benchmarks


def time_plain_cli_validation(task_dir: Path, image_tag: str, *, docker_cli: str = "docker",
                              timeout_s: float = 120) -> dict:
    """The nop and oracle trials done with nothing but `docker` commands, timed.

    The baseline a benchmark compares validate_task against: what a script driving the CLI
    with subprocess does (the public FACET code works this way). Same isolation basics (no
    network, a CPU and memory limit, tests uploaded after the solution), none of our extras
    (snapshots, output caps, result parsing, watchdogs). The containers carry the sandbox label,
    so cleanup_leftovers finds any that an exception leaves.
    """
    task_dir = Path(task_dir)
    owner = f"plain-cli:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def docker_cmd(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([docker_cli, *args], capture_output=True, timeout=timeout_s)
        if check and proc.returncode != 0:
            raise RuntimeError(f"docker {args[0]} failed: {proc.stderr.decode()[-500:]}")
        return proc

    def trial(with_solution: bool) -> tuple[float | None, float]:
        started = time.monotonic()
        cid = docker_cmd(
            "run", "-d", "--network", "none", "--cpus", "1", "--memory", "2g",
            "--pids-limit", "1024", "--label", f"{de.LABEL_SANDBOX}=1",
            "--label", f"{de.LABEL_OWNER}={owner}", "--entrypoint", "sleep", image_tag,
            "infinity").stdout.decode().strip()
        try:
            docker_cmd("exec", cid, "mkdir", "-p", *LOG_DIRS)
            if with_solution:
                docker_cmd("cp", str(task_dir / "solution"), f"{cid}:/solution")
                docker_cmd("exec", cid, "bash", "/solution/solve.sh", check=False)
            docker_cmd("cp", str(task_dir / "tests"), f"{cid}:/tests")
            docker_cmd("exec", cid, "bash", "/tests/test.sh", check=False)
            out = docker_cmd("exec", cid, "cat", f"{VERIFIER_LOGS}/reward.txt", check=False)
            try:
                reward: float | None = float(out.stdout.decode().strip())
            except ValueError:
                reward = None
        finally:
            docker_cmd("rm", "-f", cid, check=False)
        return reward, time.monotonic() - started

    started = time.monotonic()
    nop_reward, nop_s = trial(False)
    oracle_reward, oracle_s = trial(True)
    return {"image_tag": image_tag, "nop_reward": nop_reward, "oracle_reward": oracle_reward,
            "nop_seconds": nop_s, "oracle_seconds": oracle_s,
            "total_seconds": time.monotonic() - started}
