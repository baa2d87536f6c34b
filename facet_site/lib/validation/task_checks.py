"""What validation reads from a Harbor task directory (`TaskFiles`: the required files and
task.toml), the sandbox limits and environment it asks for, and the static checks of its files
(tests that run the solution, a test.sh that never writes a reward, ...). Django-free.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import asdict
from pathlib import Path
from typing import Any

from facet_site.lib import docker_engine as de

# Harbor's defaults when task.toml says nothing (harbor-format.md §2.1).
HARBOR_DEFAULT_TIMEOUT_S = 600.0
DEFAULT_WORKDIR = "/app"
VERIFIER_LOGS = "/logs/verifier"
LOG_DIRS = ("/logs/verifier", "/logs/agent", "/logs/artifacts")

# Validation runs untrusted code on shared workers: these are generous for a generated task and
# small next to Harbor's 600 s defaults, which generated task.toml files tend to copy.
DEFAULT_LIMITS = de.SandboxLimits(cpus=1.0, memory_bytes=2 * de.GiB, pids=1024,
                                  disk_bytes=2 * de.GiB)





class TaskFiles:
    """The parts of a Harbor task directory validation reads, with task.toml parsed."""

    def __init__(self, task_dir: Path):
        self.dir = Path(task_dir)
        self.findings: list[dict] = []
        self.config: dict[str, Any] = {}
        for rel in ("instruction.md", "task.toml", "environment/Dockerfile", "solution/solve.sh",
                    "tests/test.sh"):
            if not (self.dir / rel).is_file():
                self.findings.append(finding("missing_file", "error", f"{rel} is missing"))
        toml_path = self.dir / "task.toml"
        if toml_path.is_file():
            try:
                self.config = tomllib.loads(toml_path.read_text())
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                self.findings.append(finding("task_toml_invalid", "error",
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


def finding(check: str, severity: str, message: str) -> dict:
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
            findings.append(finding(
                "tests_use_solution", "error",
                f"{rel} refers to /solution or solve.sh; the solution is not present when an "
                "agent is graded, so tests must check the resulting state instead"))
    if test_sh and not any("reward" in text for text in tests.values()):
        findings.append(finding(
            "no_reward_written", "error",
            "no file in tests/ mentions reward.txt/reward.json: test.sh must write "
            "/logs/verifier/reward.txt"))
    if re.search(r"/logs/verifier|reward\.(txt|json)", solve_sh):
        findings.append(finding(
            "solution_writes_reward", "error",
            "solve.sh touches /logs/verifier or a reward file; only the verifier may"))
    if test_sh:
        first = test_sh.splitlines()[0] if test_sh.splitlines() else ""
        if not re.match(r"#!\s*(/usr)?/bin/(env\s+)?(ba)?sh\b", first):
            findings.append(finding(
                "test_sh_shebang", "warning",
                "tests/test.sh does not start with #!/bin/bash: current Harbor executes it "
                "directly, so the shebang decides the interpreter"))
        if "TEST_DIR" in test_sh:
            findings.append(finding(
                "test_dir_variable", "warning",
                "test.sh uses $TEST_DIR, which current Harbor no longer sets; use /tests"))
        if m := _NETWORK_AT_GRADE_TIME.search(test_sh):
            findings.append(finding(
                "grade_time_install", "warning",
                f"test.sh installs or downloads at grade time ({m.group(0).strip()!r}); the "
                "verifier runs offline here and must rely on what the image provides"))
    dockerfile = task.read("environment/Dockerfile")
    if re.search(r"^\s*ENTRYPOINT\b", dockerfile, re.M | re.I):
        findings.append(finding(
            "entrypoint", "warning",
            "the Dockerfile sets ENTRYPOINT; sandboxes replace it, so nothing it starts runs "
            "during validation (start services in solve.sh or test.sh)"))
    named = set(_ABSOLUTE_PATH.findall(instruction))
    for rel, text in tests.items():
        for path in sorted(set(_ABSOLUTE_PATH.findall(text)) - named):
            if not any(p == path or p.startswith(path + "/") or path.startswith(p + "/")
                       for p in named):
                findings.append(finding(
                    "path_not_in_instruction", "warning",
                    f"{rel} checks {path}, which instruction.md never names"))
    return findings



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
