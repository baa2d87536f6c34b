"""What one model call leaves behind, and the two hooks through which the Django side keeps it."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel

Status = Literal["ok", "invalid_output", "error", "cached", "replayed"]
STATUSES: tuple[str, ...] = ("ok", "invalid_output", "error", "cached", "replayed")


@dataclass
class CallRecord:
    stage: str
    subject: str  # what the call served, e.g. "skill:42"
    model: str
    prompt_version: str
    messages: list[dict[str, Any]]  # as sent, including any JSON instruction and the re-ask turns
    response_text: str = ""
    parsed: dict[str, Any] | None = None
    tokens_in: int | None = None  # None when the server did not report usage
    tokens_out: int | None = None
    latency_ms: int = 0
    cost_usd: float | None = None  # None when the model has no price in the table
    status: Status = "ok"
    error: str = ""
    request_hash: str = ""
    attempts: int = 0  # HTTP requests made for this call; 0 for a cache hit
    created_at: str = ""  # ISO 8601, UTC

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallRecord:
        # Ignore unknown keys so records stored by a newer version still load.
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


M = TypeVar("M", bound=BaseModel)


@dataclass
class StructuredResult(Generic[M]):
    parsed: M
    record: CallRecord


@dataclass
class TextResult:
    text: str
    record: CallRecord


class Recorder(Protocol):
    def __call__(self, record: CallRecord) -> None: ...


class Cache(Protocol):
    def get(self, request_hash: str) -> CallRecord | None: ...

    def put(self, request_hash: str, record: CallRecord) -> None: ...


def request_hash(
    *,
    model: str,
    messages: list[dict[str, Any]],
    schema: dict[str, Any] | None,
    temperature: float | None,
    max_tokens: int | None,
) -> str:
    """Identity of a request for the cache: what decides the answer, not where it is sent."""
    payload = {
        "model": model,
        "messages": messages,
        "schema": schema,
        "temperature": temperature,
        "max_tokens": max_tokens,
    }
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass
class ProviderReply:
    """One answered request as a provider saw it, before the client judges the content."""

    text: str
    sent_messages: list[dict[str, Any]]
    tokens_in: int | None = None
    tokens_out: int | None = None
    attempts: int = 1
    finish_reason: str | None = None
    model: str = ""
