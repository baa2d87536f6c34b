"""SKILL.md frontmatter: the YAML between the fences, recovered where the published corpus breaks
the spec, kept JSON-safe and bounded, and the spec's warnings."""
from __future__ import annotations

import datetime as _dt
import math
import re

import yaml

from facet_site.lib.skillformat.normalise import _scalar_text


_FRONTMATTER_NODE_BUDGET = 20_000
_FRONTMATTER_MAX_DEPTH = 40

_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # same safe semantics, C speed


class _FrontmatterError(Exception):
    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.message = message
        self.line = line


_FM_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.M)
_FM_CLOSE_GLUED = re.compile(r"^---(?=[^\s-])", re.M)
# Dropping one of these would silently change what the skill requires or is called.
_ESSENTIAL_KEYS = frozenset({"name", "description", "metadata", "requires", "install", "license", "allowed-tools"})
_TOP_KEY = re.compile(r"^([A-Za-z_][\w.\-]*)[ \t]*:(?:[ \t]+(.*)|[ \t]*)$")


def _frontmatter(text: str, md_name: str, warnings: list[str], strict: bool):
    """(frontmatter dict, raw frontmatter text or None, its first line, body, body's first line)."""
    pos, line = 0, 1
    # Leading blank lines are tolerated; the first non-blank line decides.
    while True:
        nl = text.find("\n", pos)
        end = nl if nl >= 0 else len(text)
        if nl >= 0 and not text[pos:end].strip():
            pos, line = nl + 1, line + 1
            continue
        break
    if text[pos:end].rstrip() != "---":
        if strict:
            raise _FrontmatterError(f"{md_name}: missing YAML frontmatter (the file must start with a '---' line)", 1)
        warnings.append(f"{md_name}: no YAML frontmatter; name and description taken from the body")
        return {}, None, 0, text, 1
    fm_start = end + 1
    fm_line = line + 1
    close = _FM_CLOSE.search(text, fm_start) if fm_start <= len(text) else None
    glued = None if strict or fm_start > len(text) else _FM_CLOSE_GLUED.search(text, fm_start)
    if glued is not None and (close is None or glued.start() < close.start()):
        # "---**Base URL:** ..." (a translated mirror's copies): the fence, then the body on its line
        fm_text = text[fm_start:glued.start()]
        body = text[glued.start() + 3:]
        body_line = fm_line + fm_text.count("\n")
        warnings.append(f"{md_name}: the closing '---' at line {body_line} has text after it; read that text as the body")
    elif close is not None:
        fm_text = text[fm_start:close.start()]
        body_off = close.end() + 1
        body = text[body_off:] if body_off <= len(text) else ""
        body_line = fm_line + fm_text.count("\n") + 1
    else:
        if strict:
            raise _FrontmatterError(f"{md_name}: frontmatter has no closing '---' line", line)
        # Without a closing fence, assume the block ends at the first blank line or heading.
        rest = text[fm_start:] if fm_start <= len(text) else ""
        m = re.search(r"^(?:[ \t]*$|#)", rest, re.M)
        cut = m.start() if m else len(rest)
        fm_text = rest[:cut]
        body = rest[cut:]
        body_line = fm_line + fm_text.count("\n")
        warnings.append(f"{md_name}: frontmatter has no closing '---'; assumed it ends at line {body_line - 1}")
    fm = _load_yaml(fm_text, fm_line, md_name, warnings, strict)
    return fm, fm_text, fm_line, body, body_line


def _load_yaml(fm_text: str, fm_line: int, md_name: str, warnings: list[str], strict: bool) -> dict:
    try:
        data = yaml.load(fm_text, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        line = fm_line + _yaml_error_line(exc, fm_text)
        detail = _yaml_error_detail(exc)
        message = f"{md_name}: frontmatter is not valid YAML (line {line}): {detail}"
        recovered = None if strict else _recover_frontmatter(fm_text)
        if recovered is None:
            raise _FrontmatterError(message, line) from None
        data, dropped = recovered
        note = f"; dropped unreadable key(s): {', '.join(dropped)}" if dropped else ""
        warnings.append(f"{message}; recovered key by key{note}")
    except RecursionError:
        raise _FrontmatterError(f"{md_name}: frontmatter is nested too deeply") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _FrontmatterError(
            f"{md_name}: frontmatter is not a mapping (got {_yaml_type(data)}); expected `key: value` lines", fm_line
        )
    try:
        return _jsonable(data, [_FRONTMATTER_NODE_BUDGET], 0)
    except _TooComplex:
        raise _FrontmatterError(
            f"{md_name}: frontmatter is too large or self-referencing (over {_FRONTMATTER_NODE_BUDGET} values "
            f"or {_FRONTMATTER_MAX_DEPTH} levels after alias expansion)",
            fm_line,
        ) from None


def _recover_frontmatter(fm_text: str) -> tuple[dict, list[str]] | None:
    """Re-read frontmatter key by key after a YAML error.

    The common breakage in published skills is a plain one-line value containing `: ` (e.g.
    `description: Use when you need to: ...`), which is fine for a human and fatal for YAML. Each
    top-level key with its indented continuation is parsed on its own; a key that still fails is
    taken verbatim when it is a single plain line, else dropped. Recovery is refused (None) when
    a key that shapes the record (_ESSENTIAL_KEYS) would be dropped or no description results,
    so genuinely broken frontmatter still becomes a problem.
    """
    chunks: list[tuple[str, list[str]]] = []
    for raw_line in fm_text.split("\n"):
        m = _TOP_KEY.match(raw_line)
        if m:
            chunks.append((m.group(1), [raw_line]))
        elif chunks:
            chunks[-1][1].append(raw_line)
        elif raw_line.strip() and not raw_line.lstrip().startswith("#"):
            return None
    result: dict = {}
    dropped: list[str] = []
    for key, lines in chunks:
        while len(lines) > 1 and not lines[-1].strip():
            lines.pop()
        chunk = "\n".join(lines)
        try:
            parsed = yaml.load(chunk, Loader=_YamlLoader)
            if isinstance(parsed, dict) and key in parsed:
                result[key] = parsed[key]
                continue
        except (yaml.YAMLError, RecursionError):
            pass
        value = _TOP_KEY.match(lines[0]).group(2) or ""
        value = value.strip()
        if len(lines) == 1 and value and value[0] not in "[{&*!|>\"'%@`":
            result[key] = value
        elif len(lines) == 1 and (quoted := _quoted_then_text(value)) is not None:
            result[key] = quoted
        else:
            dropped.append(key)
    if _ESSENTIAL_KEYS.intersection(dropped):
        return None
    if not _scalar_text(result.get("description")):
        return None
    return result, dropped


_QUOTED_THEN_TEXT = re.compile(r"""^(?P<q>"(?:[^"\\]|\\.)*"|'(?:[^']|'')*')[ \t]+(?P<rest>[^#\s].*)$""")


def _quoted_then_text(value: str) -> str | None:
    """A quoted scalar with more text after its closing quote, on one line: `"Extends X ..." Verification
    is performed ...` (a published skill's description). YAML refuses it; the author meant one sentence
    run on, so the quoted part (unescaped) and the rest are joined. None for anything else."""
    m = _QUOTED_THEN_TEXT.match(value)
    if m is None:
        return None
    try:
        head = yaml.safe_load(m.group("q"))
    except yaml.YAMLError:
        return None
    return f"{head} {m.group('rest').strip()}" if isinstance(head, str) else None


def _yaml_error_line(exc: yaml.YAMLError, fm_text: str) -> int:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        return mark.line
    position = getattr(exc, "position", None)  # ReaderError (bad characters) has no mark
    if isinstance(position, int):
        return fm_text.count("\n", 0, position)
    return 0


def _yaml_error_detail(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    if problem:
        return str(problem)
    if isinstance(exc, yaml.reader.ReaderError):
        return f"unacceptable character #x{exc.character:04x}" if isinstance(exc.character, int) else str(exc.reason)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _yaml_type(value) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


class _TooComplex(Exception):
    pass


def _jsonable(value, budget: list[int], depth: int):
    """A JSON-safe copy: dates to ISO text, bytes/sets/odd keys made plain, NaN to text.

    The budget guards against alias bombs: PyYAML shares aliased nodes, so a small document
    can stand for millions of values (or a cycle) once copied.
    """
    budget[0] -= 1
    if budget[0] < 0 or depth > _FRONTMATTER_MAX_DEPTH:
        raise _TooComplex
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {_key_text(k): _jsonable(v, budget, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, budget, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v, budget, depth + 1) for v in value), key=str)
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _key_text(key) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, (_dt.date, _dt.datetime)):
        return key.isoformat()
    return str(key)


def _raw_scalar(fm_text: str | None, key: str) -> str:
    """The verbatim text of a top-level scalar, so `version: 1.10` stays "1.10", not 1.1."""
    if not fm_text or key not in fm_text:
        return ""
    m = re.search(rf"^{re.escape(key)}[ \t]*:[ \t]*(['\"]?)([^\n#'\"]+?)\1[ \t]*(?:#.*)?$", fm_text, re.M)
    return m.group(2).strip() if m else ""


_NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def _spec_warnings(fm: dict, name: str, description: str, md_name: str, warnings: list[str]) -> None:
    # Deviations from the strict Agent Skills map are noted, never rejected: ClawHub accepts them.
    if "name" in fm and (len(name) > 64 or not _NAME_RE.match(name)):
        warnings.append(f"{md_name}: `name` {name[:80]!r} is not 1-64 chars of [a-z0-9-] (Agent Skills spec)")
    if len(description) > 1024:
        warnings.append(f"{md_name}: `description` is {len(description)} chars, over the spec's 1024")

