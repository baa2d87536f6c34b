"""Normalising values read from skills: scalars to text, deduplicated lists, relative POSIX
paths."""
from __future__ import annotations

import os


def _rel(path: str, root: str) -> str:
    rel = os.path.relpath(path, root)
    return rel.replace(os.sep, "/") if os.sep != "/" else rel


def _join_rel(rel_dir: str, name: str) -> str:
    return name if rel_dir == "." else f"{rel_dir}/{name}"


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _str_or_empty(value) -> str:
    return value.strip() if isinstance(value, str) else ""


def _scalar_text(value) -> str:
    """Text of a scalar frontmatter value; lists and mappings are not scalars and give ""."""
    if value is None or isinstance(value, (dict, list)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def _dedupe(items, limit: int | None = None) -> list[str]:
    seen = set()
    out = []
    for item in items:
        if item and item not in seen:
            seen.add(item)
            out.append(item)
            if limit is not None and len(out) >= limit:
                break
    return out


def _dedupe_dicts(items: list[dict]) -> list[dict]:
    seen = set()
    out = []
    for item in items:
        if item["name"] not in seen:
            seen.add(item["name"])
            out.append(item)
    return out

