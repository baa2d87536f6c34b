"""The files of a Harbor task directory: the path rules every bundle file obeys (relative, normalised,
NFC), the files Harbor requires, and reading a task directory from untrusted disk (symlinks leaving
the directory, absolute symlinks, special files and oversized files are refused). Django-free.
"""
from __future__ import annotations

import os
import re
import stat
import unicodedata
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



def collect_files(root: Path, *, max_file_bytes: int, max_total_bytes: int) -> dict[str, bytes]:
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
        key = check_relpath(rel)
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
            if not prefix and (entry.name in _IGNORED_ROOT_NAMES or entry.name in RESERVED_FILES):
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



def read_small_file(path: Path, rel: str, max_bytes: int) -> bytes:
    if path.is_symlink():
        raise TaskFormatError(rel, "must be a regular file, not a symlink")
    if not path.is_file():
        raise TaskFormatError(rel, f"missing {rel}")
    size = path.stat().st_size
    if size > max_bytes:
        raise TaskFormatError(rel, f"file is {size} bytes, over the {max_bytes}-byte limit")
    return path.read_bytes()
