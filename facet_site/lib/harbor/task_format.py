"""The Harbor task format in memory: `TaskConfig` (the typed view of task.toml, read and written in
both generations: `version = "1.0"` with `memory = "2G"` strings, or `schema_version = "1.x"` with
`*_mb`), `TaskBundle` (one task independent of disk), `TaskFormatError`, and TOML parsing helpers.
Django-free; see docs harbor-format.md §2 for the keys. Keys we do not model are kept verbatim in
`TaskConfig.extra`, so a task read from disk is written back without losing anything Harbor reads.
"""
from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

import tomli_w

# Tasks are held in memory as bytes, so one task must stay small enough for that. TB tasks ship private
# test data (e.g. a tar.gz in tests/), hence generous but finite limits.
DEFAULT_MAX_FILE_BYTES = 100 * 1024 * 1024
DEFAULT_MAX_TOTAL_BYTES = 500 * 1024 * 1024


# --------------------------------------------------------------------------------------------------
# The task: its error, typed config and bundle
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
        return config_to_toml(self)

    @classmethod
    def from_toml_dict(cls, data: dict[str, Any], *, text: str | None = None) -> "TaskConfig":
        """Validate a parsed task.toml. Raises TaskFormatError naming file, field and (given the text) line."""
        return config_from_toml(data, text)


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
    # What a task read from disk carries so that writing it back is byte-faithful (docs/datasets.md,
    # "round trips"): modes of files that differ from facet's default (0755 for *.sh, else 0644),
    # the empty directories it had (None: a facet-made task, written with environment/, solution/
    # and tests/), and task.toml's own text (None: written in canonical form from `config`).
    modes: dict[str, int] = field(default_factory=dict)
    empty_dirs: list[str] | None = field(default=None, compare=False)
    toml_text: str | None = field(default=None, compare=False)

    @property
    def task_toml(self) -> dict[str, Any]:
        """task.toml as a dict in canonical order (what `write_task_dir` writes)."""
        return self.config.to_toml_dict()

    @classmethod
    def from_task_toml(cls, name: str, instruction: str, task_toml: dict[str, Any],
                       files: dict[str, bytes] | None = None) -> "TaskBundle":
        return cls(name=name, instruction=instruction, config=TaskConfig.from_toml_dict(task_toml),
                   files=dict(files or {}))


# task.toml: typed config <-> dict
# --------------------------------------------------------------------------------------------------

_SCHEMA_RE = re.compile(r"^1\.(\d+)$")
_PACKAGE_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([GgMmKk])\s*$")
_TOML_ERR_RE = re.compile(r"\(at line (\d+), column (\d+)\)")

# Canonical order of top-level tables, as Harbor's own dump orders them (§2.3); others follow sorted.
_TABLE_ORDER = ("task", "steps", "metadata", "verifier", "agent", "environment", "solution")

# Known keys per section (§2.1, §2.2 and the addendum), for the unknown-config-field lint rule.
KNOWN_KEYS: dict[str, set[str]] = {
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
NEWER_KEYS = {
    ("verifier", "environment_mode"): 2, ("verifier", "environment"): 2,
    ("environment", "network_mode"): 3, ("environment", "allowed_hosts"): 3,
    ("verifier", "network_mode"): 3, ("agent", "network_mode"): 3,
}


def locate_key(text: str | None, section: str, key: str | None) -> int | None:
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
                               line=locate_key(self.text, section, key))

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


def schema_minor(version: str) -> int:
    m = _SCHEMA_RE.match(version)
    return int(m.group(1)) if m else 0


def config_from_toml(data: dict[str, Any], text: str | None = None) -> TaskConfig:
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


def config_to_toml(cfg: TaskConfig) -> dict[str, Any]:
    extra = _sorted_deep(cfg.extra or {})
    legacy = schema_minor(cfg.schema_version) == 0

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
    return tomli_w.dumps(config_to_toml(cfg))


def decode_utf8(data: bytes, file: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFormatError(file, f"not valid UTF-8 (byte {exc.start})") from None


def parse_toml(text: str, file: str = "task.toml") -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_ERR_RE.search(msg)
        line = int(m.group(1)) if m else None
        msg = _TOML_ERR_RE.sub("", msg).strip()
        raise TaskFormatError(file, f"invalid TOML: {msg}", line=line) from None

