"""What the skill filters report and the text they read, Django-free.

`Finding` and the verdict kinds; `SkillDoc`, one text (SKILL.md's frontmatter or body, or a
supporting script) with lazily computed line offsets, headings and fences; and `cautioned()`, the
test that keeps a pattern from counting when it reads as a warning or a description of threats
rather than an instruction: its line, the two lines before it (fence lines skipped, so the prose
that introduces a code block counts) or its section headings contain words such as never, don't,
avoid, warning, dangerous, detect, scan, pattern, block, injection, protect, attack, or the line
greps for it, or the match is quoted. Shared by `skill_filters` (unsafe, non-actionable) and
`skill_private` (secrets, private hosts, accounts).
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from facet_site.lib.skill_safety_rules import load_rules
from facet_site.lib.skillformat import ParsedSkill

UNREADABLE = "unreadable"
UNSAFE = "unsafe"
PRIVATE = "private"
NON_ACTIONABLE = "non_actionable"
KINDS = (UNREADABLE, UNSAFE, PRIVATE, NON_ACTIONABLE)


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    reason: str  # short, stable, human readable: what rule fired
    evidence: str  # the matched text, at most ~120 characters
    line: int = 0  # 1-based line in `path`; 0 when not tied to a line
    path: str = "SKILL.md"  # SKILL.md (as named in the skill) or a supporting file's relative path


EVIDENCE_CHARS = 120

_CAUTION = re.compile(
    r"\b(?:never|don'?t|do\s+not|does\s+not|must\s+not|should\s+not|shouldn'?t|cannot|won'?t|avoid(?:s|ed)?|warn(?:ing|s)?"
    r"|danger(?:ous)?|careful|caution|beware|prohibit(?:s|ed)?|forbid(?:s|den)?|block(?:s|ed|list|ing)?|deny|denied"
    r"|reject(?:s|ed)?|refuse[sd]?|detect(?:s|ed|ion|ions|or|ing)?|scan(?:s|ner|ning)?|flag(?:s|ged)?|patterns?"
    r"|signatures?|red\s+flags?|injections?|protect(?:s|ion|ing)?|prevent(?:s|ion|ing)?|defen[cs]e|defends?|guard(?:s|ing)?"
    r"|unsafe|risky|threats?|audit(?:s|ing)?|vet(?:s|ting)?|malicious|suspicious|attacks?|attackers?|attempt(?:s|ed)?|probes?"
    r"|red\s?-?team\w*|mitigat\w+|vulnerab\w+|security|not\s+recommended)\b"
    r"|⚠|❌|🚫|⛔",
    re.I,
)
# Names of a string that is shown, not used: a demo's sample input.
_GREPPING = re.compile(r"\b(?:grep|egrep|rg|ripgrep|re\.compile|re\.search|regex|RegExp|semgrep|yara)\b")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$", re.M)
_FENCE = re.compile(r"^\s{0,3}(?:```|~~~)", re.M)


class SkillDoc:
    """One text with lazily computed line offsets, headings and fences."""

    __slots__ = ("path", "text", "first_line", "markdown", "_low", "_nl", "_headings")

    def __init__(self, path: str, text: str, first_line: int, *, markdown: bool):
        self.path = path
        self.text = text or ""
        self.first_line = first_line or 1
        self.markdown = markdown
        self._low = None
        self._nl = None
        self._headings = None

    @property
    def low(self) -> str:
        if self._low is None:
            self._low = self.text.lower()
        return self._low

    def line_index(self, pos: int) -> int:
        """0-based line index of `pos` within the text."""
        if self._nl is None:
            self._nl = newlines(self.text)
        return bisect.bisect_right(self._nl, pos - 1) if pos else 0

    def line_no(self, pos: int) -> int:
        return self.first_line + self.line_index(pos)

    def line_at(self, pos: int) -> tuple[int, int]:
        start = self.text.rfind("\n", 0, pos) + 1
        end = self.text.find("\n", pos)
        return start, (len(self.text) if end < 0 else end)

    def previous_line(self, line_start: int) -> tuple[int, str]:
        """(start, text) of the nearest non-blank line before the line at `line_start`; (-1, "")."""
        end = line_start - 1
        while end > 0:
            start = self.text.rfind("\n", 0, end) + 1
            line = self.text[start:end]
            if line.strip():
                return start, line
            end = start - 1
        return -1, ""

    def headings_above(self, pos: int) -> list[str]:
        """The section heading of `pos` and its parents ("## Attacks" > "### Credential theft")."""
        if not self.markdown:
            return []
        if self._headings is None:
            fences = [m.start() for m in _FENCE.finditer(self.text)]
            self._headings = [
                (m.start(), len(m.group(1)), m.group(2)) for m in _HEADING.finditer(self.text)
                if bisect.bisect_left(fences, m.start()) % 2 == 0  # not inside a fenced block
            ]
        i = bisect.bisect_right(self._headings, (pos, 99, "")) - 1
        chain: list[str] = []
        level = 7
        while i >= 0 and level > 1:
            _, h_level, text = self._headings[i]
            if h_level < level:
                chain.append(text)
                level = h_level
            i -= 1
        return chain


def newlines(text: str) -> list[int]:
    out = []
    i = text.find("\n")
    while i >= 0:
        out.append(i)
        i = text.find("\n", i + 1)
    return out


def cautioned(doc: SkillDoc, start: int, end: int) -> bool:
    """True when the match reads as a warning or a description of a threat, not an instruction."""
    line_start, line_end = doc.line_at(start)
    line = doc.text[line_start:line_end]
    if caution(line) or _GREPPING.search(line):
        return True
    if not doc.markdown and any(caution(t) or load_rules().example_labels.search(t)
                                for t in string_block_head(doc.path, doc.text, start)):
        # A program's string named as an attack or an example (`const maliciousContent = \``), by the same
        # example labels the safety scan reads (safety_rules/00-context.toml, [context]).
        return True
    if start > line_start and doc.text[start - 1] in "\"'“‘":
        return True  # quoted, as in a list of signatures or an incident report
    # The two lines before (a fence line does not count: prose introduces the block above it).
    pos, seen = line_start, 0
    while seen < 2:
        prev_start, prev = doc.previous_line(pos)
        if prev_start < 0:
            break
        pos = prev_start
        if _FENCE.match(prev):
            continue
        seen += 1
        if caution(prev):
            return True
    return any(caution(h) for h in doc.headings_above(start))


_PATHLIKE = re.compile(r"\S*(?:/|\w\.\w)\S*")


def caution(text: str) -> bool:
    if not text:
        return False
    # Host names and paths are not wording ("attacker.example", "scan.py"); snake_case names
    # such as prompt_injection are.
    return bool(_CAUTION.search(_PATHLIKE.sub(" ", text).replace("_", " ")))


def skill_md_docs(skill: ParsedSkill) -> list[SkillDoc]:
    md_path = skill.skill_md_path.rsplit("/", 1)[-1] if skill.skill_md_path else "SKILL.md"
    return [SkillDoc(md_path, skill.frontmatter_text, skill.frontmatter_start_line, markdown=False),
            SkillDoc(md_path, skill.body, skill.body_start_line, markdown=True)]


def program_docs(skill: ParsedSkill) -> list[SkillDoc]:
    """The programs a skill ships (`is_program`), one SkillDoc each, read as code from line 1."""
    return [SkillDoc(f.path, f.text, 1, markdown=False) for f in skill.files if f.text and is_program(f.path, f.text)]


_TEMPLATE_QUOTE = re.compile(r"(?<!\\)`")
_TRIPLE_QUOTE = re.compile(r'"""|\'\'\'')
_COMMENT_LINE = re.compile(r"^\s*(?://|#|/\*|\*)")


def own_names(skill: ParsedSkill, *, binaries: bool = False) -> frozenset[str]:
    """The names that are the skill's own, lower-cased: its name and slug, and with `binaries` the
    commands it declares. Installing or running one of them is the skill using itself (the filters'
    install-only blocks, the private verdicts' accounts made by the skill's own command)."""
    names = [skill.name or "", skill.slug or ""]
    if binaries:
        names += [*skill.required_bins, *skill.any_bins]
    return frozenset(n.strip().lower() for n in names if n and n.strip())


def words_of(code: str) -> str:
    """Identifiers read as words: DANGEROUS_PATTERNS and maliciousContent -> dangerous patterns, malicious Content."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", code).replace("_", " ")


def string_block_head(path: str, text: str, pos: int) -> list[str]:
    """When `pos` lies inside a program's string literal that may span lines (a JavaScript template
    literal, a Python triple-quoted string), what names that string: the code before its opening quote
    (`const maliciousContent =`) and the comment lines right above it, as words. [] otherwise.

    A prompt-injection filter's demo holds the attack it is shown, across lines: the quote on the
    match's own line, which a one-line string has, is not there to say it is quoted."""
    ext = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    quote = _TEMPLATE_QUOTE if ext in ("js", "mjs", "cjs", "jsx", "ts", "tsx") else _TRIPLE_QUOTE if ext == "py" else None
    if quote is None:
        return []
    opens = [m.start() for m in quote.finditer(text, 0, pos)]
    if len(opens) % 2 == 0:
        return []
    line_start = text.rfind("\n", 0, opens[-1]) + 1
    head = [words_of(text[line_start:opens[-1]])]
    end = line_start - 1
    while len(head) < 3 and end > 0:
        start = text.rfind("\n", 0, end) + 1
        if not _COMMENT_LINE.match(text[start:end]):
            break
        head.append(words_of(text[start:end]))
        end = start - 1
    return head


def line_of(doc: SkillDoc, pos: int) -> str:
    start, end = doc.line_at(pos)
    return doc.text[start:end].strip()


def clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


# The extensions of the programs a skill ships (the filters' unsafe rules and the private verdicts
# read these files; the safety scan has its own list in safety_rules/00-context.toml).
SCRIPT_EXTS = frozenset({"sh", "bash", "zsh", "py", "js", "mjs", "cjs", "ts", "rb", "pl", "php", "ps1", "go", "lua"})


def is_program(path: str, text: str | None) -> bool:
    """A supporting file that is a program: a script extension or a `#!` line."""
    return path.rsplit(".", 1)[-1].lower() in SCRIPT_EXTS or (text or "").startswith("#!")
