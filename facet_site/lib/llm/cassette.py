"""Recorded model calls, one JSON object per line, for demos and tests without an endpoint.

Entries are keyed by (stage, subject, seq), seq counting the calls made for that pair, so a replay
finds its answer by *what* is being asked about and in which order, not by the prompt's wording.
Rewording a prompt therefore does not invalidate a recording.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import LLMConfigError, PermanentLLMError
from .records import ProviderReply

log = logging.getLogger(__name__)

CASSETTE_FIELDS = (
    "stage",
    "subject",
    "seq",
    "prompt_version",
    "model",
    "request_hash",
    "messages",
    "response_text",
    "usage",
    "finish_reason",
    "source",
    "recorded_at",
)


def read_entries(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        lines = fh.readlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            # A run killed mid-write leaves at most a torn last line; anything else is damage.
            if lineno == len(lines) and not line.endswith("\n"):
                log.warning("cassette %s: ignoring torn last line %d", path, lineno)
                continue
            raise LLMConfigError(f"cassette {str(path)!r} line {lineno} is not JSON") from None
        if not isinstance(entry, dict) or "stage" not in entry or "subject" not in entry:
            raise LLMConfigError(f"cassette {str(path)!r} line {lineno} lacks stage/subject")
        entries.append(entry)
    return entries


class CassetteWriter:
    """Appends entries; each line goes out in one write on an O_APPEND descriptor and is fsynced,
    so a crash loses at most the line being written and never interleaves two lines."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._next_seq: dict[tuple[str, str], int] = defaultdict(int)
        # Continue numbering an existing cassette so a resumed recording appends after the
        # earlier run's calls instead of shadowing them.
        if self.path.exists():
            for entry in read_entries(self.path):
                key = (entry["stage"], entry["subject"])
                self._next_seq[key] = max(self._next_seq[key], int(entry.get("seq", -1)) + 1)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(
        self,
        *,
        stage: str,
        subject: str,
        prompt_version: str,
        model: str,
        request_hash: str,
        messages: list[dict[str, Any]],
        response_text: str,
        tokens_in: int | None,
        tokens_out: int | None,
        finish_reason: str | None,
        source: str,
    ) -> dict[str, Any]:
        with self._lock:
            seq = self._next_seq[(stage, subject)]
            entry = {
                "stage": stage,
                "subject": subject,
                "seq": seq,
                "prompt_version": prompt_version,
                "model": model,
                "request_hash": request_hash,
                "messages": messages,
                "response_text": response_text,
                "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out},
                "finish_reason": finish_reason,
                "source": source,
                "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
            data = (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8")
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            self._next_seq[(stage, subject)] = seq + 1
            return entry


class Cassette:
    """Read side: hands out the recorded calls of each (stage, subject) in recorded order."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise LLMConfigError(f"replay cassette {str(self.path)!r} does not exist")
        by_key: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for entry in read_entries(self.path):
            by_key[(entry["stage"], entry["subject"])].append(entry)
        for entries in by_key.values():
            entries.sort(key=lambda e: int(e.get("seq", 0)))
        self._entries = dict(by_key)
        self._cursor: dict[tuple[str, str], int] = defaultdict(int)
        self._lock = threading.Lock()

    def next_entry(self, stage: str, subject: str) -> dict[str, Any]:
        key = (stage, subject)
        with self._lock:
            entries = self._entries.get(key)
            if not entries:
                raise PermanentLLMError(
                    f"replay cassette {str(self.path)!r} has no entry for stage {stage!r}, subject {subject!r}"
                )
            n = self._cursor[key]
            if n >= len(entries):
                raise PermanentLLMError(
                    f"replay cassette {str(self.path)!r} has only {len(entries)} call(s) for stage {stage!r}, "
                    f"subject {subject!r}; call #{n + 1} was requested"
                )
            self._cursor[key] = n + 1
            return entries[n]

    def reply(self, stage: str, subject: str, messages: list[dict[str, Any]]) -> ProviderReply:
        entry = self.next_entry(stage, subject)
        usage = entry.get("usage") or {}
        return ProviderReply(
            text=entry.get("response_text") or "",
            # The prompt of this run, not the recorded one: that is what the record should show.
            sent_messages=messages,
            tokens_in=usage.get("prompt_tokens"),
            tokens_out=usage.get("completion_tokens"),
            attempts=0,
            finish_reason=entry.get("finish_reason"),
            model=entry.get("model") or "",
        )
