"""Reading, writing, linting and result parsing for Harbor tasks (Terminal-Bench 2.x), Django-free.

facet keeps a generated task as a `TaskBundle` (independent of disk) and exchanges it with Harbor as a
task directory:

    <task>/instruction.md   task.toml   environment/...   solution/solve.sh ...   tests/test.sh ...

What is implemented, from the research notes in docs/harbor-format.md ("the spec"):

* `write_task_dir` writes the conservative subset the spec recommends for exporters (§7): either
  `version = "1.0"` with `memory = "2G"` strings (TB 2.0 era) or `schema_version = "1.x"` with
  `memory_mb` / `storage_mb`. Keys we do not model are kept verbatim in `TaskConfig.extra`, so a task
  read from disk is written back without losing anything Harbor understands.
* `read_task_dir` reads both task.toml generations and Terminal-Bench 1.x tasks (converted; see
  `_read_tb1_dir` for the rules).
* `content_hash` is the identity of a task version in facet's DB (see its docstring).
* `lint_task` runs static checks named like `harbor lint`'s rules where the spec lists them, plus ours.
* `parse_reward`, `parse_test_results`, `read_job_dir` import Harbor run results (§3.4, §4.4).

Untrusted input: task directories and job directories may come from anywhere. Symlinks leaving the
directory, absolute symlinks, special files and oversized files are rejected; XML reports are parsed
only after a pass that refuses DOCTYPE and entity declarations.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import posixpath
import re
import shlex
import shutil
import stat
import tempfile
import tomllib
import unicodedata
import xml.etree.ElementTree as ET
import xml.parsers.expat
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

import tomli_w
import yaml

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_TOTAL_BYTES",
    "JobFormatError",
    "LintFinding",
    "ReportParseError",
    "TaskBundle",
    "TaskConfig",
    "TaskFormatError",
    "TestCase",
    "TrialResult",
    "canonical_task_toml",
    "content_hash",
    "lint_task",
    "parse_reward",
    "parse_rewards",
    "parse_test_results",
    "read_dataset",
    "read_job_dir",
    "read_task_dir",
    "task_dir_entries",
    "write_task_dir",
]

# Tasks are held in memory as bytes, so one task must stay small enough for that. TB tasks ship private
# test data (e.g. a tar.gz in tests/), hence generous but finite limits.
DEFAULT_MAX_FILE_BYTES = 100 * 1024 * 1024
DEFAULT_MAX_TOTAL_BYTES = 500 * 1024 * 1024
# Verifier logs and reports can be huge (a runaway test printing forever); we only keep a bounded prefix.
MAX_LOG_BYTES = 5 * 1024 * 1024
MAX_REPORT_BYTES = 50 * 1024 * 1024

HASH_SCHEME = "facet-task-sha256-v1"

# Names never taken into a bundle: VCS and cache litter, plus Harbor's publish archive (§1.2 `.gitignore`).
_IGNORED_NAMES = {".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".DS_Store", "Thumbs.db"}
_IGNORED_ROOT_NAMES = {"dist.tar.gz"}
_RESERVED_FILES = {"instruction.md", "task.toml"}


# --------------------------------------------------------------------------------------------------
# Errors and data classes
# --------------------------------------------------------------------------------------------------


class TaskFormatError(ValueError):
    """A task directory (or bundle) that Harbor would not accept, or that we refuse to read.

    `file` is the path inside the task ("task.toml", "tests/test.sh"), `field` the dotted key inside
    that file when there is one ("verifier.timeout_sec"), `line` a 1-based line when known, `task`
    the task directory when the error comes from disk. str() reads "task.toml: line 3: ...".
    """

    def __init__(self, file: str, message: str, *, field: str | None = None, line: int | None = None,
                 task: str | None = None):
        self.file = file
        self.message = message
        self.field = field
        self.line = line
        self.task = task
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f": line {self.line}"
        text = f"{where}: {self.message}"
        return f"{self.task}: {text}" if self.task else text

    def with_task(self, task: str) -> "TaskFormatError":
        return TaskFormatError(self.file, self.message, field=self.field, line=self.line, task=task)


class ReportParseError(ValueError):
    """A verifier report (JUnit XML, CTRF JSON) that is malformed or unsafe. Names the log file."""

    def __init__(self, file: str, message: str):
        self.file = file
        self.message = message
        super().__init__(f"{file}: {message}")


class JobFormatError(ValueError):
    """A problem with one trial of a Harbor job directory (`trial` is its directory name)."""

    def __init__(self, trial: str, file: str, message: str, *, field: str | None = None):
        self.trial = trial
        self.file = file
        self.field = field
        self.message = message
        super().__init__(f"{trial}/{file}: {message}")


@dataclass
class TaskConfig:
    """The typed view of task.toml. Everything not modelled here lives in `extra`, nested as in TOML.

    Defaults are the explicit values we export for new tasks (the 2025 Harbor defaults; the spec §8
    recommends setting resources explicitly because current Harbor leaves them to the provider).
    When reading, a key absent from the file becomes None, so a read task is written back as it was.

    `schema_version == "1.0"` is written as `version = "1.0"` with `memory = "2G"` strings, which both
    2025-era and current Harbor read; any "1.x" (x >= 1) is written as `schema_version` with `*_mb`.

    Our own keys live in [metadata] (Harbor does not interpret it, §2.4): `facet_scenario_id`,
    `facet_version_hash`, `facet_skills`. `version_hash` is the caller's (e.g. scenario/generator)
    hash; it cannot be `content_hash` itself, since task.toml is part of what that hash covers.
    """

    schema_version: str = "1.0"
    author_name: str | None = None
    author_email: str | None = None
    difficulty: str | None = None
    category: str | None = None
    tags: list[str] = field(default_factory=list)
    scenario_id: str | None = None
    version_hash: str | None = None
    skills: list[str] = field(default_factory=list)
    verifier_timeout_sec: float | None = 600.0
    agent_timeout_sec: float | None = 600.0
    build_timeout_sec: float | None = 600.0
    cpus: int | None = 1
    memory_mb: int | None = 2048
    storage_mb: int | None = 10240
    docker_image: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_toml_dict(self) -> dict[str, Any]:
        return _config_to_toml(self)

    @classmethod
    def from_toml_dict(cls, data: dict[str, Any], *, text: str | None = None) -> "TaskConfig":
        """Validate a parsed task.toml. Raises TaskFormatError naming file, field and (given the text) line."""
        return _config_from_toml(data, text)


@dataclass
class TaskBundle:
    """One task, independent of disk.

    `files` maps POSIX paths relative to the task root to bytes: environment/..., solution/...,
    tests/..., optionally README.md or .gitignore. instruction.md and task.toml are not in `files`:
    they come from `instruction` and `config`. `source_format` and `notes` (e.g. TB1 conversion
    notes) describe where the bundle came from and are not part of its identity.
    """

    name: str
    instruction: str
    config: TaskConfig = field(default_factory=TaskConfig)
    files: dict[str, bytes] = field(default_factory=dict)
    source_format: str = field(default="bundle", compare=False)
    notes: list[str] = field(default_factory=list, compare=False)

    @property
    def task_toml(self) -> dict[str, Any]:
        """task.toml as a dict in canonical order (what `write_task_dir` writes)."""
        return self.config.to_toml_dict()

    @classmethod
    def from_task_toml(cls, name: str, instruction: str, task_toml: dict[str, Any],
                       files: dict[str, bytes] | None = None) -> "TaskBundle":
        return cls(name=name, instruction=instruction, config=TaskConfig.from_toml_dict(task_toml),
                   files=dict(files or {}))


@dataclass(frozen=True)
class LintFinding:
    rule: str
    severity: str  # "error" | "warning" | "info"
    path: str
    message: str
    line: int | None = None


@dataclass(frozen=True)
class TestCase:
    __test__ = False  # not a pytest test class despite the name

    name: str
    outcome: str  # "passed" | "failed" | "error" | "skipped"
    message: str = ""


@dataclass
class TrialResult:
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
# task.toml: typed config <-> dict
# --------------------------------------------------------------------------------------------------

_SCHEMA_RE = re.compile(r"^1\.(\d+)$")
_PACKAGE_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([GgMmKk])\s*$")
_TOML_ERR_RE = re.compile(r"\(at line (\d+), column (\d+)\)")

# Canonical order of top-level tables, as Harbor's own dump orders them (§2.3); others follow sorted.
_TABLE_ORDER = ("task", "steps", "metadata", "verifier", "agent", "environment", "solution")

# Known keys per section (§2.1, §2.2 and the addendum), for the unknown-config-field lint rule.
_KNOWN_KEYS: dict[str, set[str]] = {
    "": {"schema_version", "version", "source", "artifacts", "multi_step_reward_strategy", "task", "metadata",
         "steps", "verifier", "agent", "environment", "solution"},
    "task": {"name", "version", "description", "authors", "keywords"},
    "verifier": {"timeout_sec", "env", "user", "network_mode", "allowed_hosts", "environment_mode",
                 "environment", "collect"},
    "agent": {"timeout_sec", "user", "network_mode", "allowed_hosts"},
    "environment": {"build_timeout_sec", "docker_image", "os", "cpus", "memory_mb", "storage_mb", "gpus",
                    "gpu_types", "tpu", "network_mode", "allowed_hosts", "allow_internet", "mcp_servers", "env",
                    "skills_dir", "healthcheck", "workdir", "memory", "storage"},
    "solution": {"env"},
}
# Keys that need a newer schema than "1.0"/"1.1" (§1.2, §2.2, §7.1: avoid unless targeting current Harbor).
_NEWER_KEYS = {
    ("verifier", "environment_mode"): 2, ("verifier", "environment"): 2,
    ("environment", "network_mode"): 3, ("environment", "allowed_hosts"): 3,
    ("verifier", "network_mode"): 3, ("agent", "network_mode"): 3,
}


def _locate(text: str | None, section: str, key: str | None) -> int | None:
    """Best-effort 1-based line of `key` inside `[section]` (or of the header) for error messages."""
    if not text:
        return None
    current = ""
    header_line = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", line)
        if m:
            current = m.group(1).replace(" ", "")
            if current == section and header_line is None:
                header_line = number
            continue
        if key is not None and current == section and re.match(rf"^{re.escape(key)}\s*=", line):
            return number
    return header_line if key is None else None


class _Checker:
    """Validation helpers that raise TaskFormatError naming task.toml, the field and its line."""

    def __init__(self, text: str | None, file: str = "task.toml"):
        self.text = text
        self.file = file

    def fail(self, section: str, key: str | None, message: str) -> TaskFormatError:
        label = f"[{section}] {key}" if section and key else (key or f"[{section}]")
        dotted = ".".join(p for p in (section, key) if p)
        return TaskFormatError(self.file, f"{label} {message}", field=dotted or None,
                               line=_locate(self.text, section, key))

    def table(self, data: dict, section: str) -> dict:
        value = data.get(section, {})
        if not isinstance(value, dict):
            raise self.fail("", section, "must be a table")
        return value

    def number(self, table: dict, section: str, key: str, *, positive: bool = True) -> float | None:
        if key not in table:
            return None
        value = table[key]
        # bool is an int subclass in Python, but `timeout_sec = true` is a mistake, not 1 second.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(section, key, f"must be a number (got {value!r})")
        if not math.isfinite(value) or (positive and value <= 0):
            raise self.fail(section, key, f"must be a positive number (got {value!r})")
        return float(value)

    def integer(self, table: dict, section: str, key: str, *, minimum: int = 0) -> int | None:
        if key not in table:
            return None
        value = table[key]
        # Harbor's pydantic models accept integral floats for int fields; so do we, and store an int.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(section, key, f"must be an integer (got {value!r})")
        if value < minimum:
            raise self.fail(section, key, f"must be at least {minimum} (got {value!r})")
        return value

    def string(self, table: dict, section: str, key: str) -> str | None:
        if key not in table:
            return None
        value = table[key]
        if not isinstance(value, str):
            raise self.fail(section, key, f"must be a string (got {value!r})")
        return value

    def strings(self, table: dict, section: str, key: str) -> list[str]:
        if key not in table:
            return []
        value = table[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(section, key, f"must be a list of strings (got {value!r})")
        return list(value)

    def size_mb(self, table: dict, section: str, key: str) -> int | None:
        """`memory = "2G"` style (§2.2: G is x1024, M is x1, K is /1024; other suffixes are errors)."""
        if key not in table:
            return None
        value = table[key]
        m = _SIZE_RE.match(value) if isinstance(value, str) else None
        if not m:
            raise self.fail(section, key, f'must be a size string like "2G" or "512M" (got {value!r})')
        number, unit = float(m.group(1)), m.group(2).upper()
        mb = number * {"G": 1024, "M": 1, "K": 1 / 1024}[unit]
        if mb <= 0:
            raise self.fail(section, key, f"must be positive (got {value!r})")
        return int(math.ceil(mb))


def _schema_minor(version: str) -> int:
    m = _SCHEMA_RE.match(version)
    return int(m.group(1)) if m else 0


def _config_from_toml(data: dict[str, Any], text: str | None = None) -> TaskConfig:
    c = _Checker(text)
    if not isinstance(data, dict):
        raise TaskFormatError("task.toml", "must be a TOML table")
    data = dict(data)

    # `version` (TB 2.0) was renamed to `schema_version` (1.1+); Harbor still maps the old key (§2.3).
    version = c.string(data, "", "version")
    schema = c.string(data, "", "schema_version")
    if version is not None and schema is not None and version != schema:
        raise c.fail("", "schema_version", f"({schema!r}) disagrees with version ({version!r})")
    schema = schema or version or "1.0"
    if not _SCHEMA_RE.match(schema):
        raise c.fail("", "schema_version" if "schema_version" in data else "version",
                     f"{schema!r} is not a supported task.toml schema (expected 1.x)")
    data.pop("version", None)
    data.pop("schema_version", None)

    cfg = TaskConfig(schema_version=schema, verifier_timeout_sec=None, agent_timeout_sec=None,
                     build_timeout_sec=None, cpus=None, memory_mb=None, storage_mb=None)

    task = c.table(data, "task")
    if "task" in data:
        name = c.string(task, "task", "name")
        if name is None:
            raise c.fail("task", "name", "is required when [task] is present")
        if not _PACKAGE_NAME_RE.match(name) or ".." in name:
            raise c.fail("task", "name", f'must look like "org/name" (got {name!r})')

    # [metadata] is free-form for Harbor (§2.1: dict[str, Any]), so a value of an unexpected type is not
    # an error: it stays in `extra` untouched and the typed field stays empty.
    meta = dict(c.table(data, "metadata"))
    for key, attr in (("author_name", "author_name"), ("author_email", "author_email"),
                      ("difficulty", "difficulty"), ("category", "category"),
                      ("facet_scenario_id", "scenario_id"), ("facet_version_hash", "version_hash")):
        if isinstance(meta.get(key), str):
            setattr(cfg, attr, meta.pop(key))
    for key, attr in (("tags", "tags"), ("facet_skills", "skills")):
        value = meta.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            setattr(cfg, attr, list(meta.pop(key)))

    verifier = dict(c.table(data, "verifier"))
    cfg.verifier_timeout_sec = c.number(verifier, "verifier", "timeout_sec")
    verifier.pop("timeout_sec", None)
    for key in ("env",):
        if key in verifier and not isinstance(verifier[key], dict):
            raise c.fail("verifier", key, "must be a table")

    agent = dict(c.table(data, "agent"))
    cfg.agent_timeout_sec = c.number(agent, "agent", "timeout_sec")
    agent.pop("timeout_sec", None)

    env = dict(c.table(data, "environment"))
    cfg.build_timeout_sec = c.number(env, "environment", "build_timeout_sec")
    cfg.cpus = c.integer(env, "environment", "cpus", minimum=1)
    cfg.docker_image = c.string(env, "environment", "docker_image")
    for new, old in (("memory_mb", "memory"), ("storage_mb", "storage")):
        mb = c.integer(env, "environment", new, minimum=1)
        legacy = c.size_mb(env, "environment", old)
        if mb is not None and legacy is not None and mb != legacy:
            # Harbor refuses a file where both forms are given and disagree (§2.2).
            raise c.fail("environment", old, f"({env[old]!r}) disagrees with {new} = {mb}")
        setattr(cfg, new, mb if mb is not None else legacy)
        env.pop(new, None)
        env.pop(old, None)
    for key in ("build_timeout_sec", "cpus", "docker_image"):
        env.pop(key, None)
    if "env" in env and not isinstance(env["env"], dict):
        raise c.fail("environment", "env", "must be a table")

    solution = c.table(data, "solution")
    if "env" in solution and not isinstance(solution["env"], dict):
        raise c.fail("solution", "env", "must be a table")
    if "artifacts" in data and not isinstance(data["artifacts"], list):
        raise c.fail("", "artifacts", "must be a list")

    extra = {k: v for k, v in data.items() if k not in ("metadata", "verifier", "agent", "environment")}
    for key, rest in (("metadata", meta), ("verifier", verifier), ("agent", agent), ("environment", env)):
        if rest:
            extra[key] = rest
    cfg.extra = _sorted_deep(extra)
    return cfg


def _sorted_deep(value: Any) -> Any:
    """Dicts with keys sorted at every level, so the canonical text never depends on insertion order."""
    if isinstance(value, dict):
        return {k: _sorted_deep(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_deep(v) for v in value]
    return value


_FACET_ATTR = {"facet_scenario_id": "scenario_id", "facet_version_hash": "version_hash", "facet_skills": "skills"}


def _format_size(mb: int) -> str:
    return f"{mb // 1024}G" if mb % 1024 == 0 else f"{mb}M"


def _config_to_toml(cfg: TaskConfig) -> dict[str, Any]:
    extra = _sorted_deep(cfg.extra or {})
    legacy = _schema_minor(cfg.schema_version) == 0

    root: dict[str, Any] = {("version" if legacy else "schema_version"): cfg.schema_version}
    scalars = {k: v for k, v in extra.items()
               if k not in _TABLE_ORDER and k not in ("version", "schema_version") and not isinstance(v, dict)}
    tables = {k: v for k, v in extra.items() if k not in _TABLE_ORDER and isinstance(v, dict)}
    root.update(scalars)

    def put(target: dict, key: str, value: Any) -> None:
        if value is not None:
            target[key] = value

    def merge(target: dict, rest: dict) -> None:
        # A typed field that is set wins over a same-named key a caller left in `extra`.
        for key, value in rest.items():
            target.setdefault(key, value)

    meta: dict[str, Any] = {}
    for key in ("author_name", "author_email", "difficulty", "category"):
        put(meta, key, getattr(cfg, key))
    meta["tags"] = list(cfg.tags)
    rest_meta = dict(extra.get("metadata", {}))
    for key, attr in _FACET_ATTR.items():
        if getattr(cfg, attr):
            rest_meta.pop(key, None)  # the typed value is written below, in its fixed place
    merge(meta, rest_meta)
    put(meta, "facet_scenario_id", cfg.scenario_id)
    put(meta, "facet_version_hash", cfg.version_hash)
    if cfg.skills:
        meta["facet_skills"] = list(cfg.skills)

    verifier: dict[str, Any] = {}
    put(verifier, "timeout_sec", None if cfg.verifier_timeout_sec is None else float(cfg.verifier_timeout_sec))
    merge(verifier, extra.get("verifier", {}))
    agent: dict[str, Any] = {}
    put(agent, "timeout_sec", None if cfg.agent_timeout_sec is None else float(cfg.agent_timeout_sec))
    merge(agent, extra.get("agent", {}))
    env: dict[str, Any] = {}
    put(env, "build_timeout_sec", None if cfg.build_timeout_sec is None else float(cfg.build_timeout_sec))
    put(env, "docker_image", cfg.docker_image)
    put(env, "cpus", cfg.cpus)
    if legacy:
        put(env, "memory", None if cfg.memory_mb is None else _format_size(cfg.memory_mb))
        put(env, "storage", None if cfg.storage_mb is None else _format_size(cfg.storage_mb))
    else:
        put(env, "memory_mb", cfg.memory_mb)
        put(env, "storage_mb", cfg.storage_mb)
    merge(env, extra.get("environment", {}))

    built = {"metadata": meta, "verifier": verifier, "agent": agent, "environment": env}
    for name in _TABLE_ORDER:
        value = built.get(name, extra.get(name))
        if value is None:
            continue
        if name in ("verifier", "agent", "environment") and not value and name not in extra:
            continue  # an empty [agent] table only appears if the source had one
        root[name] = value
    for name in sorted(tables):
        root[name] = tables[name]
    return root


def canonical_task_toml(bundle_or_config: TaskBundle | TaskConfig) -> str:
    """The exact task.toml text `write_task_dir` writes and `content_hash` covers."""
    cfg = bundle_or_config.config if isinstance(bundle_or_config, TaskBundle) else bundle_or_config
    return tomli_w.dumps(_config_to_toml(cfg))


# --------------------------------------------------------------------------------------------------
# Content hash
# --------------------------------------------------------------------------------------------------


def _nfc(path: str) -> str:
    # macOS hands out decomposed (NFD) names; hash and compare the composed form so the OS never matters.
    return unicodedata.normalize("NFC", path)


def _check_relpath(path: str) -> str:
    """Validate a bundle file key; returns it NFC-normalised or raises TaskFormatError."""
    if not isinstance(path, str) or not path:
        raise TaskFormatError(str(path), "file path must be a non-empty string")
    if "\\" in path or "\x00" in path:
        raise TaskFormatError(path, "file path must use '/' and contain no NUL")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        raise TaskFormatError(path, "absolute paths are not allowed in a task")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise TaskFormatError(path, "file path must be normalised (no empty, '.' or '..' components)")
    if path in _RESERVED_FILES:
        raise TaskFormatError(path, "is generated from the bundle's instruction/config; do not put it in files")
    return _nfc(path)


def _bundle_entries(bundle: TaskBundle) -> dict[str, bytes]:
    entries: dict[str, bytes] = {}
    for path, data in bundle.files.items():
        key = _check_relpath(path)
        if key in entries:
            raise TaskFormatError(path, "two file paths are the same after Unicode normalisation")
        if not isinstance(data, (bytes, bytearray)):
            raise TaskFormatError(path, f"file content must be bytes (got {type(data).__name__})")
        entries[key] = bytes(data)
    entries["instruction.md"] = bundle.instruction.encode("utf-8")
    entries["task.toml"] = canonical_task_toml(bundle).encode("utf-8")
    return entries


def content_hash(bundle: TaskBundle) -> str:
    """Identity of a task version: "sha256:<64 hex>".

    Definition (version `facet-task-sha256-v1`):
      entries = bundle.files + {"instruction.md": instruction as UTF-8,
                                "task.toml": canonical_task_toml(bundle) as UTF-8}
      paths are NFC-normalised POSIX paths relative to the task root;
      manifest = "facet-task-sha256-v1\\n" + for each path sorted by its UTF-8 bytes:
                 "<sha256 hex of the file bytes>  <path>\\n"
      content_hash = "sha256:" + sha256(manifest as UTF-8)

    Not covered: the bundle name/task directory name, file modes (derived: *.sh are 0755), mtimes,
    `source_format`/`notes`. task.toml enters in canonical form, so key order, comments and
    formatting of a hand-written file do not matter, and `memory = "2G"` equals `memory = "2048M"`.
    The canonical text is produced by tomli_w; a golden-value test guards against formatting drift.
    """
    entries = _bundle_entries(bundle)
    lines = [HASH_SCHEME + "\n"]
    for path in sorted(entries, key=lambda p: p.encode("utf-8")):
        lines.append(f"{hashlib.sha256(entries[path]).hexdigest()}  {path}\n")
    return "sha256:" + hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def _separate_verifier(cfg: TaskConfig) -> bool:
    verifier = cfg.extra.get("verifier", {})
    return verifier.get("environment_mode") == "separate" or isinstance(verifier.get("environment"), dict)


def _check_required(bundle_files: Iterable[str], cfg: TaskConfig) -> None:
    files = set(bundle_files)
    windows = cfg.extra.get("environment", {}).get("os") == "windows"
    tests = {"tests/test.sh", "tests/test.bat"} if windows else {"tests/test.sh"}
    if not files & tests and not _separate_verifier(cfg):
        raise TaskFormatError("tests/test.sh", "missing tests/test.sh (Harbor requires it)")


# The directories every written task has (Harbor requires environment/ even with a prebuilt
# docker_image, §1.2; solution/ and tests/ are where the oracle and the verifier look).
_TASK_DIRS = ("environment", "solution", "tests")


def _file_mode(path: str) -> int:
    return 0o755 if path.endswith(".sh") else 0o644


def task_dir_entries(bundle: TaskBundle) -> list[tuple[str, bytes | None, int]]:
    """The task directory as (relative path, bytes or None for a directory, mode), sorted by
    path with every directory before its contents: exactly what `write_task_dir` writes, for
    writers that stream a task into an archive instead of onto disk (dataset exports).
    Validates the bundle as `write_task_dir` does (paths, required files)."""
    entries = _bundle_entries(bundle)
    _check_required(entries, bundle.config)
    dirs = set(_TASK_DIRS)
    for path in entries:
        parts = path.split("/")[:-1]
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    out: list[tuple[str, bytes | None, int]] = [(d, None, 0o755) for d in dirs]
    out += [(path, data, _file_mode(path)) for path, data in entries.items()]
    # "a/b" sorts after "a" and before "a0" when compared component-wise; plain string order
    # would put "a-b/x" between "a" and "a/x".
    return sorted(out, key=lambda e: e[0].split("/"))


def write_task_dir(bundle: TaskBundle, dest: Path, *, layout: str = "harbor", overwrite: bool = False) -> Path:
    """Write `bundle` as a Harbor task directory at `dest` (the task directory itself).

    The whole task is written into a temporary sibling directory and renamed into place, so a
    failure never leaves a half-written task. Output is deterministic: the same bundle always
    yields byte-identical files (same names, content and modes). `*.sh` files are 0755, other
    files 0644, directories 0755. environment/, solution/ and tests/ always exist (Harbor requires
    environment/ even with a prebuilt docker_image, §1.2). With `overwrite`, an existing `dest` is
    replaced (moved aside, then deleted after the new one is in place).
    """
    if layout != "harbor":
        raise ValueError(f"unsupported layout {layout!r} (only 'harbor' is written)")
    entries = _bundle_entries(bundle)  # validates paths and serialises task.toml before touching disk
    _check_required(entries, bundle.config)
    dest = Path(dest)
    if dest.exists() and not overwrite:
        raise FileExistsError(f"{dest} already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)

    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        for sub in _TASK_DIRS:
            (tmp / sub).mkdir()
        for path in sorted(entries):
            target = tmp.joinpath(*path.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as fh:  # binary: no newline translation on any OS
                fh.write(entries[path])
            os.chmod(target, _file_mode(path))
        for dirpath, dirnames, _ in os.walk(tmp):
            for d in dirnames:
                os.chmod(os.path.join(dirpath, d), 0o755)
        os.chmod(tmp, 0o755)  # mkdtemp creates 0700
        if dest.exists():
            aside = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
            os.rmdir(aside)
            os.rename(dest, aside)
            try:
                os.rename(tmp, dest)
            except BaseException:
                os.rename(aside, dest)
                raise
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------


def _collect_files(root: Path, *, max_file_bytes: int, max_total_bytes: int) -> dict[str, bytes]:
    """All regular files below `root` as {posix relpath: bytes}.

    Symlinks are followed only when they stay inside the task (resolved) and are relative; absolute
    targets would change meaning once the task is copied elsewhere. Special files are refused.
    """
    root_real = root.resolve()
    out: dict[str, bytes] = {}
    total = 0

    def read_file(p: Path, rel: str, size: int) -> None:
        nonlocal total
        if size > max_file_bytes:
            raise TaskFormatError(rel, f"file is {size} bytes, over the {max_file_bytes}-byte limit")
        with open(p, "rb") as fh:
            data = fh.read(max_file_bytes + 1)
        if len(data) > max_file_bytes:
            raise TaskFormatError(rel, f"file is over the {max_file_bytes}-byte limit")
        total += len(data)
        if total > max_total_bytes:
            raise TaskFormatError(rel, f"task files exceed the {max_total_bytes}-byte total limit")
        key = _check_relpath(rel)
        if key in out:
            raise TaskFormatError(rel, "two file names are the same after Unicode normalisation")
        out[key] = data

    def walk(directory: Path, prefix: str, active: frozenset) -> None:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            rel = prefix + entry.name
            if entry.name in _IGNORED_NAMES or entry.name.endswith(".pyc"):
                continue
            if not prefix and (entry.name in _IGNORED_ROOT_NAMES or entry.name in _RESERVED_FILES):
                continue
            p = Path(entry.path)
            if entry.is_symlink():
                link = os.readlink(p)
                if os.path.isabs(link):
                    raise TaskFormatError(rel, f"symlink has an absolute target ({link}); use a relative link")
                try:
                    target = p.resolve(strict=True)
                except (OSError, RuntimeError):
                    raise TaskFormatError(rel, f"broken or looping symlink ({link})") from None
                if not target.is_relative_to(root_real):
                    raise TaskFormatError(rel, f"symlink points outside the task directory ({link})")
                st = target.stat()
                if stat.S_ISDIR(st.st_mode):
                    if target in active:
                        raise TaskFormatError(rel, "symlink loop")
                    walk(target, rel + "/", active | {target})
                elif stat.S_ISREG(st.st_mode):
                    read_file(target, rel, st.st_size)
                else:
                    raise TaskFormatError(rel, "symlink to a special file")
                continue
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                walk(p, rel + "/", active | {p.resolve()})
            elif stat.S_ISREG(st.st_mode):
                read_file(p, rel, st.st_size)
            else:
                raise TaskFormatError(rel, "special file (device, fifo or socket) is not allowed in a task")

    walk(root, "", frozenset({root_real}))
    return out


def _decode(data: bytes, file: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFormatError(file, f"not valid UTF-8 (byte {exc.start})") from None


def _parse_toml(text: str, file: str = "task.toml") -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_ERR_RE.search(msg)
        line = int(m.group(1)) if m else None
        msg = _TOML_ERR_RE.sub("", msg).strip()
        raise TaskFormatError(file, f"invalid TOML: {msg}", line=line) from None


def read_task_dir(path: Path, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                  max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES) -> TaskBundle:
    """Read a Harbor task (task.toml with `version` or `schema_version`) or a Terminal-Bench 1.x task
    (task.yaml) into a bundle. Raises TaskFormatError naming the file (and field/line) on any problem.

    The bundle name is `[task].name` when present, otherwise the directory name (as Harbor does, §1.2).
    """
    path = Path(path)
    task_label = str(path)
    try:
        if not path.is_dir():
            raise TaskFormatError(".", "not a directory")
        if (path / "task.toml").is_file() or not (path / "task.yaml").exists():
            return _read_harbor_dir(path, max_file_bytes, max_total_bytes)
        return _read_tb1_dir(path, max_file_bytes, max_total_bytes)
    except TaskFormatError as exc:
        raise exc.with_task(task_label) from None


def _read_small(path: Path, rel: str, max_bytes: int) -> bytes:
    if path.is_symlink():
        raise TaskFormatError(rel, "must be a regular file, not a symlink")
    if not path.is_file():
        raise TaskFormatError(rel, f"missing {rel}")
    size = path.stat().st_size
    if size > max_bytes:
        raise TaskFormatError(rel, f"file is {size} bytes, over the {max_bytes}-byte limit")
    return path.read_bytes()


def _read_harbor_dir(path: Path, max_file_bytes: int, max_total_bytes: int) -> TaskBundle:
    if not (path / "task.toml").exists():
        raise TaskFormatError("task.toml", "missing task.toml (and no Terminal-Bench 1.x task.yaml)")
    toml_text = _decode(_read_small(path / "task.toml", "task.toml", max_file_bytes), "task.toml")
    cfg = _config_from_toml(_parse_toml(toml_text), toml_text)
    if "steps" in cfg.extra:
        raise TaskFormatError("task.toml", "multi-step tasks ([[steps]]) are not supported by facet", field="steps",
                              line=_locate(toml_text, "steps", None))
    instruction = _decode(_read_small(path / "instruction.md", "instruction.md", max_file_bytes), "instruction.md")
    if not (path / "environment").is_dir():
        raise TaskFormatError("environment/", "missing environment/ directory (Harbor requires it)")
    files = _collect_files(path, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes)
    _check_required(files, cfg)
    name = cfg.extra.get("task", {}).get("name") or path.name
    minor = _schema_minor(cfg.schema_version)
    return TaskBundle(name=name, instruction=instruction, config=cfg, files=files,
                      source_format=f"harbor-{cfg.schema_version}" if minor else "harbor-1.0")


# ---- Terminal-Bench 1.x -------------------------------------------------------------------------

_TB1_DROPPED = ("parser_name", "run_tests_in_same_shell", "disable_asciinema")
_TB1_META = ("author_name", "author_email", "difficulty", "category", "tags", "estimated_duration_sec",
             "expert_time_estimate_min", "junior_time_estimate_min")
_TB1_COMPOSE_KEYS = {"build", "image", "container_name", "command", "environment", "volumes", "working_dir"}

_REWARD_TRAP = """\
# Converted by facet from a Terminal-Bench 1.x run-tests.sh. TB1 graded the run itself; Harbor only reads
# /logs/verifier/reward.txt, so the script's exit status becomes the reward on every exit path (EXIT trap).
# $TEST_DIR references were rewritten to /tests; TEST_DIR is still exported for helpers that read it.
export TEST_DIR=/tests
mkdir -p /logs/verifier
__facet_write_reward() {
  __facet_status=$?
  if [ "$__facet_status" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
}
trap __facet_write_reward EXIT
"""

_REWARD_SUFFIX = """
# Added by facet (TB1 conversion): the script sets its own EXIT trap, so the reward is written here instead.
__facet_status=$?
if [ "$__facet_status" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
exit $__facet_status
"""


def _convert_run_tests(text: str, notes: list[str]) -> str:
    shebang = "#!/bin/bash"
    body = text
    if body.startswith("#!"):
        first, _, body = body.partition("\n")
        shebang = first.rstrip()
    else:
        notes.append("run-tests.sh had no shebang; tests/test.sh starts with #!/bin/bash (Harbor runs it directly)")
    body, count = re.subn(r"\$\{TEST_DIR\}|\$TEST_DIR\b", "/tests", body)
    if count:
        notes.append(f"rewrote {count} $TEST_DIR reference(s) in run-tests.sh to /tests")
    if re.search(r"^\s*trap\b.*\b(EXIT|0)\s*$", body, re.M):
        notes.append("run-tests.sh sets its own EXIT trap; reward written by a suffix after the script instead")
        head = "export TEST_DIR=/tests\nmkdir -p /logs/verifier\n"
        return f"{shebang}\n{head}{body.rstrip()}\n{_REWARD_SUFFIX}"
    return f"{shebang}\n{_REWARD_TRAP}\n{body}" if body.endswith("\n") else f"{shebang}\n{_REWARD_TRAP}\n{body}\n"


def _yaml_line(exc: yaml.YAMLError) -> int | None:
    mark = getattr(exc, "problem_mark", None)
    return mark.line + 1 if mark is not None else None


def _env_pairs(value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [(str(k), "" if v is None else str(v)) for k, v in value.items()]
    pairs = []
    for item in value or []:
        if isinstance(item, str) and "=" in item:
            k, v = item.split("=", 1)
            pairs.append((k, v))
    return pairs


def _dockerfile_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _convert_tb1_compose(text: str, env_files: dict[str, bytes], cfg: TaskConfig, notes: list[str]) -> None:
    """Fold a TB1 docker-compose.yaml into environment/ (mutates env_files, keys relative to environment/).

    A compose file with the single TB client service and only TB-managed settings is dropped; its
    `environment:` and `working_dir` become ENV/WORKDIR lines in the Dockerfile. Anything more
    (sidecars, ports, extra keys) is kept as a Harbor compose file whose client service is renamed
    `main`, with TB-managed keys removed: Harbor builds `main` itself from environment/.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TaskFormatError("docker-compose.yaml", f"invalid YAML: {exc}", line=_yaml_line(exc)) from None
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        raise TaskFormatError("docker-compose.yaml", "services must be a non-empty mapping", field="services")
    client_name = "client" if "client" in services else (next(iter(services)) if len(services) == 1 else None)
    if client_name is None:
        raise TaskFormatError("docker-compose.yaml", "no 'client' service", field="services.client")
    client = services[client_name]
    if not isinstance(client, dict):
        raise TaskFormatError("docker-compose.yaml", f"services.{client_name} must be a mapping",
                              field=f"services.{client_name}")

    build = client.get("build")
    if isinstance(build, str):
        build = {"context": build}
    if build is not None and not isinstance(build, dict):
        raise TaskFormatError("docker-compose.yaml", "build must be a string or mapping",
                              field=f"services.{client_name}.build")
    if build is None:
        image = client.get("image")
        if isinstance(image, str) and "${" not in image and "Dockerfile" not in env_files:
            cfg.docker_image = image
            notes.append(f"client service has no build; using its image {image} as [environment] docker_image")
        elif "Dockerfile" not in env_files:
            raise TaskFormatError("docker-compose.yaml", "client service has neither a build nor a fixed image",
                                  field=f"services.{client_name}.build")
    else:
        context = str(build.get("context", ".")).rstrip("/") or "."
        if context not in (".", "./"):
            raise TaskFormatError("docker-compose.yaml", f"build context {context!r} is not supported (expected '.')",
                                  field=f"services.{client_name}.build.context")
        dockerfile = str(build.get("dockerfile", "Dockerfile"))
        dockerfile = posixpath.normpath(dockerfile)
        if dockerfile != "Dockerfile":
            if dockerfile not in env_files:
                raise TaskFormatError("docker-compose.yaml", f"dockerfile {dockerfile!r} not found",
                                      field=f"services.{client_name}.build.dockerfile")
            if "Dockerfile" in env_files:
                raise TaskFormatError("docker-compose.yaml", f"dockerfile {dockerfile!r} given but a Dockerfile "
                                      "also exists", field=f"services.{client_name}.build.dockerfile")
            env_files["Dockerfile"] = env_files.pop(dockerfile)
            notes.append(f"renamed {dockerfile} to environment/Dockerfile")
        if "Dockerfile" not in env_files:
            raise TaskFormatError("Dockerfile", "missing Dockerfile (docker-compose.yaml builds the client from it)")

    extra_env = [(k, v) for k, v in _env_pairs(client.get("environment"))
                 if k != "TEST_DIR" and "T_BENCH" not in v]
    volumes = client.get("volumes") or []
    own_volumes = [v for v in volumes if not (isinstance(v, str) and "T_BENCH" in v)]
    simple = (len(services) == 1 and set(client) <= _TB1_COMPOSE_KEYS and not own_volumes
              and "Dockerfile" in env_files)
    if simple:
        lines = [f"ENV {k}={_dockerfile_quote(v)}" for k, v in extra_env]
        workdir = client.get("working_dir")
        if isinstance(workdir, str) and workdir:
            lines.append(f"WORKDIR {workdir}")
        if lines:
            df = env_files["Dockerfile"].decode("utf-8", "replace").rstrip("\n")
            env_files["Dockerfile"] = (df + "\n\n# Added by facet from the TB1 docker-compose.yaml\n"
                                       + "\n".join(lines) + "\n").encode("utf-8")
            notes.append("folded docker-compose.yaml environment/working_dir into the Dockerfile")
        notes.append("dropped the TB1 docker-compose.yaml (single client service; Harbor builds environment/)")
        return

    main = {k: v for k, v in client.items() if k not in ("build", "image", "container_name", "command")}
    if extra_env:
        main["environment"] = {k: v for k, v in extra_env}
    else:
        main.pop("environment", None)
    if own_volumes:
        main["volumes"] = own_volumes
    else:
        main.pop("volumes", None)
    new_services = {"main": main, **{k: v for k, v in services.items() if k != client_name}}
    out = {k: v for k, v in data.items() if k not in ("services", "version")}
    out["services"] = new_services
    env_files["docker-compose.yaml"] = yaml.safe_dump(out, sort_keys=True).encode("utf-8")
    notes.append("kept docker-compose.yaml as a Harbor compose file (client renamed to main, TB-managed keys "
                 "removed); review relative build contexts of other services by hand")


def _read_tb1_dir(path: Path, max_file_bytes: int, max_total_bytes: int) -> TaskBundle:
    """Convert a Terminal-Bench 1.x task (spec §5) to our Harbor bundle layout.

    * instruction.md    <- task.yaml `instruction`
    * [metadata]        <- task.yaml author_name, author_email, difficulty, category, tags and the
                           time estimates (same key names); parser_name, run_tests_in_same_shell and
                           disable_asciinema are dropped
    * [agent] timeout   <- max_agent_timeout_sec (TB1 default 360); [verifier] timeout <- max_test_timeout_sec
                           (TB1 default 60); resources are set to the 2025 Harbor defaults explicitly
    * solution/solve.sh <- solution.sh (shebang added if missing); solution.yaml is rejected
    * tests/test.sh     <- run-tests.sh, $TEST_DIR -> /tests, reward.txt written from the exit status by an
                           EXIT trap (so an early `exit` or `set -e` abort still writes a reward)
    * tests/...         <- tests/...
    * environment/...   <- Dockerfile and every other top-level file (TB1's build context was the task root);
                           docker-compose.yaml folded in or converted (see _convert_tb1_compose)
    """
    notes: list[str] = []
    raw = _decode(_read_small(path / "task.yaml", "task.yaml", max_file_bytes), "task.yaml")
    try:
        meta = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise TaskFormatError("task.yaml", f"invalid YAML: {exc}", line=_yaml_line(exc)) from None
    if not isinstance(meta, dict):
        raise TaskFormatError("task.yaml", "must be a YAML mapping")
    instruction = meta.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFormatError("task.yaml", "instruction must be a non-empty string", field="instruction")

    files = _collect_files(path, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes)
    if "solution.yaml" in files and "solution.sh" not in files:
        raise TaskFormatError("solution.yaml", "command-list solutions are not supported; provide solution.sh")
    if "run-tests.sh" not in files:
        raise TaskFormatError("run-tests.sh", "missing run-tests.sh (it becomes tests/test.sh)")

    table: dict[str, Any] = {"version": "1.0", "metadata": {}}
    for key in _TB1_META:
        if key in meta and meta[key] is not None:
            table["metadata"][key] = meta[key]
    dropped = [k for k in _TB1_DROPPED if k in meta]
    if dropped:
        notes.append("dropped task.yaml keys with no Harbor equivalent: " + ", ".join(dropped))
    if meta.get("parser_name", "pytest") != "pytest":
        notes.append(f"parser_name {meta['parser_name']!r}: reward now comes from run-tests.sh's exit status")
    timeouts = (("max_agent_timeout_sec", "agent", 360.0), ("max_test_timeout_sec", "verifier", 60.0))
    for key, section, default in timeouts:
        value = meta.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            line = next((n for n, l in enumerate(raw.splitlines(), 1) if l.startswith(f"{key}:")), None)
            raise TaskFormatError("task.yaml", f"{key} must be a positive number (got {value!r})", field=key,
                                  line=line)
        table[section] = {"timeout_sec": float(value)}
    table["environment"] = {"build_timeout_sec": 600.0, "cpus": 1, "memory": "2G", "storage": "10G"}
    cfg = _config_from_toml(table)

    out: dict[str, bytes] = {}
    env_files: dict[str, bytes] = {}
    for rel, data in files.items():
        if rel in ("task.yaml", "solution.sh", "solution.yaml", "run-tests.sh", "docker-compose.yaml",
                   "docker-compose.yml"):
            continue
        if rel.startswith("tests/"):
            out[rel] = data
        elif rel in ("README.md", ".gitignore"):
            out[rel] = data
        else:
            env_files[rel] = data
    if "tests/test.sh" in out:
        raise TaskFormatError("tests/test.sh", "already exists; cannot place the converted run-tests.sh there")

    compose_name = next((n for n in ("docker-compose.yaml", "docker-compose.yml") if n in files), None)
    if compose_name:
        _convert_tb1_compose(_decode(files[compose_name], compose_name), env_files, cfg, notes)
    elif "Dockerfile" not in env_files:
        raise TaskFormatError("docker-compose.yaml", "missing docker-compose.yaml or Dockerfile")

    out.update({f"environment/{k}": v for k, v in env_files.items()})
    out["tests/test.sh"] = _convert_run_tests(_decode(files["run-tests.sh"], "run-tests.sh"), notes).encode("utf-8")
    if "solution.sh" in files:
        solve = files["solution.sh"]
        if not solve.startswith(b"#!"):
            solve = b"#!/bin/bash\n" + solve
            notes.append("solution.sh had no shebang; solution/solve.sh starts with #!/bin/bash")
        out["solution/solve.sh"] = solve
    else:
        notes.append("no solution.sh: the oracle agent cannot run this task")
    return TaskBundle(name=path.name, instruction=instruction, config=cfg, files=out,
                      source_format="terminal-bench-1", notes=notes)


# ---- Datasets -----------------------------------------------------------------------------------


def _looks_like_task(d: Path) -> bool:
    return any((d / n).exists() for n in ("task.toml", "task.yaml", "instruction.md"))


def read_dataset(path: Path, *, dataset: str | None = None, **limits: int
                 ) -> tuple[list[TaskBundle], list[TaskFormatError]]:
    """Read every task of a dataset, skipping bad ones with their errors.

    * a task directory itself -> that one task;
    * a directory with registry.json (or a path to such a .json file) -> the legacy registry (§4.2):
      tasks without git_url are read from `path` relative to the registry file; git tasks are
      reported as errors (we do not clone). `dataset="name@version"` (or "name") picks one dataset;
    * otherwise every immediate, non-hidden sub-directory that looks like a task (has task.toml,
      task.yaml or instruction.md), like `harbor run -p DIR` (§1.2). Other sub-directories are ignored.
    """
    path = Path(path)
    registry = path if path.is_file() else path / "registry.json"
    if path.is_dir() and _looks_like_task(path):
        try:
            return [read_task_dir(path, **limits)], []
        except TaskFormatError as exc:
            return [], [exc]
    if registry.is_file():
        return _read_registry(registry, dataset, limits)
    bundles: list[TaskBundle] = []
    errors: list[TaskFormatError] = []
    if not path.is_dir():
        return [], [TaskFormatError(str(path), "not a directory or registry.json")]
    for sub in sorted(path.iterdir(), key=lambda p: p.name):
        if sub.name.startswith(".") or not sub.is_dir() or not _looks_like_task(sub):
            continue
        if sub.is_symlink() and not sub.resolve().is_relative_to(path.resolve()):
            errors.append(TaskFormatError(sub.name, "symlink points outside the dataset directory", task=str(sub)))
            continue
        try:
            bundles.append(read_task_dir(sub, **limits))
        except TaskFormatError as exc:
            errors.append(exc)
    return bundles, errors


def _read_registry(registry: Path, dataset: str | None, limits: dict) -> tuple[list[TaskBundle], list[TaskFormatError]]:
    file = registry.name
    try:
        specs = json.loads(registry.read_bytes())
    except (OSError, ValueError) as exc:
        return [], [TaskFormatError(file, f"invalid JSON: {exc}")]
    if isinstance(specs, dict):
        specs = [specs]
    if not isinstance(specs, list):
        return [], [TaskFormatError(file, "must be a JSON array of datasets")]
    base = registry.parent.resolve()
    bundles: list[TaskBundle] = []
    errors: list[TaskFormatError] = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict) or not isinstance(spec.get("tasks"), list):
            errors.append(TaskFormatError(file, f"[{i}].tasks must be a list", field=f"[{i}].tasks"))
            continue
        label = f"{spec.get('name')}@{spec.get('version')}"
        if dataset is not None and dataset not in (label, spec.get("name")):
            continue
        for j, entry in enumerate(spec["tasks"]):
            where = f"[{i}].tasks[{j}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                errors.append(TaskFormatError(file, f"{where}.path must be a string", field=f"{where}.path"))
                continue
            if entry.get("git_url"):
                errors.append(TaskFormatError(file, f"{where} ({entry.get('name')}): git tasks "
                                              f"({entry['git_url']}) are not fetched; clone them first",
                                              field=f"{where}.git_url"))
                continue
            rel = entry["path"]
            if os.path.isabs(rel) or re.match(r"^[A-Za-z]:", rel):
                errors.append(TaskFormatError(file, f"{where}.path {rel!r} is absolute", field=f"{where}.path"))
                continue
            target = (base / rel).resolve()
            if not target.is_relative_to(base):
                errors.append(TaskFormatError(file, f"{where}.path {rel!r} leaves the registry directory",
                                              field=f"{where}.path"))
                continue
            try:
                bundle = read_task_dir(target, **limits)
            except TaskFormatError as exc:
                errors.append(exc)
                continue
            if isinstance(entry.get("name"), str) and "task" not in bundle.config.extra:
                bundle.name = entry["name"]
            bundles.append(bundle)
    return bundles, errors


# --------------------------------------------------------------------------------------------------
# Lint
# --------------------------------------------------------------------------------------------------

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


_INSTALL_RES = [
    re.compile(r"\b(apt-get|apt|apk|yum|dnf|microdnf|zypper)\s+(?:-\S+\s+)*(install|add|update|upgrade)\b"),
    re.compile(r"\bpip3?\s+(?:-\S+\s+)*install\b"),
    re.compile(r"\bpython[0-9.]*\s+-m\s+pip\s+install\b"),
    re.compile(r"\buv\s+(add|sync|init|pip\s+install|tool\s+install|python\s+install)\b"),
    re.compile(r"\buv\s+run\b.*\s--with\b"),
    re.compile(r"(^|[\s;&|(`])uvx\s"),
    re.compile(r"\bnpm\s+(install|i|ci)\b"),
    re.compile(r"\b(conda|mamba|micromamba)\s+install\b"),
    re.compile(r"\b(gem|cargo|go)\s+install\b"),
]
_DOWNLOAD_RES = [
    re.compile(r"\b(curl|wget)\b.*\b(https?|ftp)://"),
    re.compile(r"\bgit\s+clone\b"),
    re.compile(r"\bpip3?\s+download\b"),
    re.compile(r"\b(urlopen|urlretrieve|requests\.(get|post))\s*\(\s*[\"'](https?|ftp)://"),
]
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
            _config_from_toml(data)
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
        for section, known in _KNOWN_KEYS.items():
            table = data if section == "" else data.get(section)
            if not isinstance(table, dict):
                continue
            for key in table:
                if key not in known:
                    label = f"[{section}] {key}" if section else key
                    self.add("unknown-config-field", "warning", "task.toml",
                             f"{label} is not a Harbor task.toml field (Harbor ignores unknown keys silently)")
        minor = _schema_minor(cfg.schema_version)
        for (section, key), need in _NEWER_KEYS.items():
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
                _check_relpath(path)
            except TaskFormatError as exc:
                self.add("invalid-task-files", "error", path, exc.message)
        try:
            _check_required(b.files, b.config)
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
            self.add("invalid-task-files", "error", path, f"invalid YAML: {exc}", _yaml_line(exc))
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
        for path, number, line in self._test_script_lines():
            if any(r.search(line) for r in _INSTALL_RES):
                self.add("verifier-runtime-install", "error", path,
                         f"installs software at grade time: {line[:120]}", number)
            if any(r.search(line) for r in _DOWNLOAD_RES):
                self.add("verifier-network-download", "error", path,
                         f"downloads at grade time: {line[:120]}", number)

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
        if not _separate_verifier(self.b.config):
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


# --------------------------------------------------------------------------------------------------
# Verifier output
# --------------------------------------------------------------------------------------------------


def _find_log(logs: dict[str, bytes], name: str) -> tuple[str, bytes] | None:
    """The log whose basename is `name`; a top-level key wins over nested ones (e.g. 'verifier/...')."""
    hits = sorted((k for k in logs if posixpath.basename(k) == name), key=lambda k: (k.count("/"), k))
    return (hits[0], logs[hits[0]]) if hits else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _reward_txt(data: bytes) -> float | None:
    try:
        value = float(data.decode("utf-8").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def parse_rewards(logs: dict[str, bytes]) -> dict[str, float]:
    """All rewards from /logs/verifier (keys are file names relative to it, e.g. "reward.json").

    Follows current Harbor (§3.4): reward.json first (an object; only int/float values kept, booleans
    dropped), falling back to reward.txt as {"reward": value}; if reward.json lacks "reward" and
    reward.txt exists, the txt value is merged in as "reward". Empty or malformed files give {}.
    """
    rewards: dict[str, float] = {}
    js = _find_log(logs, "reward.json")
    txt = _find_log(logs, "reward.txt")
    if js is not None:
        try:
            obj = json.loads(js[1])
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            rewards = {str(k): v for k, v0 in obj.items() if (v := _number(v0)) is not None}
    if "reward" not in rewards and txt is not None:
        value = _reward_txt(txt[1])
        if value is not None:
            rewards["reward"] = value
    return rewards


def parse_reward(logs: dict[str, bytes]) -> float | None:
    """The task's reward: "reward" (or the only metric) from parse_rewards; None if absent/unreadable."""
    rewards = parse_rewards(logs)
    if "reward" in rewards:
        return rewards["reward"]
    return next(iter(rewards.values())) if len(rewards) == 1 else None


class _NoDTD(Exception):
    pass


def _safe_xml(data: bytes, file: str) -> ET.Element:
    """Parse XML only if it has no DOCTYPE: without a DTD there are no entity declarations, so no
    entity-expansion bomb or external entity can exist. expat sees the real encoding (UTF-16 included),
    which a byte search for "<!DOCTYPE" would not."""
    if len(data) > MAX_REPORT_BYTES:
        raise ReportParseError(file, f"report is over {MAX_REPORT_BYTES} bytes")
    checker = xml.parsers.expat.ParserCreate()

    def refuse(*_args: Any) -> None:
        raise _NoDTD()

    checker.StartDoctypeDeclHandler = refuse
    checker.EntityDeclHandler = refuse
    checker.ExternalEntityRefHandler = refuse
    try:
        checker.Parse(data, True)
    except _NoDTD:
        raise ReportParseError(file, "DOCTYPE/entity declarations are not allowed in reports") from None
    except xml.parsers.expat.ExpatError as exc:
        raise ReportParseError(file, f"malformed XML: {xml.parsers.expat.ErrorString(exc.code)} "
                                     f"at line {exc.lineno}") from None
    try:
        return ET.fromstring(data)
    except ET.ParseError as exc:
        raise ReportParseError(file, f"malformed XML: {exc}") from None


def _junit_cases(root: ET.Element, file: str) -> list[TestCase]:
    if root.tag not in ("testsuites", "testsuite", "testcase"):
        raise ReportParseError(file, f"not a JUnit report (root element <{root.tag}>)")
    cases: list[TestCase] = []
    for tc in root.iter("testcase"):
        name = tc.get("name") or "?"
        classname = tc.get("classname")
        full = f"{classname}::{name}" if classname else name
        outcome, message = "passed", ""
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = child.get("message") or (child.text or "").strip()
                if outcome != "skipped":
                    break  # failure/error outrank a skip marker
        cases.append(TestCase(full, outcome, message[:2000]))
    return cases


_CTRF_STATUS = {"passed": "passed", "failed": "failed", "skipped": "skipped", "pending": "skipped",
                "other": "error"}


def _ctrf_cases(obj: Any, file: str) -> list[TestCase]:
    tests = obj.get("results", {}).get("tests") if isinstance(obj, dict) and isinstance(obj.get("results"), dict) \
        else None
    if not isinstance(tests, list):
        raise ReportParseError(file, "not a CTRF report (results.tests must be a list)")
    cases = []
    for i, t in enumerate(tests):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not isinstance(t.get("status"), str):
            raise ReportParseError(file, f"results.tests[{i}] needs string name and status")
        outcome = _CTRF_STATUS.get(t["status"], "error")
        message = t.get("message") or t.get("trace") or ""
        cases.append(TestCase(t["name"], outcome, str(message)[:2000]))
    return cases


def parse_test_results(logs: dict[str, bytes]) -> list[TestCase]:
    """Test cases from every report in the verifier logs, in sorted file order.

    `*.xml` files are JUnit (pytest --junitxml): names are "classname::name". `*.json` files other
    than reward.json are CTRF (pytest --ctrf) when they have results.tests; a file named ctrf*.json
    that is not CTRF is an error, other JSON files are ignored. Malformed or unsafe reports raise
    ReportParseError naming the file.
    """
    cases: list[TestCase] = []
    for key in sorted(logs):
        base = posixpath.basename(key)
        data = logs[key]
        if base.endswith(".xml"):
            cases.extend(_junit_cases(_safe_xml(data, key), key))
        elif base.endswith(".json") and base != "reward.json":
            if len(data) > MAX_REPORT_BYTES:
                raise ReportParseError(key, f"report is over {MAX_REPORT_BYTES} bytes")
            try:
                obj = json.loads(data)
            except ValueError as exc:
                if base.startswith("ctrf"):
                    raise ReportParseError(key, f"invalid JSON: {exc}") from None
                continue
            is_ctrf = isinstance(obj, dict) and isinstance(obj.get("results"), dict)
            if is_ctrf or base.startswith("ctrf"):
                cases.extend(_ctrf_cases(obj, key))
    return cases


# --------------------------------------------------------------------------------------------------
# Harbor job directories
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


def _read_trial(tdir: Path, errors: list[JobFormatError]) -> TrialResult | None:
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
                num = _number(v)
                if num is None:
                    bad(f"verifier_result.rewards.{k}", f"not a number: {v!r}")
                else:
                    rewards[str(k)] = num
        else:
            bad("verifier_result.rewards", "must be an object")
    reward = rewards.get("reward", next(iter(rewards.values())) if len(rewards) == 1 else None)

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
    try:
        test_results = parse_test_results({k: v for k, v in logs.items() if k.endswith((".xml", ".json"))})
    except ReportParseError as exc:
        errors.append(JobFormatError(trial, f"verifier/{exc.file}", exc.message))
        test_results = []

    return TrialResult(
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
        test_results=test_results,
        rewards=rewards,
    )


def read_job_dir(path: Path) -> tuple[list[TrialResult], list[JobFormatError]]:
    """Import a Harbor job directory (`jobs/<job>/`, spec §4.4).

    Every non-hidden sub-directory is a trial; its result.json is authoritative (the job-level
    result.json only has aggregates and is not read). A trial whose result.json is missing,
    truncated or lacks task_name is reported and skipped; a wrongly typed field is reported and left
    None while the rest of the trial is kept. `reward` is None when verifier_result is null (Harbor
    counts that as 0: see TrialResult.effective_reward). Never raises for one bad trial.
    """
    path = Path(path)
    results: list[TrialResult] = []
    errors: list[JobFormatError] = []
    if not path.is_dir():
        return [], [JobFormatError(path.name, ".", "not a directory")]
    for tdir in sorted(path.iterdir(), key=lambda p: p.name):
        if tdir.name.startswith(".") or tdir.is_symlink() or not tdir.is_dir():
            continue
        try:
            result = _read_trial(tdir, errors)
        except OSError as exc:
            errors.append(JobFormatError(tdir.name, ".", f"unreadable: {exc}"))
            continue
        if result is not None:
            results.append(result)
    return results, errors
