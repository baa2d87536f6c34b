"""What a database column cannot take, found in parsed JSON: a NUL byte in text (PostgreSQL text
refuses it) or an integer past a signed 64-bit one. Used by the request backstop
(facet_site/middleware.py) and by importers of JSON lines, each naming the field at fault."""
from __future__ import annotations

MAX_INT = 2**63 - 1


def bad_json_value(value, path: str = "") -> str | None:
    """The first value under `value` no database column takes, as 'path: why'; None when all fit."""
    where = path or "body"
    if isinstance(value, str):
        return f"{where}: text must not contain NUL bytes" if "\x00" in value else None
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return None
    if isinstance(value, int):
        return f"{where}: number out of range" if abs(value) > MAX_INT else None
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        if isinstance(key, str) and "\x00" in key:
            return f"{where}: a key must not contain NUL bytes"
        problem = bad_json_value(item, f"{path}.{key}" if path else str(key))
        if problem:
            return problem
    return None
