"""Reading files safely (no symlink followed, no special file opened, sizes capped), decoding
SKILL.md, and the content hash of a skill."""
from __future__ import annotations

import hashlib
import os
import stat
from collections import deque
from dataclasses import replace

from facet_site.lib.skillformat.content import (
    OVERSIZED_PART_BYTES, FileContent, inspect_bytes, inspect_large_archive, inspect_pickle, kind_of)
from facet_site.lib.skillformat.middle import MiddleScan, TextScanner
from facet_site.lib.skillformat.records import META_NAME, SkillFileEntry


_CHUNK = 1 << 20
_O_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


class _TooLarge(Exception):
    def __init__(self, size: int):
        self.size = size


class _NotRegular(OSError):
    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def _open_regular(path: str) -> tuple[int, os.stat_result]:
    # O_NOFOLLOW + fstat closes the race between the directory listing and the open.
    fd = os.open(path, _O_READ)
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _NotRegular(_mode_kind(st.st_mode))
    return fd, st


def _read_regular(path: str, limit: int) -> bytes:
    fd, st = _open_regular(path)
    try:
        if st.st_size > limit:
            raise _TooLarge(st.st_size)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:  # grew after the fstat
            raise _TooLarge(len(data))
        return data
    finally:
        os.close(fd)


def _file_entry(path: str, rel: str, max_file_bytes: int, max_text_bytes: int,
                scan_text: TextScanner | None = None) -> tuple[SkillFileEntry, bytes | None]:
    fd, st = _open_regular(path)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            if st.st_size > max_file_bytes:
                return _oversized_entry(fh, rel, max_file_bytes, scan_text), None
            data = fh.read()
    finally:
        os.close(fd)
    digest = hashlib.sha256(data).hexdigest()
    text = None
    if b"\0" in data:
        is_binary = True
    else:
        try:
            decoded = data.decode("utf-8-sig")
            is_binary = False
            if len(data) <= max_text_bytes:
                text = decoded
        except UnicodeDecodeError:
            is_binary = True
    # A protocol-0 pickle is ASCII and stored as text; what loading it imports is read all the same.
    content = inspect_pickle(rel, data) if text is not None else inspect_bytes(
        rel, data, text_stored=False, scan_text=scan_text)
    return SkillFileEntry(rel, len(data), digest, text, is_binary, content), data


def _oversized_entry(fh, rel: str, max_file_bytes: int, scan_text: TextScanner | None = None) -> SkillFileEntry:
    """A file over the reading limit, hashed in chunks and recorded, not stored. Of text, the
    first and the last OVERSIZED_PART_BYTES are kept for the safety scan, with the line number
    where the last part starts. What lies between is given to `scan_text` block by block as it
    is read, and only the findings it returns are kept; without `scan_text` it is not read."""
    part = OVERSIZED_PART_BYTES
    h = hashlib.sha256()
    size = newlines = 0
    head = bytearray()
    tail: deque[bytes] = deque()  # the last chunks, together at least `part` bytes once there are
    tail_bytes = 0
    middle: MiddleScan | None = None
    textual = None  # decided on the first chunk: only a text file's middle is scanned
    while chunk := fh.read(_CHUNK):
        h.update(chunk)
        size += len(chunk)
        newlines += chunk.count(b"\n")
        if len(head) < part:
            head += chunk[:part - len(head)]
        if textual is None:
            first = bytes(head[:8192])
            textual = not kind_of(first, rel) and b"\0" not in first and _utf8_prefix_ok(first)
            if textual and scan_text is not None:
                middle = MiddleScan(rel, scan_text, begin=part, head=first.decode("utf-8", "replace"))
        tail.append(chunk)
        tail_bytes += len(chunk)
        while tail_bytes - len(tail[0]) >= part:
            done = tail.popleft()
            tail_bytes -= len(done)
            if middle is not None:
                middle.feed(done)
    first = bytes(head[:8192])
    kind = kind_of(first, rel)
    is_binary = b"\0" in first or not _utf8_prefix_ok(first)
    if kind or is_binary:
        # A zip's directory is at its end and a plain tar's headers are in place: their members are
        # listed and read as in a small archive (a payload is often a few MB). Otherwise only the
        # head was kept: enough to name a program or a compressed tarball, not to read it, and to
        # list what a pickle imports (its imports come before the data they rebuild).
        archive = (inspect_large_archive(rel, fh, kind, scan_text) if kind
                   else inspect_pickle(rel, bytes(head), note=f"the first {part} bytes read"))
        content = (replace(archive, note=f"over {max_file_bytes} bytes; "
                           + (archive.note or "members read as in any archive"))
                   if archive is not None else FileContent(kind=kind, note=f"over {max_file_bytes} bytes; not read"))
        return SkillFileEntry(rel, size, h.hexdigest(), None, is_binary, content)
    joined = b"".join(tail)
    last = joined[-part:]
    start = size - len(last)
    if start <= len(head):  # the two parts meet: the whole file is read
        whole = bytes(head[:start]) + last
        content = FileContent(scan_texts=((rel, whole.decode("utf-8", "replace")),),
                              note=f"over {max_file_bytes} bytes; scanned whole, not stored")
        return SkillFileEntry(rel, size, h.hexdigest(), None, False, content)
    first_line = newlines - last.count(b"\n") + 1
    cut = last.find(b"\n")
    if cut >= 0:  # start the last part on a line of its own (and on a whole character)
        last, first_line = last[cut + 1:], first_line + 1
    between = f"the {start - len(head)} bytes between not read"
    found: tuple = ()
    if middle is not None:
        middle.feed(joined[:len(joined) - len(last)])  # up to where the last part starts
        middle.finish()
        between, found = middle.note(), tuple(middle.findings)
    content = FileContent(
        scan_texts=((rel, bytes(head).decode("utf-8", "replace")),),
        scan_tail=(first_line, last.decode("utf-8", "replace")),
        part_findings=found,
        note=f"over {max_file_bytes} bytes; the first and last {part} bytes scanned, {between}")
    return SkillFileEntry(rel, size, h.hexdigest(), None, False, content)


def _utf8_prefix_ok(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the chunk boundary is not evidence of binary content.
        return exc.start >= len(data) - 3 and exc.reason == "unexpected end of data"


def _content_hash(skill_md: bytes, entries: list[SkillFileEntry]) -> str:
    """sha256 over the normalised SKILL.md and the sorted (path, sha256) of supporting files.

    SKILL.md is normalised (BOM dropped, CRLF/CR to LF) so a re-save on another OS is not a new
    version. `_meta.json` is excluded: ClawHub rewrites it on every publish (publishedAt, history)
    and metadata alone must not create a new skill version.
    """
    h = hashlib.sha256()
    h.update(b"SKILL.md\0")
    h.update(_normalise_newlines(skill_md))
    h.update(b"\0")
    for path, digest in sorted((e.path, e.sha256) for e in entries if e.path != META_NAME):
        h.update(path.encode("utf-8", "surrogateescape"))
        h.update(b"\0")
        h.update(digest.encode("ascii"))
        h.update(b"\n")
    return h.hexdigest()


def _normalise_newlines(data: bytes) -> bytes:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return data


def _decode_skill_md(raw: bytes, md_name: str) -> tuple[str, str]:
    """(text, "") or ("", reason the file cannot be read as a skill)."""
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "", f"{md_name} is UTF-16 encoded; expected UTF-8"
    nul = raw.find(b"\0")
    if nul >= 0:
        return "", f"{md_name} looks binary (NUL byte at offset {nul})"
    bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0
    try:
        text = raw[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[bom + exc.start]
        return "", f"{md_name} is not valid UTF-8 (byte 0x{bad:02x} at offset {bom + exc.start})"
    if not text.strip():
        return "", f"{md_name} is empty"
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, ""


def _mode_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "special file"


def _kind_of(entry: os.DirEntry) -> str:
    try:
        return _mode_kind(entry.stat(follow_symlinks=False).st_mode)
    except OSError:
        return "special file"


def _is_dir_target(path: str) -> bool:
    try:
        return os.path.isdir(path)
    except OSError:
        return False


def _os_error(exc: OSError) -> str:
    return f"{type(exc).__name__}: {exc.strerror or exc}"
