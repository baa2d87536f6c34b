"""Getting one JSON object out of model text, and telling the model what was wrong with it."""
from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError

_FENCE_RE = re.compile(r"```[ \t]*(?:json5?|JSON)?[ \t]*\n(.*?)```", re.DOTALL)
# Reasoning models served without a reasoning parser put their thoughts in the content.
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


class JSONNotFound(ValueError):
    pass


def extract_json(text: str) -> Any:
    """The JSON value the model meant: the whole text, else a fenced block, else the first object
    or array that decodes, so leading prose and trailing remarks are tolerated."""
    cleaned = _THINK_RE.sub("", text or "").strip()
    if not cleaned:
        raise JSONNotFound("the reply is empty")
    try:
        return json.loads(cleaned)
    except json.JSONDecodeError:
        pass
    for block in _FENCE_RE.findall(cleaned):
        try:
            return json.loads(block.strip())
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[\[{]", cleaned):
        try:
            value, _end = decoder.raw_decode(cleaned, match.start())
        except json.JSONDecodeError:
            continue
        # A bare "[1]" inside prose is rarely the answer; an object is what the stages expect.
        if isinstance(value, dict) or (isinstance(value, list) and value and isinstance(value[0], dict)):
            return value
    raise JSONNotFound("no JSON object found in the reply")


def parse_structured(text: str, schema: type[BaseModel]) -> BaseModel:
    """Raises JSONNotFound or pydantic.ValidationError."""
    return schema.model_validate(extract_json(text))


def describe_error(exc: Exception, limit: int = 20) -> str:
    """A compact, model-readable account of why the output was rejected."""
    if isinstance(exc, ValidationError):
        lines = []
        for err in exc.errors(include_url=False)[:limit]:
            loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
            lines.append(f"- {loc}: {err.get('msg', 'invalid')}")
        more = exc.error_count() - limit
        if more > 0:
            lines.append(f"- ... and {more} more")
        return f"{exc.error_count()} validation error(s) for {exc.title}:\n" + "\n".join(lines)
    return str(exc)


def json_schema_for(schema: type[BaseModel]) -> dict[str, Any]:
    return schema.model_json_schema()


def schema_name(schema: type[BaseModel]) -> str:
    # OpenAI restricts response_format names to [a-zA-Z0-9_-]{1,64}.
    return re.sub(r"[^a-zA-Z0-9_-]", "_", schema.__name__)[:64] or "output"
