"""Answer caches keyed by `request_hash`, so a resumed run never pays for the same request twice.

The Django side provides a database-backed cache with the same two methods.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from pathlib import Path

from .records import CallRecord

_HASH_RE = re.compile(r"^[0-9a-f]{16,128}$")


class MemoryCache:
    def __init__(self) -> None:
        self._data: dict[str, dict] = {}
        self._lock = threading.Lock()

    def get(self, request_hash: str) -> CallRecord | None:
        with self._lock:
            data = self._data.get(request_hash)
        # A fresh object each time: callers may mutate the record they get.
        return CallRecord.from_dict(data) if data is not None else None

    def put(self, request_hash: str, record: CallRecord) -> None:
        with self._lock:
            self._data[request_hash] = record.to_dict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)


class JsonDirCache:
    """One JSON file per request hash under `directory/<first two hex digits>/`."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, request_hash: str) -> Path:
        # The hash becomes a file name; refuse anything that could walk out of the directory.
        if not _HASH_RE.match(request_hash):
            raise ValueError(f"not a request hash: {request_hash!r}")
        return self.directory / request_hash[:2] / f"{request_hash}.json"

    def get(self, request_hash: str) -> CallRecord | None:
        path = self._path(request_hash)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            # A damaged entry is a miss, not a failure: the call is simply made again.
            return None
        return CallRecord.from_dict(data) if isinstance(data, dict) else None

    def put(self, request_hash: str, record: CallRecord) -> None:
        path = self._path(request_hash)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename so a concurrent reader never sees half a file.
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(record.to_dict(), fh, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
