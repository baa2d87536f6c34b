"""Structure-aware previews of the files in a realized environment (e0), and the installed tool
versions, for the construction prompts: a model writing the instruction, solution and verifier
has to know a CSV's columns, a JSON file's keys, a log's line format or a database's tables
without being shown whole files. Django-free; pure functions of the bytes read from the engine.

Each preview is a small dict (`kind` plus a few fields); `render_preview` turns one into the
lines a prompt shows. Every list and text is capped here, so a stored e0 stays small whatever
the environment holds.
"""
from __future__ import annotations

import csv
import io
import json
import os
import posixpath
import re
import sqlite3
import tempfile

# Files up to this size are read whole for a preview (row counts, table lists); larger ones get
# only what their head shows.
PREVIEW_MAX_BYTES = 4 * 1024 * 1024
SAMPLE_ROWS = 3
MAX_CELL_CHARS = 80
MAX_KEYS = 30
MAX_LINE_CHARS = 200
TEXT_HEAD_LINES = 8
# Directories whose contents are machinery, not fixtures: counted, never previewed.
MACHINERY_DIRS = (".git", "node_modules", "__pycache__", ".venv", "venv", ".cache", ".mypy_cache",
                  ".pytest_cache", "site-packages")

_MAGIC = [  # (prefix, type) of common binary formats
    (b"SQLite format 3\x00", "sqlite"), (b"\x89PNG\r\n\x1a\n", "png image"), (b"\xff\xd8\xff", "jpeg image"),
    (b"GIF8", "gif image"), (b"%PDF", "pdf document"), (b"PK\x03\x04", "zip archive"),
    (b"\x1f\x8b", "gzip data"), (b"BZh", "bzip2 data"), (b"\xfd7zXZ\x00", "xz data"),
    (b"\x7fELF", "ELF executable"), (b"PAR1", "parquet file"), (b"RIFF", "RIFF (wav/avi) data"),
    (b"\x28\xb5\x2f\xfd", "zstd data"), (b"ustar", "tar archive"),
]
_TIMESTAMP = re.compile(r"^\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|^\d{1,3}(\.\d{1,3}){3} |"
                        r"^[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2}|^\d{2}/[A-Z][a-z]{2}/\d{4}")


def in_machinery(path: str) -> bool:
    return any(part in MACHINERY_DIRS for part in path.split("/"))


def _cut(text: str, limit: int = MAX_CELL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _binary_type(data: bytes) -> str | None:
    for prefix, name in _MAGIC:
        if data.startswith(prefix):
            return name
    if len(data) > 262 and data[257:262] == b"ustar":
        return "tar archive"
    return None


def _decode(data: bytes) -> str | None:
    if b"\0" in data[:8192]:
        return None
    for cut in range(4):  # a head may end inside a multi-byte character
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def _type_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        inner = sorted({_type_name(v) for v in value[:50]})
        return f"list[{'|'.join(inner)}]" if inner else "list"
    return "object"


def _keys(obj: dict) -> dict[str, str]:
    return {_cut(str(k), 60): _type_name(v) for k, v in list(obj.items())[:MAX_KEYS]}


def _csv_preview(text: str, whole: bool, delimiter: str) -> dict:
    rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
    if not whole and rows:
        rows = rows[:-1]  # the head's last line may be cut short
    header = rows[0] if rows else []
    return {"kind": "tsv" if delimiter == "\t" else "csv", "columns": [_cut(c, 60) for c in header[:MAX_KEYS]],
            "column_count": len(header), "rows": (len(rows) - 1) if whole and rows else None,
            "sample": [[_cut(c) for c in r[:MAX_KEYS]] for r in rows[1:1 + SAMPLE_ROWS]]}


def _json_preview(text: str) -> dict:
    data = json.loads(text)
    out: dict = {"kind": "json", "top_level": _type_name(data)}
    if isinstance(data, dict):
        out["keys"] = _keys(data)
        out["key_count"] = len(data)
    elif isinstance(data, list):
        out["length"] = len(data)
        first = next((x for x in data if isinstance(x, dict)), None)
        if first is not None:
            out["item_keys"] = _keys(first)
    return out


def _jsonl_preview(lines: list[str], whole: bool) -> dict:
    records = [ln for ln in lines if ln.strip()]
    first: dict | None = None
    for ln in records[:5]:
        try:
            obj = json.loads(ln)
        except ValueError:
            continue
        if isinstance(obj, dict):
            first = obj
            break
    return {"kind": "jsonl", "records": len(records) if whole else None,
            "item_keys": _keys(first) if first else {},
            "sample": [_cut(ln, MAX_LINE_CHARS) for ln in records[:2]]}


def _log_preview(lines: list[str], whole: bool) -> dict:
    body = [ln for ln in lines if ln.strip()]
    picks = body[:2] + ([body[len(body) // 2]] if len(body) > 4 else []) + (body[-1:] if len(body) > 2 and whole else [])
    return {"kind": "log", "lines": len(lines) if whole else None,
            "sample": [_cut(ln, MAX_LINE_CHARS) for ln in dict.fromkeys(picks)]}


def _sqlite_preview(data: bytes) -> dict:
    fd, name = tempfile.mkstemp(suffix=".sqlite")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        con = sqlite3.connect(f"file:{name}?mode=ro", uri=True)
        try:
            tables = []
            for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                        "AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()[:MAX_KEYS]:
                quoted = '"' + table.replace('"', '""') + '"'
                cols = [f"{r[1]} {r[2]}".strip() for r in con.execute(f"PRAGMA table_info({quoted})")]
                count = con.execute(f"SELECT COUNT(*) FROM {quoted}").fetchone()[0]
                tables.append({"table": table, "columns": cols[:MAX_KEYS], "rows": count})
        finally:
            con.close()
        return {"kind": "sqlite", "tables": tables}
    except sqlite3.Error as exc:
        return {"kind": "sqlite", "error": _cut(str(exc), 200)}
    finally:
        os.unlink(name)


def preview_file(path: str, data: bytes, size: int) -> dict:
    """A preview of one file from its bytes (`data` is the whole file when len(data) == size,
    else its head). Never raises: a file that does not parse as its extension says gets a text
    or binary preview instead."""
    whole = len(data) >= size
    ext = posixpath.splitext(path)[1].lower()
    binary = _binary_type(data)
    if binary == "sqlite":
        return _sqlite_preview(data) if whole else {"kind": "sqlite", "note": "too large to open here"}
    text = _decode(data)
    if text is None or binary:
        return {"kind": "binary", "type": binary or "data"}
    lines = text.splitlines()
    try:
        if ext in (".csv", ".tsv"):
            return _csv_preview(text, whole, "\t" if ext == ".tsv" else ",")
        if ext in (".json", ".geojson") and whole:
            return _json_preview(text)
        if ext in (".jsonl", ".ndjson"):
            return _jsonl_preview(lines, whole)
    except (ValueError, csv.Error):
        pass
    if ext == ".log" or ".log." in posixpath.basename(path) or (
            len(lines) >= 3 and sum(bool(_TIMESTAMP.match(ln)) for ln in lines[:10]) >= 3):
        return _log_preview(lines, whole)
    return {"kind": "text", "lines": len(lines) if whole else None,
            "head": [_cut(ln, MAX_LINE_CHARS) for ln in lines[:TEXT_HEAD_LINES]]}


def render_preview(path: str, size: int, preview: dict) -> str:
    """The lines a prompt shows for one preview."""
    kind = preview.get("kind", "text")
    head = f"### {path} ({size} bytes, {kind})"
    out = [head]
    if kind in ("csv", "tsv"):
        rows = preview.get("rows")
        out.append(f"columns ({preview.get('column_count')}): {', '.join(preview.get('columns') or [])}")
        out.append(f"data rows: {rows if rows is not None else 'more than the head shows'}")
        out += ["  " + ("\t" if kind == "tsv" else ",").join(r) for r in preview.get("sample") or []]
    elif kind == "json":
        out.append(f"top level: {preview.get('top_level')}")
        if "keys" in preview:
            out.append(f"keys ({preview.get('key_count')}): " + ", ".join(f"{k}: {t}" for k, t in preview["keys"].items()))
        if "length" in preview:
            out.append(f"items: {preview['length']}")
        if preview.get("item_keys"):
            out.append("item keys: " + ", ".join(f"{k}: {t}" for k, t in preview["item_keys"].items()))
    elif kind == "jsonl":
        out.append(f"records: {preview.get('records') if preview.get('records') is not None else 'many'}")
        if preview.get("item_keys"):
            out.append("record keys: " + ", ".join(f"{k}: {t}" for k, t in preview["item_keys"].items()))
        out += ["  " + s for s in preview.get("sample") or []]
    elif kind == "log":
        lines = preview.get("lines")
        out.append(f"lines: {lines if lines is not None else 'many'}; line format samples:")
        out += ["  " + s for s in preview.get("sample") or []]
    elif kind == "sqlite":
        if preview.get("error") or preview.get("note"):
            out.append(preview.get("error") or preview.get("note"))
        for t in preview.get("tables") or []:
            out.append(f"table {t['table']} ({t['rows']} rows): {', '.join(t['columns'])}")
    elif kind == "binary":
        out[0] = f"### {path} ({size} bytes, binary: {preview.get('type', 'data')})"
    else:
        lines = preview.get("lines")
        out.append(f"lines: {lines if lines is not None else 'many'}; first lines:")
        out += ["  " + s for s in preview.get("head") or []]
    return "\n".join(out)


# --- installed tools ------------------------------------------------------------------------------

TOOLS = ("python3", "pip3", "node", "npm", "git", "jq", "sqlite3", "curl", "wget", "make", "gcc", "go",
         "java", "ruby", "perl", "psql", "redis-server", "nginx", "pytest", "awk", "sed", "bash")
MAX_PIP_PACKAGES = 80

# One exec: the OS, one version line per tool found, then the Python packages. Each probe is
# bounded so a tool that waits for input cannot hang it.
TOOL_VERSIONS_COMMAND = (
    "echo \"os\t$(. /etc/os-release 2>/dev/null && echo \"$PRETTY_NAME\")\"; "
    "for t in " + " ".join(TOOLS) + "; do "
    "p=$(command -v \"$t\" 2>/dev/null) || continue; "
    "case $t in java) v=$(timeout 5 \"$t\" -version 2>&1 | head -n 1);; go) v=$(timeout 5 go version 2>&1 | head -n 1);; "
    "awk) v=$(timeout 5 awk --version 2>&1 | head -n 1 || echo present);; "
    "*) v=$(timeout 5 \"$t\" --version </dev/null 2>&1 | grep -m 1 .);; esac; "
    "echo \"tool\t$t\t$p\t$v\"; done; "
    "echo '--- pip'; timeout 20 python3 -m pip list --format=freeze --disable-pip-version-check 2>/dev/null | head -n 400"
)


def parse_tool_versions(output: str) -> dict:
    """{"os": ..., "tools": {name: version line}, "python_packages": ["name==version", ...],
    "python_packages_total": n} from TOOL_VERSIONS_COMMAND's output."""
    out: dict = {"os": "", "tools": {}, "python_packages": [], "python_packages_total": 0}
    in_pip = False
    packages = []
    for line in output.splitlines():
        if line.strip() == "--- pip":
            in_pip = True
            continue
        if in_pip:
            if "==" in line or " @ " in line:
                packages.append(_cut(line.strip(), 100))
            continue
        parts = line.split("\t")
        if parts[0] == "os" and len(parts) > 1:
            out["os"] = _cut(parts[1].strip(), 100)
        elif parts[0] == "tool" and len(parts) >= 4:
            out["tools"][parts[1]] = _cut(parts[3].strip() or "present", 120)
    out["python_packages_total"] = len(packages)
    out["python_packages"] = packages[:MAX_PIP_PACKAGES]
    return out


def render_tools(tools: dict | None) -> str:
    if not tools:
        return "(not captured)"
    lines = []
    if tools.get("os"):
        lines.append(f"OS: {tools['os']}")
    for name, version in (tools.get("tools") or {}).items():
        lines.append(f"- {name}: {version}")
    pkgs = tools.get("python_packages") or []
    total = tools.get("python_packages_total") or len(pkgs)
    if pkgs:
        more = f" (and {total - len(pkgs)} more)" if total > len(pkgs) else ""
        lines.append(f"Python packages ({total}): " + ", ".join(pkgs) + more)
    return "\n".join(lines) or "(no tools found)"
