"""A Harbor task directory on disk: its identities (facet's `content_hash` and Harbor's own
`task_checksum`), writing a bundle as a task directory, and reading one task (Harbor, or
Terminal-Bench 1.x through tb1.py) or a whole dataset. Django-free.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

from facet_site.lib.harbor.task_files import (check_relpath, check_required_files, collect_tree, default_mode,
                                              read_small_file)
from facet_site.lib.harbor.task_format import (DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_TOTAL_BYTES, TaskBundle,
                                               TaskFormatError, canonical_task_toml, config_from_toml,
                                               decode_utf8, locate_key, parse_toml, schema_minor)
from facet_site.lib.harbor.tb1 import is_tb1_dir, read_tb1_dir

HASH_SCHEME = "facet-task-sha256-v1"

# --------------------------------------------------------------------------------------------------
# Content hash
# --------------------------------------------------------------------------------------------------


def _bundle_entries(bundle: TaskBundle) -> dict[str, bytes]:
    entries: dict[str, bytes] = {}
    for path, data in bundle.files.items():
        key = check_relpath(path)
        if key in entries:
            raise TaskFormatError(path, "two file paths are the same after Unicode normalisation")
        if not isinstance(data, (bytes, bytearray)):
            raise TaskFormatError(path, f"file content must be bytes (got {type(data).__name__})")
        entries[key] = bytes(data)
    entries["instruction.md"] = bundle.instruction.encode("utf-8")
    toml = bundle.toml_text if bundle.toml_text is not None else canonical_task_toml(bundle)
    entries["task.toml"] = toml.encode("utf-8")
    return entries


def _modes(bundle: TaskBundle, entries: dict[str, bytes]) -> dict[str, int]:
    """Every entry's mode: the recorded one, else facet's default."""
    recorded = {check_relpath(p): m & 0o777 for p, m in bundle.modes.items()}
    unknown = sorted(set(recorded) - set(entries))
    if unknown:
        raise TaskFormatError(unknown[0], "has a recorded mode but is not a file of the task")
    return {p: recorded.get(p, default_mode(p)) for p in entries}


def content_hash(bundle: TaskBundle) -> str:
    """Identity of a task version: "sha256:<64 hex>".

    Definition (version `facet-task-sha256-v1`):
      entries = bundle.files + {"instruction.md": instruction as UTF-8,
                                "task.toml": canonical_task_toml(bundle) as UTF-8}
      paths are NFC-normalised POSIX paths relative to the task root;
      manifest = "facet-task-sha256-v1\\n" + for each path sorted by its UTF-8 bytes:
                 "<sha256 hex of the file bytes>  <path>\\n"
      content_hash = "sha256:" + sha256(manifest as UTF-8)

      then, only for a task read from disk: for each file whose mode is not the default
      (0755 for *.sh, else 0644) "mode <octal>  <path>\n", and for each empty directory
      "dir  <path>/\n" (both sorted by path), so a facet-made task hashes as it always did.

    Not covered: the bundle name/task directory name, mtimes, `source_format`/`notes`. task.toml
    enters as the text the task carries (`toml_text`, kept from an imported file so a round trip is
    byte-faithful) or, for a facet-made task, in canonical form (tomli_w; a golden-value test guards
    against formatting drift). Binary files enter like any other: by the sha256 of their bytes.
    """
    entries = _bundle_entries(bundle)
    lines = [HASH_SCHEME + "\n"]
    for path in sorted(entries, key=lambda p: p.encode("utf-8")):
        lines.append(f"{hashlib.sha256(entries[path]).hexdigest()}  {path}\n")
    modes = _modes(bundle, entries)
    for path in sorted(entries, key=lambda p: p.encode("utf-8")):
        if modes[path] != default_mode(path):
            lines.append(f"mode {modes[path]:o}  {path}\n")
    for d in sorted(bundle.empty_dirs or (), key=lambda p: p.encode("utf-8")):
        lines.append(f"dir  {check_relpath(d)}/\n")
    return "sha256:" + hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------------
# Harbor's task checksum
# --------------------------------------------------------------------------------------------------


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


def task_checksum(bundle: TaskBundle) -> str:
    """The task_checksum Harbor records for `bundle` written by write_task_dir."""
    return dirhash((path, data) for path, data, _mode in task_dir_entries(bundle) if data is not None)


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


# The directories every written task has (Harbor requires environment/ even with a prebuilt
# docker_image, §1.2; solution/ and tests/ are where the oracle and the verifier look).
_TASK_DIRS = ("environment", "solution", "tests")


def _directories(bundle: TaskBundle, entries: dict[str, bytes]) -> set[str]:
    """Every directory of the written task: those holding files, the recorded empty ones, and for a
    facet-made task (no recorded layout) environment/, solution/ and tests/."""
    dirs = set(_TASK_DIRS) if bundle.empty_dirs is None else {check_relpath(d) for d in bundle.empty_dirs}
    for path in list(entries) + list(dirs):
        parts = path.split("/")[:-1]
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return dirs


def task_dir_entries(bundle: TaskBundle) -> list[tuple[str, bytes | None, int]]:
    """The task directory as (relative path, bytes or None for a directory, mode), sorted by
    path with every directory before its contents: exactly what `write_task_dir` writes, for
    writers that stream a task into an archive instead of onto disk (dataset exports).
    Validates the bundle as `write_task_dir` does (paths, required files)."""
    entries = _bundle_entries(bundle)
    check_required_files(entries, bundle.config)
    modes = _modes(bundle, entries)
    dirs = _directories(bundle, entries)
    out: list[tuple[str, bytes | None, int]] = [(d, None, 0o755) for d in dirs]
    out += [(path, data, modes[path]) for path, data in entries.items()]
    # "a/b" sorts after "a" and before "a0" when compared component-wise; plain string order
    # would put "a-b/x" between "a" and "a/x".
    return sorted(out, key=lambda e: e[0].split("/"))


def write_task_dir(bundle: TaskBundle, dest: Path, *, layout: str = "harbor", overwrite: bool = False) -> Path:
    """Write `bundle` as a Harbor task directory at `dest` (the task directory itself).

    The whole task is written into a temporary sibling directory and renamed into place, so a
    failure never leaves a half-written task. Output is deterministic: the same bundle always
    yields byte-identical files (same names, content and modes). `*.sh` files are 0755, other
    files 0644, directories 0755. environment/, solution/ and tests/ always exist (Harbor requires
    environment/ even with a prebuilt docker_image, §1.2). A task read from disk is written as it
    was read instead: its recorded modes, its own empty directories, its task.toml text.
    With `overwrite`, an existing `dest` is replaced (moved aside, then deleted after the new one
    is in place).
    """
    if layout != "harbor":
        raise ValueError(f"unsupported layout {layout!r} (only 'harbor' is written)")
    entries = _bundle_entries(bundle)  # validates paths and serialises task.toml before touching disk
    check_required_files(entries, bundle.config)
    modes = _modes(bundle, entries)
    dirs = _directories(bundle, entries)
    dest = Path(dest)
    if dest.exists() and not overwrite:
        raise FileExistsError(f"{dest} already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)

    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        for sub in sorted(dirs):
            tmp.joinpath(*sub.split("/")).mkdir(parents=True, exist_ok=True)
        for path in sorted(entries):
            target = tmp.joinpath(*path.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as fh:  # binary: no newline translation on any OS
                fh.write(entries[path])
            os.chmod(target, modes[path])
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
        return read_tb1_dir(path, max_file_bytes, max_total_bytes)
    except TaskFormatError as exc:
        raise exc.with_task(task_label) from None


def _read_harbor_dir(path: Path, max_file_bytes: int, max_total_bytes: int) -> TaskBundle:
    if not (path / "task.toml").exists():
        raise TaskFormatError("task.toml", "missing task.toml (and no Terminal-Bench 1.x task.yaml)")
    toml_text = decode_utf8(read_small_file(path / "task.toml", "task.toml", max_file_bytes), "task.toml")
    cfg = config_from_toml(parse_toml(toml_text), toml_text)
    if "steps" in cfg.extra:
        raise TaskFormatError("task.toml", "multi-step tasks ([[steps]]) are not supported by facet", field="steps",
                              line=locate_key(toml_text, "steps", None))
    instruction = decode_utf8(read_small_file(path / "instruction.md", "instruction.md", max_file_bytes), "instruction.md")
    if not (path / "environment").is_dir():
        raise TaskFormatError("environment/", "missing environment/ directory (Harbor requires it)")
    tree = collect_tree(path, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes)
    check_required_files(tree.files, cfg)
    name = cfg.extra.get("task", {}).get("name") or path.name
    minor = schema_minor(cfg.schema_version)
    return TaskBundle(name=name, instruction=instruction, config=cfg, files=tree.files, modes=tree.modes,
                      empty_dirs=tree.empty_dirs, toml_text=toml_text,
                      source_format=f"harbor-{cfg.schema_version}" if minor else "harbor-1.0")


# ---- Datasets -----------------------------------------------------------------------------------


def looks_like_task(d: Path) -> bool:
    """A Harbor task (task.toml or instruction.md) or a TB1 task (task.yaml beside its files)."""
    return any((d / n).exists() for n in ("task.toml", "instruction.md")) or is_tb1_dir(d)


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
    if path.is_dir() and looks_like_task(path):
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
        if sub.name.startswith(".") or not sub.is_dir() or not looks_like_task(sub):
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
