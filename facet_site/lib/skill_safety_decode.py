"""Decoding of encoded text in skills for the safety scanner, Django-free.

`decode_tree(text)` finds base64 runs (UTF-8, or UTF-16LE as PowerShell's `-EncodedCommand` takes
them), `\\xNN` and bare hex strings, %-encoded runs and Unicode tag characters in `text`, and lines
with zero-width characters (which split words so that no phrase rule matches; the line is read
again without them), decodes those that read as text, and decodes the results again up to
`MAX_DECODE_DEPTH` levels. Each `Layer` keeps the span of the outermost encoded text, so a finding
in decoded text is reported where the encoded text stands.
"""
from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from dataclasses import dataclass

__all__ = ["MAX_DECODE_DEPTH", "Layer", "decode_tree"]

MAX_DECODE_DEPTH = 3
_MAX_DECODES_PER_TEXT = 200  # long tokens decoded per text; keeps key-heavy files cheap

@dataclass(frozen=True)
class Layer:
    start: int  # span of the outermost encoded text in the file's text
    end: int
    chain: tuple[str, ...]
    text: str


_B64 = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/]{20,}={0,2}(?![A-Za-z0-9+/=_-])")
_HEX_ESC = re.compile(r"(?:\\x[0-9a-fA-F]{2}){6,}")
_HEX_BARE = re.compile(r"(?:[0-9a-fA-F]{2}){10,}")
_PCT = re.compile(r"(?:%[0-9A-Fa-f]{2}[^\s%]{0,3}){6,}")
_TAGS = re.compile("[\U000E0020-\U000E007F]+")
_FLAG_BASE = "\U0001F3F4"  # a waving black flag followed by tags is a subdivision flag emoji
# Zero-width and bidirectional-control characters; the joiners (U+200C/D) only beside ASCII, since
# emoji sequences and Indic scripts use them legitimately. The same set the rule `hidden.zero-width`
# (safety_rules.toml) flags; a test keeps the two in step.
_ZERO_WIDTH = re.compile("[\u200b\u2060-\u2064\u180e\u202a-\u202e\u2066-\u2069\ufeff]|(?<=[\x21-\x7e])[\u200c\u200d]|[\u200c\u200d](?=[\x21-\x7e])")


def decode_tree(text: str, depth: int) -> list[Layer]:
    """Decoded layers of `text`, nested up to MAX_DECODE_DEPTH; spans are in `text`."""
    if depth > MAX_DECODE_DEPTH:
        return []
    layers = []
    for kind, start, end, decoded in _decodings(text):
        layers.append(Layer(start, end, (kind,), decoded))
        for inner in decode_tree(decoded, depth + 1):
            layers.append(Layer(start, end, (kind, *inner.chain), inner.text))
    return layers


def _decodings(text: str):
    budget = _MAX_DECODES_PER_TEXT
    if not text.isascii():
        for m in _TAGS.finditer(text):
            if m.start() > 0 and text[m.start() - 1] == _FLAG_BASE:
                continue
            yield "unicode tags", m.start(), m.end(), "".join(chr(ord(c) - 0xE0000) for c in m.group(0))
        start = 0
        for line in text.splitlines(keepends=True):
            stripped = _ZERO_WIDTH.sub("", line)
            if stripped != line and stripped.strip():
                yield "zero-width removed", start, start + len(line.rstrip("\r\n")), stripped.rstrip("\r\n")
            start += len(line)
    for m in _B64.finditer(text):
        token = m.group(0)
        if budget <= 0:
            return
        budget -= 1
        if _HEX_BARE.fullmatch(token):
            decoded = _printable(bytes.fromhex(token))  # one scan finds both: hex is base64's alphabet too
            if decoded:
                yield "hex", m.start(), m.end(), decoded
            continue
        if not (re.search(r"[0-9+/=]", token) and re.search(r"[a-z]", token) and re.search(r"[A-Z]", token)):
            continue  # plain words, CamelCase identifiers
        decoded = _b64(token)
        if decoded:
            yield "base64", m.start(), m.end(), decoded
    if "\\x" in text:
        for m in _HEX_ESC.finditer(text):
            decoded = _printable(bytes.fromhex(m.group(0).replace("\\x", "")))
            if decoded:
                yield "hex", m.start(), m.end(), decoded
    if "%" in text:
        for m in _PCT.finditer(text):
            start, end = m.start(), m.end()
            while start > 0 and not text[start - 1].isspace():  # widen to the whole token
                start -= 1
            while end < len(text) and not text[end].isspace():
                end += 1
            decoded = urllib.parse.unquote(text[start:end])
            if _printable(decoded.encode("utf-8", "replace")):
                yield "url-encoding", start, end, decoded


def _b64(token: str) -> str:
    body = token.rstrip("=")
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return ""
    if len(raw) >= 12 and raw[1::2].count(0) >= 0.9 * (len(raw) // 2):
        # UTF-16LE: ASCII text with a zero after every byte, what `powershell -EncodedCommand` runs
        return _printable(raw[: len(raw) // 2 * 2].decode("utf-16-le", "replace").encode("utf-8"))
    return _printable(raw)


def _printable(raw: bytes) -> str:
    """The bytes as text when they read as text (commands, prose), else ""."""
    if len(raw) < 6:
        return ""
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    good = sum(1 for c in s if c.isprintable() or c in "\n\t\r")
    if good < 0.95 * len(s) or not re.search(r"[ ./:|;\\%]", s):
        return ""
    return s
