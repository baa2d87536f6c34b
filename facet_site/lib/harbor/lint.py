"""Static checks of a Harbor task bundle (`lint_task`), named like `harbor lint`'s rules where the
spec lists them (docs harbor-format.md), plus facet's own: unpinned images and packages, tests
that download at grade time, verifiers that never write a reward, answers leaking into the
instruction. Django-free; findings are returned, never raised.
"""
from __future__ import annotations

import hashlib
import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Iterable

import yaml

from facet_site.lib import task_defects
from facet_site.lib.harbor.task_files import check_relpath, check_required_files, separate_verifier
from facet_site.lib.harbor.task_format import (KNOWN_KEYS, NEWER_KEYS, TaskBundle, TaskFormatError,
                                               config_from_toml, schema_minor)
from facet_site.lib.harbor.tb1 import yaml_error_line

@dataclass(frozen=True)
class LintFinding:
    rule: str
    severity: str  # "error" | "warning" | "info"
    path: str
    message: str
    line: int | None = None


_TEXT_LIMIT = 2 * 1024 * 1024  # files larger than this are data, not scripts: not scanned


def _text(data: bytes) -> str | None:
    if len(data) > _TEXT_LIMIT or b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _logical_lines(text: str, comment: str = "#") -> list[tuple[int, str]]:
    """(first line number, line) with backslash continuations joined and full-line comments dropped."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith(comment)):
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        out.append((start, buf + stripped))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


_REWARD_RE = re.compile(r"/logs/verifier/reward\.(txt|json)")
_REWARD_LITERAL_RE = re.compile(r"^\s*(?:echo|printf)\s+[\"']?(-?[0-9.]+)[\"']?\s*>")
_EXIT_RE = re.compile(r"(^|[\s;&|{(])exit(\s|;|$)")
_ERREXIT_RE = re.compile(r"(^|[\s;])set\s+(-[a-zA-Z]*e[a-zA-Z]*\b|-o\s+errexit\b)")
_ERREXIT_OFF_RE = re.compile(r"(^|[\s;])set\s+(\+[a-zA-Z]*e[a-zA-Z]*\b|\+o\s+errexit\b)")
_ABS_PATH_RE = re.compile(r"(?<![\w.:/~$-])(/(?:[A-Za-z0-9_.+-]+/)*[A-Za-z0-9_.+-]+/?)")
_IGNORED_INSTRUCTION_PATHS = ("/dev/", "/proc/", "/sys/", "/tmp")
_MIN_LEAK_CHARS = 40


def _dockerfiles(files: dict[str, bytes]) -> list[str]:
    return sorted(p for p in files if p.startswith("environment/")
                  and (posixpath.basename(p) == "Dockerfile" or p.endswith(".Dockerfile")
                       or posixpath.basename(p).startswith("Dockerfile.")))


def _image_unpinned(ref: str) -> bool:
    if "@sha256:" in ref:
        return False
    last = ref.rsplit("/", 1)[-1]
    return ":" not in last or last.endswith(":latest")


def _requirement_unpinned(token: str) -> bool:
    token = token.strip("\"'")
    if not token or token.startswith(("-", ".", "/", "$")) or "://" in token or " @ " in token:
        return False
    if token.endswith((".whl", ".tar.gz", ".zip")) or "==" in token or "===" in token:
        return False
    return bool(re.match(r"^[A-Za-z0-9]", token))


def _pip_targets(line: str) -> list[str]:
    """Requirement tokens of pip/uv install-like commands in one shell line (rough tokenising)."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:
        tokens = line.split()
    found: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("-w", "--with") and i + 1 < len(tokens):
            found.extend(t for t in tokens[i + 1].split(",") if t)
            i += 2
            continue
        if tok in ("install", "add") and i > 0 and tokens[i - 1] in ("pip", "pip3", "uv"):
            j = i + 1
            while j < len(tokens) and tokens[j] not in ("&&", "||", ";", "|"):
                t = tokens[j]
                if t in ("-r", "-c", "-e", "--requirement", "--constraint", "-i", "--index-url",
                         "--extra-index-url", "-t", "--target", "--python", "-p", "--find-links", "-f"):
                    j += 2
                    continue
                if not t.startswith("-"):
                    found.append(t)
                j += 1
            i = j
            continue
        i += 1
    return found


class _Linter:
    def __init__(self, bundle: TaskBundle, include_optional: bool):
        self.b = bundle
        self.findings: list[LintFinding] = []
        self.include_optional = include_optional
        self.texts = {p: t for p, d in bundle.files.items() if (t := _text(d)) is not None}

    def add(self, rule: str, severity: str, path: str, message: str, line: int | None = None) -> None:
        self.findings.append(LintFinding(rule, severity, path, message, line))

    def in_dir(self, prefix: str) -> dict[str, str]:
        return {p: t for p, t in self.texts.items() if p.startswith(prefix)}

    def run(self) -> list[LintFinding]:
        self.config()
        self.task_files()
        self.artifacts()
        self.compose()
        self.images()
        self.python_pins()
        self.verifier_network()
        self.test_leak()
        self.reward_always_written()
        self.tests_run_solution()
        self.scripts()
        self.instruction_checks()
        if self.include_optional:
            self.optional()
        order = {"error": 0, "warning": 1, "info": 2}
        return sorted(self.findings, key=lambda f: (order.get(f.severity, 3), f.rule, f.path, f.line or 0))

    # ---- Harbor-named rules ----

    def config(self) -> None:
        try:
            data = self.b.task_toml
            config_from_toml(data)
        except TaskFormatError as exc:
            self.add("invalid-task-config", "error", "task.toml", exc.message)
            return
        except Exception as exc:  # a typed config holding values TOML cannot represent
            self.add("invalid-task-config", "error", "task.toml", f"cannot be serialised: {exc}")
            return
        cfg = self.b.config
        if cfg.difficulty is not None and cfg.difficulty not in ("easy", "medium", "hard", "unknown"):
            self.add("invalid-task-config", "warning", "task.toml",
                     f"[metadata] difficulty {cfg.difficulty!r} is not easy/medium/hard/unknown")
        for section, known in KNOWN_KEYS.items():
            table = data if section == "" else data.get(section)
            if not isinstance(table, dict):
                continue
            for key in table:
                if key not in known:
                    label = f"[{section}] {key}" if section else key
                    self.add("unknown-config-field", "warning", "task.toml",
                             f"{label} is not a Harbor task.toml field (Harbor ignores unknown keys silently)")
        minor = schema_minor(cfg.schema_version)
        for (section, key), need in NEWER_KEYS.items():
            table = data.get(section)
            if isinstance(table, dict) and key in table and minor < need:
                self.add("schema-version-feature", "warning", "task.toml",
                         f"[{section}] {key} needs schema_version 1.{need}+, file declares {cfg.schema_version}")
        for key in ("cpus", "memory_mb", "storage_mb"):
            if getattr(cfg, key) is None:
                self.add("resources-unset", "warning", "task.toml",
                         f"[environment] {key} is unset; current Harbor then uses the provider default")

    def task_files(self) -> None:
        b = self.b
        for path in b.files:
            try:
                check_relpath(path)
            except TaskFormatError as exc:
                self.add("invalid-task-files", "error", path, exc.message)
        try:
            check_required_files(b.files, b.config)
        except TaskFormatError as exc:
            self.add("invalid-task-files", "error", exc.file, exc.message)
        if not b.instruction.strip():
            self.add("invalid-task-files", "error", "instruction.md", "instruction is empty")
        env_ok = ("environment/Dockerfile" in b.files or "environment/docker-compose.yaml" in b.files
                  or b.config.docker_image)
        if not env_ok:
            self.add("invalid-task-files", "error", "environment/",
                     "needs environment/Dockerfile, environment/docker-compose.yaml or [environment] docker_image")
        if "solution/solve.sh" not in b.files and "solution/solve.bat" not in b.files:
            self.add("missing-solution", "error", "solution/solve.sh",
                     "missing: 2025-era Harbor rejects the task and the oracle agent cannot run it")

    def artifacts(self) -> None:
        arts = self.b.config.extra.get("artifacts") or []
        sources: list[str] = []
        for item in arts:
            src = item.get("source") if isinstance(item, dict) else item
            if isinstance(src, str) and src:
                sources.append(posixpath.normpath(src))
        for i, a in enumerate(sources):
            if a == "/logs" or a.startswith("/logs/"):
                self.add("artifact-log-overlap", "warning", "task.toml",
                         f"artifact {a} lies under /logs, which Harbor already collects")
            for b_ in sources[i + 1:]:
                if a == b_ or b_.startswith(a.rstrip("/") + "/") or a.startswith(b_.rstrip("/") + "/"):
                    self.add("overlapping-artifacts", "warning", "task.toml", f"artifacts {a} and {b_} overlap")

    def compose(self) -> None:
        path = "environment/docker-compose.yaml"
        if path not in self.b.files:
            return
        try:
            data = yaml.safe_load(self.b.files[path])
        except yaml.YAMLError as exc:
            self.add("invalid-task-files", "error", path, f"invalid YAML: {exc}", yaml_error_line(exc))
            return
        services = data.get("services") if isinstance(data, dict) else None
        if not isinstance(services, dict):
            return
        for name, svc in sorted(services.items()):
            if not isinstance(svc, dict):
                continue
            if svc.get("privileged") is True:
                self.add("compose-privileged", "error", path, f"service {name} is privileged")
            if svc.get("cap_add"):
                self.add("compose-additional-capabilities", "warning", path,
                         f"service {name} adds capabilities {svc['cap_add']}")
            for vol in svc.get("volumes") or []:
                if isinstance(vol, str):
                    parts = vol.split(":")
                    src, mode = parts[0], (parts[2] if len(parts) > 2 else "rw")
                    read_only = "ro" in mode.split(",")
                    bind = src.startswith(("/", ".", "~", "$")) and len(parts) > 1
                elif isinstance(vol, dict):
                    src = str(vol.get("source", ""))
                    read_only = bool(vol.get("read_only"))
                    bind = vol.get("type") == "bind"
                else:
                    continue
                if not bind:
                    continue
                if not read_only:
                    self.add("compose-writable-bind-mount", "warning", path,
                             f"service {name} bind-mounts {src} writable")
                if src.startswith(("/", "~", "$")) or posixpath.normpath(src).startswith(".."):
                    self.add("compose-external-bind-mount", "error", path,
                             f"service {name} bind-mounts {src} from outside environment/")

    def images(self) -> None:
        for path in _dockerfiles(self.b.files):
            text = self.texts.get(path)
            if text is None:
                continue
            stages: set[str] = set()
            for number, line in _logical_lines(text):
                m = re.match(r"(?i)^FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", line)
                if not m:
                    continue
                ref = m.group(1)
                if m.group(2):
                    stages.add(m.group(2).lower())
                if ref.lower() == "scratch" or ref.lower() in stages or "$" in ref:
                    continue
                if _image_unpinned(ref):
                    self.add("unpinned-image", "warning", path, f"base image {ref} has no tag or digest", number)
        image = self.b.config.docker_image
        if image and _image_unpinned(image):
            self.add("unpinned-image", "warning", "task.toml", f"[environment] docker_image {image} is not pinned")

    def python_pins(self) -> None:
        for path, text in sorted(self.texts.items()):
            if not path.startswith(("environment/", "tests/")):
                continue
            name = posixpath.basename(path)
            if re.match(r"^requirements.*\.txt$", name):
                for number, line in _logical_lines(text):
                    if not line.startswith("-") and _requirement_unpinned(line.split(";")[0].strip()):
                        self.add("unpinned-python-dependency", "warning", path, f"{line} is not pinned with ==",
                                 number)
                continue
            if not (name.endswith(".sh") or name == "Dockerfile" or name.startswith("Dockerfile")):
                continue
            for number, line in _logical_lines(text):
                for target in _pip_targets(line):
                    if _requirement_unpinned(target):
                        self.add("unpinned-python-dependency", "warning", path,
                                 f"{target} is installed without a pinned version (==)", number)

    def _test_script_lines(self) -> Iterable[tuple[str, int, str]]:
        for path, text in sorted(self.in_dir("tests/").items()):
            name = posixpath.basename(path)
            if name == "Dockerfile" or name.startswith("Dockerfile"):
                continue  # the separate verifier image is built before grading, not at grade time
            comment = "//" if name.endswith((".js", ".ts", ".go", ".rs", ".c", ".java")) else "#"
            for number, line in _logical_lines(text, comment):
                yield path, number, line

    def verifier_network(self) -> None:
        # One owner: validation's detector (task_defects.grade_time_network) decides, under
        # harbor lint's rule names.
        tests = {p: t for p, t in self.in_dir("tests/").items()
                 if not posixpath.basename(p).startswith("Dockerfile")}
        for found in task_defects.grade_time_network(tests):
            line = found["evidence"].strip()
            if "installs at grade time" in found["message"]:
                self.add("verifier-runtime-install", "error", found["file"],
                         f"installs software at grade time: {line[:120]}", found["line"])
            else:
                self.add("verifier-network-download", "error", found["file"],
                         f"downloads at grade time: {line[:120]}", found["line"])

    def test_leak(self) -> None:
        for path in _dockerfiles(self.b.files):
            text = self.texts.get(path) or ""
            for number, line in _logical_lines(text):
                m = re.match(r"(?i)^(COPY|ADD)\s+(.*)$", line)
                if not m:
                    continue
                args = [a for a in m.group(2).split() if not a.startswith("--")]
                for src in args[:-1]:
                    parts = posixpath.normpath(src.strip("\"'[],")).split("/")
                    if "tests" in parts or "solution" in parts or parts[-1] in ("solve.sh", "test.sh"):
                        self.add("agent-image-test-leak", "error", path,
                                 f"{m.group(1).upper()} {src} puts tests or solution into the agent image", number)
        secret = {}
        for p, d in self.b.files.items():
            if p.startswith(("tests/", "solution/")) and len(d.strip()) >= 16:
                secret.setdefault(hashlib.sha256(d).hexdigest(), p)
        for p, d in sorted(self.b.files.items()):
            if p.startswith("environment/") and (src := secret.get(hashlib.sha256(d).hexdigest())):
                self.add("agent-image-test-leak", "error", p, f"identical to {src}: the agent would see it")

    # ---- our rules ----

    def reward_always_written(self) -> None:
        path = "tests/test.sh"
        text = self.texts.get(path)
        if text is None:
            return
        lines = _logical_lines(text)
        if lines and text.startswith("#!") and re.search(r"\s-\w*e", text.splitlines()[0]):
            lines.insert(0, (1, "set -e"))
        writes = [(n, l) for n, l in lines if _REWARD_RE.search(l)]
        if not writes:
            helpers = [p for p, t in self.in_dir("tests/").items() if p != path and _REWARD_RE.search(t)]
            if helpers:
                self.add("reward-always-written", "warning", path,
                         f"the reward is written by {helpers[0]}; make sure every path writes it")
            else:
                self.add("reward-always-written", "error", path,
                         "never writes /logs/verifier/reward.txt or reward.json (Harbor ignores the exit code)")
            return
        if any(re.match(r"^trap\b.*\bEXIT\b", l) for _, l in lines):
            return  # an EXIT trap writing the reward covers every path, early exits included
        first = writes[0][0]
        errexit = False
        for number, line in lines:
            if number >= first:
                break
            if _ERREXIT_RE.search(line):
                errexit = True
            elif _ERREXIT_OFF_RE.search(line):
                errexit = False
            if _EXIT_RE.search(line):
                self.add("reward-always-written", "error", path,
                         f"exits before the reward file is written (line {number}); write it first or use a trap",
                         number)
                return
        if errexit:
            self.add("reward-always-written", "error", path,
                     "set -e is active before the reward is written: a failing test aborts without a reward")
            return
        literals = [m.group(1) for _, l in writes if (m := _REWARD_LITERAL_RE.match(l))]
        if len(literals) == len(writes) and len(set(literals)) == 1:
            self.add("reward-always-written", "error", path,
                     f"only ever writes reward {literals[0]}; the other outcome leaves no reward file", writes[0][0])
        tests_text = "\n".join(self.in_dir("tests/").values())
        if "reward.txt" in tests_text and "reward.json" in tests_text:
            self.add("reward-file-ambiguity", "warning", path,
                     "mentions both reward.txt and reward.json; Harbor's precedence changed, write exactly one")

    def tests_run_solution(self) -> None:
        for path, number, line in self._test_script_lines():
            if re.search(r"(^|[\s\"'=(])/solution\b|\bsolution/solve\.(sh|bat)\b|\bsolve\.sh\b", line):
                self.add("tests-run-solution", "error", path,
                         "tests refer to the solution (not present when a real agent runs)", number)

    def scripts(self) -> None:
        for path in ("tests/test.sh", "solution/solve.sh"):
            data = self.b.files.get(path)
            if data is not None and not data.startswith(b"#!"):
                self.add("script-shebang", "error", path, "has no #! line; current Harbor executes it directly")
        for path, number, line in self._test_script_lines():
            if re.search(r"\$\{?TEST_DIR\b|['\"]TEST_DIR['\"]", line):
                self.add("test-dir-env", "warning", path,
                         "uses TEST_DIR, which current Harbor no longer sets; use /tests", number)
        for path in _dockerfiles(self.b.files):
            text = self.texts.get(path) or ""
            if not re.search(r"(?im)^\s*WORKDIR\s", text):
                self.add("dockerfile-workdir", "warning", path,
                         "no WORKDIR: scripts would run from / (TB test.sh files abort there)")

    def instruction_checks(self) -> None:
        instruction = self.b.instruction
        squashed = " ".join(instruction.split())
        solve = self.texts.get("solution/solve.sh")
        if solve:
            # validation's detector decides whether the instruction gives the solution away; a
            # single long line found verbatim stays a warning below its threshold
            if revealed := task_defects.instruction_reveals_solution(instruction, solve):
                self.add("instruction-leaks-solution", "error", "instruction.md", revealed["message"],
                         revealed["line"])
            else:
                for number, line in _logical_lines(solve):
                    cmd = " ".join(line.split())
                    if len(cmd) >= _MIN_LEAK_CHARS and cmd in squashed:
                        self.add("instruction-leaks-solution", "warning", "instruction.md",
                                 f"contains solve.sh line {number} verbatim: {cmd[:80]}")
        corpus = "\n".join(t for p, t in self.texts.items() if p.startswith(("tests/", "solution/")))
        seen: set[str] = set()
        for m in _ABS_PATH_RE.finditer(instruction):
            p = m.group(1).rstrip(".,;:")
            if p.endswith("/") and len(p) > 1:
                p = p.rstrip("/")
            if p in seen or len(p) < 2 or p.startswith(_IGNORED_INSTRUCTION_PATHS):
                continue
            seen.add(p)
            if p not in corpus:
                self.add("instruction-path-unknown", "warning", "instruction.md",
                         f"{p} is mentioned in the instruction but not in tests/ or solution/")

    def optional(self) -> None:
        agent_user = self.b.config.extra.get("agent", {}).get("user")
        if agent_user in (None, "root", 0):
            self.add("root-agent", "info", "task.toml", "the agent runs as root ([agent] user unset or root)")
        if not separate_verifier(self.b.config):
            self.add("shared-verifier", "info", "task.toml",
                     "the verifier shares the agent's container (no separate verifier environment)")


def lint_task(bundle: TaskBundle, *, include_optional: bool = False) -> list[LintFinding]:
    """Static checks on a bundle; an empty list means clean. Findings are sorted errors first.

    Rules named as `harbor lint` names them (spec addendum; semantics are ours, the spec lists names only):
      invalid-task-config (error; warning for an unknown difficulty), unknown-config-field (warning),
      invalid-task-files (error: bad paths, missing tests/test.sh, empty instruction, no
      Dockerfile/compose/docker_image), overlapping-artifacts, artifact-log-overlap (warning),
      compose-privileged (error), compose-additional-capabilities (warning), compose-writable-bind-mount
      (warning), compose-external-bind-mount (error), unpinned-image (warning), unpinned-python-dependency
      (warning), verifier-runtime-install, verifier-network-download (error: tests/ installs or downloads
      at grade time), agent-image-test-leak (error: Dockerfile COPY/ADD of tests/ or solution/, or an
      environment/ file identical to a tests/ or solution/ file); optional root-agent, shared-verifier (info).
    Ours: reward-always-written (error), reward-file-ambiguity (warning), tests-run-solution (error),
      script-shebang (error), missing-solution (error), test-dir-env (warning), dockerfile-workdir
      (warning), schema-version-feature (warning), resources-unset (warning),
      instruction-leaks-solution (warning), instruction-path-unknown (warning).

    `include_optional` adds the informational root-agent and shared-verifier rules, which flag the
    ordinary TB setup and are therefore off by default.
    """
    return _Linter(bundle, include_optional).run()
