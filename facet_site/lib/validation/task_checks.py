"""What validation reads from a Harbor task directory (`TaskFiles`: the required files and
task.toml), the sandbox limits and environment it asks for, and the static checks of its files
(tests that run the solution, a test.sh that never writes a reward, ...). Django-free.
"""
from __future__ import annotations

import posixpath
import re
import tomllib
from dataclasses import asdict
from pathlib import Path
from typing import Any

from facet_site.lib import docker_engine as de
from facet_site.lib import task_defects
from facet_site.lib.docker_engine.dockerfile_lint import dockerfile_instructions, split_copy_args

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


def finding(check: str, severity: str, message: str, **where) -> dict:
    """A finding: check, severity, message, and where it is (file, line, evidence)."""
    return task_defects.finding(check, severity, message, **where)


_ABSOLUTE_PATH = re.compile(r"(?<![\w./-])(/(?:app|srv|opt|data|workspace|home|var/www)"
                            r"(?:/[\w.@+-]+)+)")
_RELATIVE_PATH = re.compile(r"(?<![\w/.-])((?:\.{1,2}/)?[\w@+-][\w.@+-]*(?:/[\w.@+-]+)*\.?[\w@+-]*)")
# Any absolute path of two or more parts ("/etc/app/template.conf"): an input the instruction
# names may be anywhere in the image now that the leaked-answer check searches all of it.
_ANY_ABSOLUTE_PATH = re.compile(r"(?<![\w./:-])(/[\w.@+-]+(?:/[\w.@+-]+)+)")
_SOLUTION_DIR = re.compile(r"(?<![\w.-])/solution\b")
_TEST_DIR_SET = re.compile(r"^\s*(?:export\s+)?TEST_DIR=", re.M)


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


def _paths_in(text: str) -> set[str]:
    # A sentence may end right after a path ("write /app/out.csv."): the period is not part of it.
    return {m.rstrip(".") for m in _ABSOLUTE_PATH.findall(text)}


def instruction_paths(instruction: str) -> list[str]:
    """The files and directories an instruction names, absolute or relative to the working
    directory ("/app/data/orders.csv", "data/orders.csv", "orders.csv"): the task's inputs as
    far as the leaked-answer check is concerned (a copy of an input is not a leak)."""
    relative = {w.rstrip(".").removeprefix("./") for w in _RELATIVE_PATH.findall(instruction)}
    relative = {w for w in relative if "/" in w or re.search(r"\w\.[A-Za-z]\w{0,5}$", w)}
    absolute = {m.rstrip(".") for m in _ANY_ABSOLUTE_PATH.findall(instruction)}
    return sorted(_paths_in(instruction) | absolute | relative)


def _named_in_instruction(path: str, named: set[str], instruction_words: set[str],
                          workdir: str) -> bool:
    if any(p == path or p.startswith(path + "/") or path.startswith(p + "/") for p in named):
        return True
    # "write out/report.csv" in a task whose working directory is /app names /app/out/report.csv.
    root = workdir.rstrip("/") + "/"
    if path.startswith(root):
        rel = path[len(root):]
        return any(w == rel or w.startswith(rel + "/") or rel.startswith(w + "/")
                   for w in instruction_words)
    return False


def static_checks(task_dir: Path) -> list[dict]:
    """Findings about the task's files that need no Docker. Severity "error" rejects the task.

    The errors are the things Harbor would run but that make the task worthless: tests that use
    the reference solution (it is not there when an agent is graded), a verifier that never
    writes a reward, a solution that writes the reward itself, and the defect classes of
    task_defects that need no trial (grade-time installs or downloads in any tests/ file, answer
    files shipped in environment/, an instruction that reproduces solve.sh). Warnings point at
    likely trouble.
    """
    task = TaskFiles(task_dir)
    findings = list(task.findings)
    tests = _text_files(task.dir / "tests")
    test_sh = tests.get("tests/test.sh", "")
    solve_sh = task.read("solution/solve.sh")
    instruction = task.read("instruction.md")
    # When the instruction itself asks for work under /solution/, tests that look there check
    # the agent's output, not the reference solution.
    solution_dir_is_output = bool(_SOLUTION_DIR.search(instruction))
    for rel, text in tests.items():
        pattern = r"\bsolve\.sh\b" if solution_dir_is_output else r"(?<![\w.-])/solution\b|\bsolve\.sh\b"
        if re.search(pattern, text):
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
        # A test.sh that sets TEST_DIR itself (facet's TB1 converter does) does not rely on
        # Harbor setting it.
        if "TEST_DIR" in test_sh and not _TEST_DIR_SET.search(test_sh):
            findings.append(finding(
                "test_dir_variable", "warning",
                "test.sh uses $TEST_DIR, which current Harbor no longer sets; use /tests"))
    dockerfile = task.read("environment/Dockerfile")
    if re.search(r"^\s*ENTRYPOINT\b", dockerfile, re.M | re.I):
        findings.append(finding(
            "entrypoint", "warning",
            "the Dockerfile sets ENTRYPOINT; sandboxes replace it, so nothing it starts runs "
            "during validation (start services in solve.sh or test.sh)"))
    named = _paths_in(instruction)
    words = {w.rstrip(".").removeprefix("./") for w in _RELATIVE_PATH.findall(instruction)}
    workdir = task.section("environment").get("workdir") or _dockerfile_workdir(dockerfile)
    for rel, text in tests.items():
        for path in sorted(_paths_in(text) - named):
            if not _named_in_instruction(path, named, words, str(workdir or DEFAULT_WORKDIR)):
                findings.append(finding(
                    "path_not_in_instruction", "warning",
                    f"{rel} checks {path}, which instruction.md never names"))
    findings += task_defects.static_task_defects(
        instruction=instruction, solve_sh=solve_sh,
        environment_files=_text_files(task.dir / "environment"),
        solution_files=_text_files(task.dir / "solution"), tests_files=tests)
    return findings


def leak_search_roots(dockerfile: str, workdir: str | None) -> list[str]:
    """The image paths the leaked-answer check reads whole besides the snapshot roots: every
    COPY/ADD destination of the Dockerfile, where a hidden answer file lands, so every normal
    form of an output is found there. The rest of the image (files a RUN step wrote anywhere) is
    searched by digest in the same first trial (trials.image_scan_command)."""
    found: list[str] = []
    current = workdir or "/"
    for _line, word, args in dockerfile_instructions(dockerfile):
        if word == "WORKDIR":
            current = posixpath.join(current, args.strip())
        elif word in ("COPY", "ADD"):
            flags, paths = split_copy_args(args)
            if paths and not any(flag.startswith("--from") for flag in flags):
                found.append(posixpath.normpath(posixpath.join(current, paths[-1])))
    return list(dict.fromkeys(found))


def _dockerfile_workdir(dockerfile: str) -> str | None:
    workdirs = [args.strip() for _line, word, args in dockerfile_instructions(dockerfile)
                if word == "WORKDIR"]
    return workdirs[-1] if workdirs and workdirs[-1].startswith("/") else None


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
