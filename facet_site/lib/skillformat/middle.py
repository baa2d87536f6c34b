"""The middle of a text file too large to keep (or the rest of an archive member past what is
read of it): read in blocks and handed to a scanner as it streams past, so that only what the
scanner returns is kept. Django-free.

Why: a text file over the reading limit keeps its first and last OVERSIZED_PART_BYTES for the
safety scan. Padding a script on both sides would hide a payload placed between them, and keeping
the whole text of every large file of a batch would cost memory without bound. So the caller that
knows the rules (ingest passes `skill_safety.scan_text_part`) scans each block here and keeps its
findings; the text itself is dropped. `MIDDLE_SCAN_BYTES` bounds the time one file can cost.
"""
from __future__ import annotations

from collections.abc import Callable

__all__ = ["MIDDLE_SCAN_BYTES", "MIDDLE_FINDINGS", "TextScanner", "MiddleScan"]

# (path, text, the file's line number where `text` starts, the file's first part) -> findings
TextScanner = Callable[[str, str, int, str], tuple]

MIDDLE_SCAN_BYTES = 32_000_000  # of one file's middle; past this it is named in the note, not read
MIDDLE_FINDINGS = 25  # kept of one file's middle, in file order
_BLOCK_BYTES = 1 << 20  # what one call of the scanner reads; cut after a newline when there is one
_LONG_LINE_CUT = 4096  # a block without a newline is cut this far before its end, on a character
# Each block after the first starts with the last lines of the one before (at most this many bytes),
# so a match near a cut is seen whole, with the lines around it a rule may look at (up to 8 each
# side in safety_rules/).
_OVERLAP_LINES = 16
_OVERLAP = 8192


class MiddleScan:
    """Fed every byte of the file from its start, in order; scans those from `begin` on (the
    first part is scanned elsewhere) until `finish`. `line` counts the newlines seen, so each
    block is scanned with the file's own line numbers."""

    def __init__(self, path: str, scanner: TextScanner, *, begin: int, head: str,
                 budget: int = MIDDLE_SCAN_BYTES):
        self.path, self.scanner, self.begin, self.head, self.budget = path, scanner, begin, head, budget
        self.pos = 0  # bytes fed so far
        self.line = 1  # the file's line number at the start of `buf`
        self.buf = bytearray()
        self.scanned = 0
        self.unread = 0  # middle bytes past the budget
        self.findings: list = []
        self.dropped = 0  # findings past MIDDLE_FINDINGS
        self._seen: set[tuple] = set()  # (rule, line): one finding each, as blocks of a long line overlap

    def feed(self, data: bytes) -> None:
        if self.pos < self.begin:  # still in the first part, which is scanned on its own
            skip = min(len(data), self.begin - self.pos)
            self.line += data.count(b"\n", 0, skip)
            self.pos += skip
            data = data[skip:]
        if not data:
            return
        self.pos += len(data)
        if self.exhausted:
            self.unread += len(data)
            return
        self.buf += data
        while len(self.buf) >= _BLOCK_BYTES:
            self._scan_block(final=False)

    @property
    def exhausted(self) -> bool:
        """The budget is used up: a caller reading a stream can stop."""
        return self.scanned + len(self.buf) >= self.budget

    def finish(self) -> None:
        """The middle ends here (where the last part starts)."""
        while self.buf:
            self._scan_block(final=True)

    def note(self, where: str = "between", *, rest_unknown: bool = False) -> str:
        """What was read, for the file's note: `where` names the part ("between" the two ends of a
        file; "after" the first part of an archive member); `rest_unknown` when reading stopped at
        the budget without reaching the end, so how much was left is not known."""
        read = f"the {self.scanned} bytes {where} scanned in blocks, not kept"
        if rest_unknown:
            read = f"the first {self.scanned} bytes {where} scanned in blocks, the rest not read"
        elif self.unread:
            read = f"the first {self.scanned} bytes {where} scanned in blocks, the {self.unread} after not read"
        if self.dropped:
            read += f" ({self.dropped} more findings there not kept)"
        return read

    def _scan_block(self, *, final: bool) -> None:
        room = self.budget - self.scanned
        if room <= 0:
            self.unread += len(self.buf)
            self.buf.clear()
            return
        end = min(len(self.buf), _BLOCK_BYTES, room)
        keep = 0  # bytes at the end of this block that the next one starts with
        if end < len(self.buf) or not final:
            nl = self.buf.rfind(b"\n", 0, end)
            if nl >= 0:
                end = nl + 1
            else:  # one long line: cut it on a character, a little before the end
                end = _char_start(self.buf, max(end - _LONG_LINE_CUT, end // 2)) or _next_char(self.buf, 0)
            floor = max(end - _OVERLAP, 0)
            start = end
            for _ in range(_OVERLAP_LINES):  # back over the block's last lines
                nl = self.buf.rfind(b"\n", floor, start - 1)
                if nl < 0:
                    start = _char_start(self.buf, floor)
                    break
                start = nl + 1
            keep = end - start if start > 0 else 0  # a block shorter than the overlap moves on whole
        block = bytes(self.buf[:end])
        for finding in self.scanner(self.path, block.decode("utf-8", "replace"), self.line, self.head):
            key = (getattr(finding, "rule_id", None), getattr(finding, "line", None))
            if key in self._seen:
                continue
            self._seen.add(key)
            if len(self.findings) < MIDDLE_FINDINGS:
                self.findings.append(finding)
            else:
                self.dropped += 1
        self.line += self.buf.count(b"\n", 0, end - keep)
        del self.buf[:end - keep]
        self.scanned += end - keep


def _next_char(buf: bytearray, i: int) -> int:
    """Where the UTF-8 character after the one at `i` starts."""
    i += 1
    while i < len(buf) and (buf[i] & 0xC0) == 0x80:
        i += 1
    return i


def _char_start(buf: bytearray, i: int) -> int:
    """`i`, moved back to the first byte of the UTF-8 character it falls in."""
    while i > 0 and (buf[i] & 0xC0) == 0x80:
        i -= 1
    return i
