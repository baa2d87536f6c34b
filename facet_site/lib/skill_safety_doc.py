"""One file of a skill as the safety scan reads it, Django-free: its text, a normalised copy to match
on (shell line continuations joined; in programs, words cut by empty quotes read whole and escaped
quotes read as quotes; every line start kept), its line
index, whether it is a program, data or Markdown, and, built on first use, its fences and headings.

`skill_safety` matches the rules on it; `skill_safety_examples` asks it where a match stands
(in a fence, under which headings) to tell a documented example from an order.
"""
from __future__ import annotations

import bisect
import re
from pathlib import PurePosixPath

from facet_site.lib.skill_safety_rules import RuleSet

_SHEBANG = re.compile(r"\A#!\s*\S*(?:sh|python\d?|node|perl|ruby|env\s+\w+)\b")


# Shell and Python join quoted pieces written side by side: `.s""sh` is `.ssh`. Only a pair between
# two characters of a path or a word counts (`print("")`'s pair has a parenthesis on either side).
_SPLICE = re.compile(r"""(?<=[\w./$-])(?:""|''|"'|'")(?=[\w./-])""")
_ESCAPED_QUOTE = re.compile(r'\\"')


def _moved_to_line_end(text: str, pattern: re.Pattern, repl: str, filler: str = "") -> str:
    """`text` with each match of `pattern` (within a line) replaced by `repl`, and what that took out put
    back at the end of the match's line: the matched text itself, or `filler` for each character taken.
    Every line keeps its length, so every line start and every offset before the first match stays."""
    if not pattern.search(text):
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if pattern.search(line):
            new = pattern.sub(repl, line)
            lines[i] = new + (filler * (len(line) - len(new)) if filler else "".join(pattern.findall(line)))
    return "\n".join(lines)


def _unspliced(text: str) -> str:
    """`text` with each empty pair of quotes inside a word moved to the end of its line: the words read whole."""
    return _moved_to_line_end(text, _SPLICE, "")


def _unescaped_quotes(text: str) -> str:
    """`text` with each backslash before a double quote moved to the end of its line as a space: the quotes
    read as the program's string holds them."""
    return _moved_to_line_end(text, _ESCAPED_QUOTE, '"', filler=" ")


class ScannedFile:
    """One file's text with its line index and, for Markdown, its fences and headings."""

    def __init__(self, path: str, text: str, rs: RuleSet, *, first_line: int = 1, head: str | None = None):
        """`first_line`: the file's line number where `text` starts (the last part of a file too
        large to read whole, whose `head` then says what kind of file it is)."""
        self.path = path
        self.text = text
        self.first_line = first_line
        # A shell line continuation becomes two spaces: offsets stay, the command reads as one line.
        self.norm = text.replace("\\\r\n", "   ").replace("\\\n", "  ") if "\\\n" in text or "\\\r\n" in text else text
        p = PurePosixPath(path.lower())
        ext = p.suffix.lstrip(".")
        self.is_script = ext in rs.script_exts or (not ext and p.name in rs.script_exts) or bool(
            _SHEBANG.match(text if head is None else head))
        if self.is_script and ('""' in self.norm or "''" in self.norm or "\"'" in self.norm or "'\"" in self.norm):
            # a word cut by an empty pair of quotes reads whole (`"$HOME/.s""sh"`, `authorized""_keys`)
            self.norm = _unspliced(self.norm)
        if self.is_script and '\\"' in self.norm:
            # a command quoted inside a program's string reads as written: `"sh -c \"$(curl …)\""` is
            # `sh -c "$(curl …)"` (red-team set 11's fetcher)
            self.norm = _unescaped_quotes(self.norm)
        self.low = self.norm.lower()
        self.ascii = self.norm.isascii()
        self.starts = line_starts(text)
        self.norm_starts = self.starts if self.norm is text else line_starts(self.norm)
        self.in_test_dir = any(part in rs.test_dirs for part in p.parts[:-1]) or p.name.startswith("test_")
        self.is_data = ext in rs.data_exts and not self.is_script
        self.is_markdown = ext in ("md", "markdown", "mdx") or (not ext and not self.is_script)
        self._fences: list[tuple[int, int, str]] | None = None  # (open line, close line, language), 0-based
        self._headings: list[tuple[int, int, str]] = []  # (line, level, text)

    @property
    def fences(self) -> list[tuple[int, int, str]]:
        # Built on first use: only files with a finding need their Markdown structure.
        if self._fences is None:
            self._fences = []
            if self.is_markdown:
                self._structure()
        return self._fences

    @property
    def headings(self) -> list[tuple[int, int, str]]:
        return self._headings if self.fences is not None else []

    def _structure(self) -> None:
        lines = self.text.split("\n")
        fence_open, marker, lang = -1, "", ""
        for i, line in enumerate(lines):
            s = line.strip()
            if not s or s[0] not in "`~#":
                continue
            if fence_open < 0:
                m = re.match(r"(`{3,}|~{3,})\s*([\w+#.-]*)", s)
                if m:
                    fence_open, marker, lang = i, m.group(1), m.group(2).lower()
                elif s.startswith("#"):
                    m = re.match(r"(#{1,6})\s+(.*)", s)
                    if m:
                        self._headings.append((i, len(m.group(1)), m.group(2)))
            elif s.startswith(marker) and s.strip(marker[0]) == "":
                self._fences.append((fence_open, i, lang))
                fence_open = -1
        if fence_open >= 0:
            self._fences.append((fence_open, len(lines), lang))

    def line_of(self, pos: int) -> int:
        return bisect.bisect_right(self.starts, pos) - 1  # 0-based

    def line_text(self, idx: int) -> str:
        # from the normalised text, whose offsets are the text's: a match's position in it is the same
        # on this line (a word cut by empty quotes is read whole here as where it was matched)
        end = self.starts[idx + 1] - 1 if idx + 1 < len(self.starts) else len(self.text)
        return self.norm[self.starts[idx]:end]

    def fence_at(self, idx: int) -> tuple[int, int, str] | None:
        for f in self.fences:
            if f[0] < idx < f[1]:
                return f
            if f[0] > idx:
                break
        return None

    def fence_has_commands(self, fence: tuple[int, int, str], command_line: re.Pattern) -> bool:
        a = self.starts[fence[0] + 1] if fence[0] + 1 < len(self.starts) else len(self.text)
        b = self.starts[fence[1]] if fence[1] < len(self.starts) else len(self.text)
        return bool(command_line.search(self.text, a, b))

    def headings_above(self, idx: int, *, without_title: bool = False) -> list[str]:
        """The heading chain that governs line idx (nearest first, each level once); `without_title`
        leaves out the document's title (its first heading, at level 1) under a section of its own:
        "# Skill Pre-install Review" names the skill, not a setup section of every line."""
        chain, level = [], 7
        for line, lvl, text in reversed(self.headings):
            if line < idx and lvl < level:
                if without_title and lvl == 1 and chain and (line, lvl, text) == self.headings[0]:
                    break
                chain.append(text)
                level = lvl
        return chain


def line_starts(text: str) -> list[int]:
    starts = [0]
    find = text.find
    i = find("\n")
    while i >= 0:
        starts.append(i + 1)
        i = find("\n", i + 1)
    return starts
