"""The files of a Harbor task directory: the path rules every bundle file obeys (relative, normalised,
NFC), the files Harbor requires, and reading a task directory from untrusted disk (symlinks leaving
the directory, absolute symlinks, special files and oversized files are refused). Django-free.
"""
from __future__ import annotations

import os
import re
import stat
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from facet_site.lib.harbor.task_format import TaskConfig, TaskFormatError

# Names never taken into a bundle: VCS and cache litter, plus Harbor's publish archive (§1.2 `.gitignore`).
_IGNORED_NAMES = {".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".DS_Store", "Thumbs.db"}
_IGNORED_ROOT_NAMES = {"dist.tar.gz"}
RESERVED_FILES = {"instruction.md", "task.toml"}


def nfc(path: str) -> str:
    # macOS hands out decomposed (NFD) names; hash and compare the composed form so the OS never matters.
    return unicodedata.normalize("NFC", path)


def check_relpath(path: str) -> str:
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
    if path in RESERVED_FILES:
        raise TaskFormatError(path, "is generated from the bundle's instruction/config; do not put it in files")
    return nfc(path)



def separate_verifier(cfg: TaskConfig) -> bool:
    verifier = cfg.extra.get("verifier", {})
    return verifier.get("environment_mode") == "separate" or isinstance(verifier.get("environment"), dict)


def check_required_files(bundle_files: Iterable[str], cfg: TaskConfig) -> None:
    files = set(bundle_files)
    windows = cfg.extra.get("environment", {}).get("os") == "windows"
    tests = {"tests/test.sh", "tests/test.bat"} if windows else {"tests/test.sh"}
    if not files & tests and not separate_verifier(cfg):
        raise TaskFormatError("tests/test.sh", "missing tests/test.sh (Harbor requires it)")



def default_mode(path: str) -> int:
    """The mode facet gives a file it writes without a recorded one: scripts run, the rest is read."""
    return 0o755 if path.endswith(".sh") else 0o644


@dataclass
class Tree:
    """A task directory as read from disk: files, the modes that differ from `default_mode`, and the
    directories that hold no file (so that writing the task back recreates them)."""

    files: dict[str, bytes] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    empty_dirs: list[str] = field(default_factory=list)


def collect_tree(root: Path, *, max_file_bytes: int, max_total_bytes: int) -> Tree:
    """All regular files below `root` as {posix relpath: bytes}, with their modes and the empty
    directories.

    Symlinks are followed only when they stay inside the task (resolved) and are relative; absolute
    targets would change meaning once the task is copied elsewhere. Special files are refused.
    Every file over `max_file_bytes` is named in one error, not only the first one met.
    """
    root_real = root.resolve()
    tree = Tree()
    out = tree.files
    oversized: list[str] = []
    total = 0

    def read_file(p: Path, rel: str, size: int, mode: int) -> None:
        nonlocal total
        if size > max_file_bytes:
            oversized.append((rel, f"{size} bytes"))
            return
        with open(p, "rb") as fh:
            data = fh.read(max_file_bytes + 1)
        if len(data) > max_file_bytes:
            oversized.append((rel, f"over {max_file_bytes} bytes"))
            return
        total += len(data)
        if total > max_total_bytes:
            raise TaskFormatError(rel, f"task files exceed the {max_total_bytes}-byte total limit "
                                       "(reached at this file)")
        key = check_relpath(rel)
        if key in out:
            raise TaskFormatError(rel, "two file names are the same after Unicode normalisation")
        out[key] = data
        if mode & 0o777 != default_mode(key):
            tree.modes[key] = mode & 0o777

    def walk(directory: Path, prefix: str, active: frozenset) -> bool:
        """True when something was taken from `directory`."""
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
        taken = False
        for entry in entries:
            rel = prefix + entry.name
            if entry.name in _IGNORED_NAMES or entry.name.endswith(".pyc"):
                continue
            if not prefix and (entry.name in _IGNORED_ROOT_NAMES or entry.name in RESERVED_FILES):
                continue
            p = Path(entry.path)
            taken = True
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
                    if not walk(target, rel + "/", active | {target}):
                        tree.empty_dirs.append(check_relpath(rel))
                elif stat.S_ISREG(st.st_mode):
                    read_file(target, rel, st.st_size, st.st_mode)
                else:
                    raise TaskFormatError(rel, "symlink to a special file")
                continue
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                if not walk(p, rel + "/", active | {p.resolve()}):
                    tree.empty_dirs.append(check_relpath(rel))
            elif stat.S_ISREG(st.st_mode):
                read_file(p, rel, st.st_size, st.st_mode)
            else:
                raise TaskFormatError(rel, "special file (device, fifo or socket) is not allowed in a task")
        return taken

    walk(root, "", frozenset({root_real}))
    if len(oversized) == 1:
        raise TaskFormatError(oversized[0][0], f"file is {oversized[0][1]}, over the {max_file_bytes}-byte limit")
    if oversized:
        raise TaskFormatError(oversized[0][0], f"{len(oversized)} files are over the {max_file_bytes}-byte "
                              "per-file limit: " + ", ".join(f"{rel} ({size})" for rel, size in oversized))
    tree.empty_dirs.sort()
    return tree


def collect_files(root: Path, *, max_file_bytes: int, max_total_bytes: int) -> dict[str, bytes]:
    """The files of `collect_tree`, without modes and directories."""
    return collect_tree(root, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes).files


def read_small_file(path: Path, rel: str, max_bytes: int) -> bytes:
    if path.is_symlink():
        raise TaskFormatError(rel, "must be a regular file, not a symlink")
    if not path.is_file():
        raise TaskFormatError(rel, f"missing {rel}")
    size = path.stat().st_size
    if size > max_bytes:
        raise TaskFormatError(rel, f"file is {size} bytes, over the {max_bytes}-byte limit")
    return path.read_bytes()
