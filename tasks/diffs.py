"""Repair diffs: what changed between two task versions (or two environment build attempts),
file by file, as rows a template renders in a unified and a side-by-side layout.

Nothing here produces HTML: the rows carry plain text and the templates escape it, so a model's
`<script>` in a changed line stays text. Long files are cut (MAX_ROWS per file) with a note,
rather than making a reviewer's browser render a 100,000-line table.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field

CONTEXT_LINES = 3
MAX_ROWS = 2000  # rows of one file's diff shown on the page
MAX_DIFF_CHARS = 2_000_000  # past this a file is reported changed, not diffed line by line


@dataclass
class UnifiedRow:
    kind: str  # "hunk" | "context" | "added" | "removed"
    old_no: int | None
    new_no: int | None
    text: str


@dataclass
class SplitRow:
    kind: str  # "hunk" | "context" | "changed" | "added" | "removed"
    old_no: int | None
    old_text: str | None
    new_no: int | None
    new_text: str | None


@dataclass
class FileDiff:
    path: str
    status: str  # "added" | "removed" | "modified"
    added: int = 0  # lines
    removed: int = 0
    unified: list[UnifiedRow] = field(default_factory=list)
    split: list[SplitRow] = field(default_factory=list)
    truncated: bool = False
    too_large: bool = False
    old_size: int = 0
    new_size: int = 0

    @property
    def anchor(self) -> str:
        return "diff-" + "".join(c if c.isalnum() else "-" for c in self.path)


def _lines(text: str | None) -> list[str]:
    return (text or "").splitlines()


def file_diff(path: str, old: str | None, new: str | None, *, context: int = CONTEXT_LINES,
              max_rows: int = MAX_ROWS) -> FileDiff | None:
    """The diff of one file, or None when it did not change. `old`/`new` None: absent."""
    if old == new:
        return None
    status = "added" if old is None else "removed" if new is None else "modified"
    diff = FileDiff(path=path, status=status, old_size=len(old or ""), new_size=len(new or ""))
    if diff.old_size + diff.new_size > MAX_DIFF_CHARS:
        diff.too_large = True
        return diff
    a, b = _lines(old), _lines(new)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        header = f"@@ -{first[1] + 1},{last[2] - first[1]} +{first[3] + 1},{last[4] - first[3]} @@"
        diff.unified.append(UnifiedRow("hunk", None, None, header))
        diff.split.append(SplitRow("hunk", None, header, None, header))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for k in range(i2 - i1):
                    diff.unified.append(UnifiedRow("context", i1 + k + 1, j1 + k + 1, a[i1 + k]))
                    diff.split.append(SplitRow("context", i1 + k + 1, a[i1 + k], j1 + k + 1, b[j1 + k]))
                continue
            removed, added = range(i1, i2), range(j1, j2)
            diff.removed += len(removed)
            diff.added += len(added)
            diff.unified.extend(UnifiedRow("removed", i + 1, None, a[i]) for i in removed)
            diff.unified.extend(UnifiedRow("added", None, j + 1, b[j]) for j in added)
            # side by side: pair the replaced lines, then the rest of the longer side alone
            for k in range(max(len(removed), len(added))):
                left = i1 + k if k < len(removed) else None
                right = j1 + k if k < len(added) else None
                kind = "changed" if left is not None and right is not None else "removed" if right is None else "added"
                diff.split.append(SplitRow(kind, None if left is None else left + 1, None if left is None else a[left],
                                           None if right is None else right + 1, None if right is None else b[right]))
    if len(diff.unified) > max_rows or len(diff.split) > max_rows:
        diff.truncated = True
        diff.unified, diff.split = diff.unified[:max_rows], diff.split[:max_rows]
    return diff


def files_diff(old: dict[str, str] | None, new: dict[str, str] | None, **kwargs) -> list[FileDiff]:
    """Every file that differs between two path -> text maps, in path order."""
    old, new = old or {}, new or {}
    out = []
    for path in sorted(set(old) | set(new)):
        d = file_diff(path, old.get(path), new.get(path), **kwargs)
        if d is not None:
            out.append(d)
    return out


def unified_text(old: dict[str, str] | None, new: dict[str, str] | None, *, old_label: str = "a",
                 new_label: str = "b") -> str:
    """A plain `diff -u` style patch of two file maps (for download and for tests)."""
    old, new = old or {}, new or {}
    chunks = []
    for path in sorted(set(old) | set(new)):
        if old.get(path) == new.get(path):
            continue
        a = (old.get(path) or "").splitlines(keepends=True)
        b = (new.get(path) or "").splitlines(keepends=True)
        chunks.extend(difflib.unified_diff(
            a, b, fromfile=f"{old_label}/{path}" if path in old else "/dev/null",
            tofile=f"{new_label}/{path}" if path in new else "/dev/null", n=CONTEXT_LINES))
    return "".join(line if line.endswith("\n") else line + "\n" for line in chunks)
