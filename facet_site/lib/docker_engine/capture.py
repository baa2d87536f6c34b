"""Bounded handling of the byte streams an engine sends: output and logs capped to a head and a
tail or to a file, and archive chunks read as a file."""
from __future__ import annotations

import io
from collections import deque
from pathlib import Path
from typing import IO, Any, Iterator


class HeadTail:
    """Keeps the first and last `limit // 2` bytes of a stream, counting what it drops."""

    def __init__(self, limit: int):
        self.head_limit = max(limit // 2, 0)
        self.tail_limit = max(limit - self.head_limit, 0)
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if len(self.head) < self.head_limit:
            take = self.head_limit - len(self.head)
            self.head += data[:take]
            data = data[take:]
        if not data or not self.tail_limit:
            return
        if len(data) >= self.tail_limit:
            self.tail.clear()
            self.tail.append(bytes(data[-self.tail_limit:]))
            self.tail_len = self.tail_limit
            return
        self.tail.append(bytes(data))
        self.tail_len += len(data)
        while self.tail_len - len(self.tail[0]) >= self.tail_limit:
            self.tail_len -= len(self.tail.popleft())
        if self.tail_len > self.tail_limit:
            extra = self.tail_len - self.tail_limit
            self.tail[0] = self.tail[0][extra:]
            self.tail_len = self.tail_limit

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - self.tail_len

    def getvalue(self) -> bytes:
        tail = b"".join(self.tail)
        if self.dropped:
            note = f"\n[facet: {self.dropped} bytes of output dropped here]\n".encode()
            return bytes(self.head) + note + tail
        return bytes(self.head) + tail

    def text(self) -> str:
        return self.getvalue().decode("utf-8", errors="replace")


class FileSink:
    """Streams output to a file, up to `max_bytes`; the rest is counted and a marker at the end
    says how much was cut. The full log a reviewer downloads, where HeadTail keeps only 1 MiB."""

    def __init__(self, path: Path, max_bytes: int):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max(int(max_bytes), 0)
        self.fh: IO[bytes] | None = open(self.path, "wb")
        self.written = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if self.fh is None or self.written >= self.max_bytes:
            return
        take = data[: self.max_bytes - self.written]
        self.fh.write(take)
        self.written += len(take)

    @property
    def truncated(self) -> bool:
        return self.total > self.written

    def close(self) -> None:
        if self.fh is None:
            return
        if self.truncated:
            self.fh.write(f"\n[facet: log truncated at {self.max_bytes} bytes; the command printed "
                          f"{self.total} bytes in all]\n".encode())
        self.fh.close()
        self.fh = None


class Tee:
    def __init__(self, *sinks: Any):
        self.sinks = sinks

    def feed(self, data: bytes) -> None:
        for sink in self.sinks:
            sink.feed(data)


# --------------------------------------------------------------------------------------------
# Base image


class IterReader(io.RawIOBase):
    """A file object over an iterator of byte chunks (what get_archive returns)."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n
