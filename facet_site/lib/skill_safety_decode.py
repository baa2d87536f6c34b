"""Decoding of encoded text in skills for the safety scanner, Django-free.

`decode_tree(text)` finds in `text`:

* base64 runs (UTF-8, UTF-16LE as PowerShell's `-EncodedCommand` takes them, or zlib/gzip inside,
  as `exec(zlib.decompress(b64decode(...)))` hides a payload), `\\xNN`, `\\u00NN` and bare hex strings,
  `\\NNN` octal escapes, %-encoded runs, arrays of character codes, decimal or hex
  (`String.fromCharCode(104, ...)`, `bytes([0x68, ...])`),
  of codes XOR'd with a constant the text writes or names (`_k.map(c => c ^ 7)`, `(b ^ 0x5a) as char`,
  `c ^ k` after `const k = 0x5a`) and of codes shifted by a constant (`string.char(t[i] - 3)`)
  and Unicode tag characters;
* lines with zero-width characters (which split words so that no phrase rule matches), read again
  without them; string literals joined at run time (`'Down' + 'load' + 'Str' + 'ing'`, over lines
  too, or a list of them given to an empty string's join: `"".join(["ht", "tp://", ...])`,
  `['ht', 'tp://'].join('')`), read joined; shell lines that write `${IFS}` for spaces, read with spaces;
  a command given to `eval` as variables only (`eval "$c$f$u$s"`), read with the values the script's
  assignments above give them;
* in a text that names rot13 or base85, or turns strings round (`| rev |`, `'...'[::-1]`,
  `.split('').reverse()`), its string literals (and, for `rev`, its long lines) read rot13'd,
  base85-decoded or backwards.

It keeps what reads as text and decodes the results again up to `MAX_DECODE_DEPTH` levels. Each
`Layer` keeps the span of the outermost encoded text, so a finding in decoded text is reported where
the encoded text stands.
"""
from __future__ import annotations

import base64
import binascii
import codecs
import re
import urllib.parse
import zlib
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


# 16 characters and up: 12 bytes, as short as an address hidden alone (`MTk4LjUxLjEwMC4yMw==` is 198.51.100.23)
_B64 = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/]{16,}={0,2}(?![A-Za-z0-9+/=_-])")
# two lines or more of base64 alone, each but the last at least 40 characters, in quotes or not
_WRAPPED_B64 = re.compile(r"""(?m)(?:^[ \t]*["']?[A-Za-z0-9+/]{40,}["']?[ \t]*\\?[ \t]*\r?\n){1,4000}[ \t]*["']?[A-Za-z0-9+/]{4,}={0,2}["']?(?=[ \t]*\\?[ \t]*(?:\r?\n|$))""")
_HEX_ESC = re.compile(r"(?:\\x[0-9a-fA-F]{2}){6,}")
_UNICODE_ESC = re.compile(r"(?:\\u00[0-7][0-9a-fA-F]){6,}")
_HEX_BARE = re.compile(r"(?:[0-9a-fA-F]{2}){10,}")
_PCT = re.compile(r"(?:%[0-9A-Fa-f]{2}[^\s%]{0,3}){6,}")
_TAGS = re.compile("[\U000E0020-\U000E007F]+")
# A quote, a plus and a quote: where a join may be (looked for before the literals are paired)
_JOIN_HINT = re.compile(r"""['"]\s*\+\s*['"]""")
# What stands between two string literals joined at run time: 'Down' + 'load', "Net." +\n "Web"
_JOIN = re.compile(r"\s*\+\s*")
_JOIN_GAP = 200  # characters between two joins of one built string, at most
# Where a list of string literals is joined with nothing between them: Python's "".join([...]) (the list
# follows) and JavaScript's [...].join("") (the list precedes); the literals are read by _literal_list.
_JOIN_EMPTY_PY = re.compile(r"""(['"])\1\s*\.join\(\s*[\[(]""")
_JOIN_EMPTY_JS = re.compile(r"""\]\s*\.join\(\s*(['"])\1\s*\)""")
_LIST_GAP = re.compile(r"\s*")
_LIST_COMMA = re.compile(r"\s*,?")
_CALL_END = re.compile(r"\s*\)")
_MAX_LIST_ITEMS = 200
# Only texts that turn numbers into characters are searched for arrays of them as character codes (the
# search is costly); arrays of eight numbers or more, decimal or hex (_NUMBER_ARRAY), read by _number_arrays
_CHAR_CODE_HINTS = ("CharCode", "chr(", "Chr(", "bytes(", "bytearray(", "[char", "pack(", "chr ", "map(chr")
_XOR_KEY = re.compile(r"\^\s*(0x[0-9a-fA-F]{1,2}\b|\d{1,3}\b|[A-Za-z_]\w{0,30})")
_CONSTANT = re.compile(r"\b([A-Za-z_]\w{0,30})\s*:?=\s*(0x[0-9a-fA-F]{1,2}|\d{1,3})\b")
# a settings key named as a key, seed or mask, set to a small number (`glyph_seed: 90`, `"xor_key": 0x5a`)
_DATA_KEY = re.compile(r"""^[ \t]*["']?(\w{0,30}(?:seed|key|xor|mask|salt|cipher)\w{0,30})["']?[ \t]*[:=][ \t]*(0x[0-9a-fA-F]{1,2}|\d{1,3})[ \t]*,?[ \t]*(?:#.*)?$""", re.M | re.I)
_SHIFT = re.compile(r"(?:string\.char|\bchr|fromCharCode|\bchar)\s*\(\s*[\w.\[\]]{1,40}\s*([+-])\s*(\d{1,2})\s*\)")
_NUMBER_ARRAY = re.compile(r"(?<![\w.])(?:(?:0x[0-9a-fA-F]{1,2}|\d{1,3})\s*,\s*){7,}(?:0x[0-9a-fA-F]{1,2}|\d{1,3})(?![\w.])")
# rot13 by name, or written out: a character code plus 13 (`c.charCodeAt(0) + 13`, `(x + 13) % 26`) or
# `tr A-Za-z N-ZA-Mn-za-m`
_NAMES_ROT13 = re.compile(r"rot[_-]?13|charCodeAt\(\s*0?\s*\)\s*\+\s*13\b|\+\s*13\s*\)\s*%\s*26\b|N-ZA-Mn-za-m|n-za-mN-ZA-M", re.I)
# String reversal as programs write it (not a list's .reverse(), which reverses no text)
_REV_PIPE_HINTS = ("| rev", "|rev", "rev |", "rev|")  # looked for before _REV_PIPE
# (Lua turns a string round with its method, `("…"):reverse()`, or `string.reverse(s)`: red-team set 12's env loader)
_REVERSED_HERE = re.compile(r"""\s*(?:\[::-1\]|\.split\(\s*(?:''|"")\s*\)\s*\.reverse\(\)|\)?\s*:\s*reverse\(\))""")
_STRING_REVERSAL = re.compile(r"""\.split\(\s*(?:''|"")\s*\)\s*\.reverse\(\)|\bstrrev\(|\bStrReverse\(|\bstring\.reverse\(""")
_REV_PIPE = re.compile(r"\|\s*rev\b|\brev\s*\|")
# String literals, paired left to right (so the code between two strings is never read as one)
_LITERAL = re.compile(r"""(['"])((?:\\.|(?!\1)[^\\\n])*)\1""")
_IFS = re.compile(r"\$\{IFS\}|\$IFS\b")
_OCTAL_ESC = re.compile(r"(?:\\[0-3][0-7]{2}){4,}")
_MAX_INFLATED = 1_000_000  # bytes of a compressed payload read, at most
_FLAG_BASE = "\U0001F3F4"  # a waving black flag followed by tags is a subdivision flag emoji
# Zero-width and bidirectional-control characters; the joiners (U+200C/D) only beside ASCII, since
# emoji sequences and Indic scripts use them legitimately. The same set the rule `hidden.zero-width`
# (safety_rules/) flags; a test keeps the two in step.
_ZERO_WIDTH = re.compile("[\u200b\u2060-\u2064\u180e\u202a-\u202e\u2066-\u2069\ufeff]|(?<=[\x21-\x7e])[\u200c\u200d]|[\u200c\u200d](?=[\x21-\x7e])")


# `eval "$a$b${c}"`: eval given nothing but variables (two or more), the whole command assembled elsewhere
_EVAL_OF_VARIABLES = re.compile(r"""\beval\s+["']?((?:\$\{?[A-Za-z_]\w*\}?){2,})["']?""")
# `name=value` statements of a shell script, several to a line: `o1=203; o2=0; c="${c}rl"`
_SHELL_ASSIGNMENT = re.compile(r"""(?:^|[;&\s])([A-Za-z_]\w*)=((?:"[^"\n]*"|'[^'\n]*'|[^\s;&|'"])*)""", re.M)
_SHELL_REFERENCE = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")


def _expand_shell_variables(before: str, words: str) -> str:
    """`words` with the variables the assignments in `before` (read in order) give them; quotes
    dropped, as the shell joins "ht""tp" into http."""
    values: dict[str, str] = {}

    def expand(text: str) -> str:
        return _SHELL_REFERENCE.sub(lambda r: values.get(r.group(1), r.group(0)), text)

    for a in _SHELL_ASSIGNMENT.finditer(before[-20_000:]):
        values[a.group(1)] = expand(a.group(2).replace('"', "").replace("'", ""))
    return expand(words)


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
        for start, line in _lines(text):
            stripped = _ZERO_WIDTH.sub("", line)
            if stripped != line and stripped.strip():
                yield "zero-width removed", start, start + len(line), stripped
    if "+" in text and _two(_JOIN_HINT.finditer(text)):
        for start, end, joined in _join_clusters(text):
            # pieces joined (they may run over several lines: `$b = 'AAA' +\n 'BBB'`), read as one string
            yield "joined strings", start, end, joined
    if ".join(" in text:
        for start, end, joined in _join_lists(text):
            yield "joined strings", start, end, joined
    if "eval" in text and "=" in text:
        for m in _EVAL_OF_VARIABLES.finditer(text):
            # a command spelt out in shell variables and run with eval: `c="cu"; c="${c}rl"; … eval "$c$f$u$s"`
            expanded = _expand_shell_variables(text[:m.start()], m.group(1))
            if expanded and expanded != m.group(1):
                yield "shell variables expanded", m.start(), m.end(), expanded
    if "${IFS}" in text or "$IFS" in text:
        for line_start, line in _lines(text):
            if "IFS" in line and _IFS.search(line):
                yield "${IFS} as spaces", line_start, line_start + len(line), _IFS.sub(" ", line)
    if "\\0" in text or "\\1" in text:
        for m in _OCTAL_ESC.finditer(text):
            decoded = _printable(bytes(int(o, 8) & 0xFF for o in m.group(0).split("\\")[1:]))
            if decoded:
                yield "octal", m.start(), m.end(), decoded
    if any(h in text for h in _CHAR_CODE_HINTS):
        # codes as they are (`String.fromCharCode(104, 116, …)`, `bytes([0x68, 0x74, …])`): the key that changes nothing
        yield from _number_arrays(text, {0}, lambda c, _key: c, "character codes")
    if keys := _xor_keys(text):
        # codes XOR'd with a constant (`c ^ 7`, `(b ^ 0x5a) as char`, `c ^ k` after `const k = 0x5a`): an
        # address hidden as numbers, decimal or hex
        yield from _number_arrays(text, keys, lambda c, key: c ^ key, "xor {:#04x}")
    if "char" in text.lower() and _SHIFT.search(text):
        # codes shifted by a constant (`string.char(t[i] - 3)`, `chr(c + 1)`): a Caesar shift of the codes
        shifts = {(-1 if sign == "-" else 1) * int(n) for sign, n in _SHIFT.findall(text)[:4]} - {0}
        yield from _number_arrays(text, shifts, lambda c, shift: c + shift, "codes shifted by {:+d}")
    # a string turned round where it stands (`'...'[::-1]`), or any string of a text that turns strings
    # round (`x.split('').reverse().join('')`, `strrev(`, `StrReverse(`; a list's `[::-1]` is not one)
    every = (any(h in text for h in (".reverse()", "strrev(", "StrReverse(", "string.reverse("))
             and bool(_STRING_REVERSAL.search(text)))
    if "13" in text and _NAMES_ROT13.search(text):
        for m in _literals(text)[:budget]:
            yield "rot13", m.start(2), m.end(2), codecs.decode(m.group(2), "rot13")
            if every:  # both at once: `r13(s.split("").reverse().join(""))`
                yield "rot13, reversed", m.start(2), m.end(2), codecs.decode(m.group(2)[::-1], "rot13")
    if every or "[::-1]" in text or ":reverse()" in text:
        for m in _literals(text)[:budget]:
            if every or _REVERSED_HERE.match(text, m.end()):
                yield "reversed", m.start(2), m.end(2), m.group(2)[::-1]
    if any(h in text for h in _REV_PIPE_HINTS) and _REV_PIPE.search(text):
        # lines fed to `rev` (a heredoc, a variable), read backwards
        lines = [(a, ln) for a, ln in _lines(text) if len(ln.strip()) >= 20 and not _REV_PIPE.search(ln)]
        for line_start, line in lines[:budget]:
            yield "reversed", line_start, line_start + len(line), line.strip()[::-1]
    if "85decode" in text:
        for m in _literals(text)[:budget]:
            try:
                decoded = _printable(base64.b85decode(m.group(2)))
            except ValueError:
                continue
            if decoded:
                yield "base85", m.start(2), m.end(2), decoded
    if "\n" in text:
        for m in _WRAPPED_B64.finditer(text):
            # base64 wrapped over lines (a YAML folded scalar, a PEM-like block, a string continued with `\`):
            # each line alone is a fragment of compressed bytes, read whole it is the payload
            kind, decoded = _b64(re.sub(r"[^A-Za-z0-9+/=]", "", m.group(0)))
            budget -= 1
            if decoded:
                yield f"{kind} (wrapped over lines)", m.start(), m.end(), decoded
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
        kind, decoded = _b64(token)
        if decoded:
            yield kind, m.start(), m.end(), decoded
    if "\\x" in text:
        for m in _HEX_ESC.finditer(text):
            decoded = _printable(bytes.fromhex(m.group(0).replace("\\x", "")))
            if decoded:
                yield "hex", m.start(), m.end(), decoded
    if "\\u00" in text:
        # Java, Kotlin, JavaScript and JSON \u escapes of ASCII (`"\u0068\u0074\u0074\u0070…"`)
        for m in _UNICODE_ESC.finditer(text):
            decoded = _printable(bytes(int(h, 16) for h in re.findall(r"\\u00([0-7][0-9a-fA-F])", m.group(0))))
            if decoded:
                yield "unicode escapes", m.start(), m.end(), decoded
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


def _xor_keys(text: str) -> set[int]:
    """The constants a text XORs with: written after `^`, or named there and set once (`const k = 0x5a`); and in a
    settings file, its small numbers named as a key, seed or mask (`glyph_seed: 90` beside `glyph_table: [50, 46, …]`,
    red-team set 12: the program's `v ^ seed` is in another file)."""
    keys, names = set(), set()
    if ":" in text:
        keys.update(int(v, 0) for _, v in _DATA_KEY.findall(text)[:6])
    if "^" not in text:
        return {k for k in keys if 0 < k < 256}
    for k in _XOR_KEY.findall(text)[:6]:
        if k[0].isdigit():
            keys.add(int(k, 0))
        else:
            names.add(k)
    if names:
        keys.update(int(v, 0) for name, v in _CONSTANT.findall(text) if name in names)
    return {k for k in keys if 0 < k < 256}


def _number_arrays(text: str, keys, apply, label: str):
    """Arrays of numbers in `text` turned into text by `apply(code, key)` for the first key that makes every
    code printable."""
    for m in (_NUMBER_ARRAY.finditer(text) if keys else ()):
        codes = [int(c, 0) for c in re.findall(r"0x[0-9a-fA-F]{1,2}|\d{1,3}", m.group(0))]
        for key in sorted(keys):
            out = [apply(c, key) for c in codes]
            if all(9 <= c < 127 for c in out):
                decoded = _printable(bytes(out))
                if decoded:
                    yield label.format(key), m.start(), m.end(), decoded
                    break


def _b64(token: str) -> tuple[str, str]:
    """(the decoding's name, the text) of a base64 token, or ("", "") when it is not text."""
    body = token.rstrip("=")
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return "", ""
    if len(raw) >= 12 and raw[1::2].count(0) >= 0.9 * (len(raw) // 2):
        # UTF-16LE: ASCII text with a zero after every byte, what `powershell -EncodedCommand` runs
        return "base64", _printable(raw[: len(raw) // 2 * 2].decode("utf-16-le", "replace").encode("utf-8"))
    if raw[:2] == b"\x1f\x8b" or (len(raw) > 2 and raw[0] == 0x78 and raw[1] in (0x01, 0x5E, 0x9C, 0xDA)):
        # zlib (0x78 ..) or gzip (1f 8b) inside the base64: read at most _MAX_INFLATED bytes of it
        try:
            inflated = zlib.decompressobj(wbits=47).decompress(raw, _MAX_INFLATED)  # 47: zlib or gzip header
        except zlib.error:
            return "", ""
        return "base64 then zlib", _printable(inflated)
    return "base64", _printable(raw)


def _join_clusters(text: str):
    """(start, end, joined text) for each run of string literals joined by `+`, two joins or more within
    _JOIN_GAP characters of each other: lone joins (a long message wrapped once) are left alone, and
    a big file with a few joins is not read a second time in full. A literal "+" is no join: only a
    `+` between two literals is."""
    run: list[re.Match] = []  # the literals of the current run
    joins = 0

    def close():
        if joins >= 2:
            a, b = _around(text, run[0].start(), run[-1].end())
            joined = text[a:run[0].start()] + run[0].group(1) + "".join(m.group(2) for m in run) + run[-1].group(1) + text[run[-1].end():b]
            return a, b, joined
        return None
    previous = None
    for m in _LITERAL.finditer(text):
        if previous is not None and m.start() - previous.end() <= _JOIN_GAP and _JOIN.fullmatch(text, previous.end(), m.start()):
            if not run:
                run = [previous]
            run.append(m)
            joins += 1
        else:
            if (found := close()):
                yield found
            run, joins = [], 0
        previous = m
    if (found := close()):
        yield found


def _join_lists(text: str):
    """(start, end, the line with the list read as one string) for each list of literals joined by ''."""
    for m in _JOIN_EMPTY_PY.finditer(text):
        if (found := _literal_list(text, m.end(), "])")) is not None:
            pieces, close = found
            call_end = _CALL_END.match(text, close + 1)  # the join's own parenthesis
            yield _read_joined(text, m.start(), call_end.end() if call_end else close + 1, pieces)
    for m in _JOIN_EMPTY_JS.finditer(text):
        opening = text.rfind("[", max(0, m.start() - 8 * _JOIN_GAP), m.start())
        found = _literal_list(text, opening + 1, "]") if opening >= 0 else None
        if found is not None and found[1] == m.start():
            yield _read_joined(text, opening, m.end(), found[0])


def _literal_list(text: str, pos: int, closers: str) -> tuple[list[str], int] | None:
    """The contents of two or more string literals from `pos` to the bracket that closes their list
    (and that bracket's position), or None when anything else stands in the list."""
    pieces: list[str] = []
    while len(pieces) <= _MAX_LIST_ITEMS:
        pos = _LIST_GAP.match(text, pos).end()
        if pos < len(text) and text[pos] in closers:
            return (pieces, pos) if len(pieces) >= 2 else None
        literal = _LITERAL.match(text, pos)
        if literal is None:
            return None
        pieces.append(literal.group(2))
        pos = _LIST_COMMA.match(text, literal.end()).end()
    return None


def _read_joined(text: str, start: int, end: int, pieces: list[str]) -> tuple[int, int, str]:
    a, b = _around(text, start, end)
    return a, b, text[a:start] + '"' + "".join(pieces) + '"' + text[end:b]


def _two(matches) -> bool:
    return next(matches, None) is not None and next(matches, None) is not None


def _around(text: str, start: int, end: int) -> tuple[int, int]:
    """From the line start before `start` (at most _JOIN_GAP back) to the line end after `end`."""
    a = max(text.rfind("\n", 0, start) + 1, start - _JOIN_GAP)
    b = text.find("\n", end)
    return a, min(len(text) if b < 0 else b, end + _JOIN_GAP)


def _literals(text: str) -> list[re.Match]:
    """The string literals of `text` long enough to hide a command (12 characters or more)."""
    return [m for m in _LITERAL.finditer(text) if len(m.group(2)) >= 12]


def _lines(text: str):
    """(offset, line without its line break) for each line of `text`."""
    start = 0
    for line in text.splitlines(keepends=True):
        yield start, line.rstrip("\r\n")
        start += len(line)


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
