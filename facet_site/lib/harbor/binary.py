"""Binary task files (audio, images, PDFs, Parquet, encrypted blobs): telling them from text, their
media type from their first bytes, what a browser may preview, a hex/strings peek for the rest, and
a content-addressed store on disk for the large ones. Django-free.
"""
from __future__ import annotations

import hashlib
import mimetypes
import os
import re
import tempfile
from pathlib import Path

# Signatures checked before the file name: a task's file names are untrusted and often generic.
_MAGIC: list[tuple[bytes, int, str]] = [
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"%PDF-", 0, "application/pdf"),
    (b"ID3", 0, "audio/mpeg"),
    (b"OggS", 0, "audio/ogg"),
    (b"fLaC", 0, "audio/flac"),
    (b"PAR1", 0, "application/vnd.apache.parquet"),
    (b"PK\x03\x04", 0, "application/zip"),
    (b"\x1f\x8b", 0, "application/gzip"),
    (b"\x7fELF", 0, "application/x-executable"),
]

# What a browser shows safely inline, by the media type facet sniffed (never the file's own claim).
# SVG is left out on purpose: it can carry script, so it is only ever a download.
PREVIEW_KINDS = {
    "image/png": "image", "image/jpeg": "image", "image/gif": "image", "image/webp": "image",
    "audio/wav": "audio", "audio/mpeg": "audio", "audio/ogg": "audio", "audio/flac": "audio",
    "application/pdf": "pdf",
}


def is_text(data: bytes) -> bool:
    """Text facet keeps as text: valid UTF-8 without NUL bytes (PostgreSQL text cannot hold NUL)."""
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def media_type(path: str, data: bytes) -> str:
    """The media type of a binary file: from its first bytes, else its extension, else octet-stream."""
    for magic, offset, kind in _MAGIC:
        if data[offset:offset + len(magic)] == magic:
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:
        return "audio/mpeg"  # an MPEG audio frame header without an ID3 tag
    guessed, _ = mimetypes.guess_type(path, strict=False)
    return guessed or "application/octet-stream"


def preview_kind(kind: str) -> str | None:
    """"image", "audio", "pdf" or None (shown as a hex/strings peek and a download)."""
    return PREVIEW_KINDS.get(kind)


def hex_peek(data: bytes, limit: int = 256) -> str:
    """The first `limit` bytes as offset, hex and printable-ASCII columns, 16 bytes a line."""
    lines = []
    for offset in range(0, min(len(data), limit), 16):
        chunk = data[offset:offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<47}  {text}")
    return "\n".join(lines)


def strings_peek(data: bytes, *, min_length: int = 6, limit: int = 40) -> list[str]:
    """Printable ASCII runs of at least `min_length` characters, like strings(1), at most `limit`."""
    found = []
    for m in re.finditer(rb"[\x20-\x7e]{%d,}" % min_length, data):
        found.append(m.group().decode("ascii")[:200])
        if len(found) >= limit:
            break
    return found


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStore:
    """Content-addressed files under `root`: `<root>/<first 2 hex>/<sha256>`. Written to a temporary
    name and renamed, so a reader never sees half a blob; the same bytes are stored once."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, digest: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError(f"not a sha256 digest: {digest!r}")
        return self.root / digest[:2] / digest

    def put(self, data: bytes) -> str:
        digest = sha256_hex(data)
        target = self.path(digest)
        if target.exists() and target.stat().st_size == len(data):
            return digest
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".blob.", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return digest

    def get(self, digest: str) -> bytes:
        data = self.path(digest).read_bytes()
        if sha256_hex(data) != digest:
            raise OSError(f"blob {digest} is damaged on disk (its bytes no longer match its name)")
        return data
