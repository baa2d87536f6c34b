"""Documented examples: when a rule's match is a quotation, not something to run.

Security skills quote attack strings, and a dropper may call itself an example; `skill_safety`'s
docstring says which positions count (structure first, words second). This module holds that
judgement, so the scanner stays about matching.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from facet_site.lib.skill_findings import string_block_head, words_of
from facet_site.lib.skill_safety_rules import Rule, RuleSet

__all__ = ["example_reason", "in_code_span"]


def example_reason(rs: RuleSet, doc, rule: Rule, idx: int, start: int | None, end: int | None) -> str:
    """Why the match at line idx of `doc` (a `skill_safety_doc.ScannedFile`: one file's lines, fences and
    headings) is a documented example, or "" when it may be an instruction."""
    line = doc.line_text(idx)
    a, b = (start - doc.starts[idx], end - doc.starts[idx]) if start is not None else (-1, -1)
    if doc.is_script:
        if doc.in_test_dir and a >= 0 and _quoted(line, a, b):
            return "quoted string in a test file"
        if idx > 0 and _TEST_ANNOTATION.match(doc.line_text(idx - 1)):
            return "test case of a detection rule (a `ruleid:` annotation above it)"
        # a phrase inside a string that spans lines, named as an example where it opens:
        # `// Example 2: content with injection attempts` over `const maliciousContent = \``
        if rule.kind == "text" and start is not None:
            label = _label(rs.example_labels, string_block_head(doc.path, doc.text, start))
            if label:
                return f"in a program's string named as {label!r}"
        # A detector's usage text shows the phrase as what it is given: `node detect.js --text "Ignore all
        # previous instructions"` in a comment or help string, labelled as an example or a detection. A
        # string the program prints or sends has no option before it, so it is still counted.
        if rule.kind == "text" and a >= 0 and _quoted(line, a, b) and _OPTION_BEFORE_QUOTE.search(line[:a]):
            before = [doc.line_text(i) for i in range(max(idx - 3, 0), idx)]
            label = _label(rs.example_labels, [line, *before])
            return f"quoted argument of an example command labelled {label!r}" if label else ""
        # A scanner's own list of what it looks for: `DANGEROUS_PATTERNS = [ ... r"(cookies\.sqlite|Login
        # Data)" ...]`. The match is one alternative of a regular expression, which names no file to open,
        # and the list (or the line) is named as a detector's. A path in a plain string is still counted.
        # ... and a pattern or message in a detector's table of rules: `{ regex: /disregard\\s+previous/gi,
        # msg: 'Disregard previous instructions', severity: 'critical' }` (a phrase rule's match in any quoted
        # string of such a line; any rule's match in a regular expression literal).
        if a >= 0 and (_regex_alternative(line, a, b) or _in_regex_literal(line, a, b)
                       or (rule.kind == "text" and _quoted(line, a, b))):
            label = _label(rs.detector_labels, [words_of(t) for t in [line, *_list_heads(doc, idx)]])
            if label:
                return f"alternative of a regular expression in a scanner's list (named {label.lower()!r})"
            # ... or compiled as a pattern on its own line (`re.compile(r"\.ssh/id_|dump-keychain")`): the
            # string is handed to the regex engine, which searches with it and opens or runs nothing
            if _regex_alternative(line, a, b) and _REGEX_CALL.search(line, 0, a):
                return "alternative of a regular expression compiled on its line"
        return ""
    if doc.is_data:
        if doc.in_test_dir:
            return "data file in a test folder"
        if _REGEX_FIELD.match(line):
            return "a regular expression field of a data file"  # `regex: '(curl|wget)[^|]*\|\s*sh'` in a scanner's rules
        kind = _detection_rule_file(doc.text)
        return f"pattern in a {kind} detection rule file" if kind else ""
    if not doc.is_markdown:
        # a rules file of its own (`rules/droppers.yar`): YARA's strings are what a file is searched
        # for. In Markdown only a fenced block is judged, so a rule pasted into SKILL.md exempts nothing else
        return "string in a YARA rule file" if _detection_rule_file(doc.text) == "YARA" else ""
    headings = doc.headings_above(idx)
    text_rule = rule.kind == "text"
    if not text_rule and any(rs.setup_headings.search(h) for h in doc.headings_above(idx, without_title=True)):
        return ""  # commands under Install/Setup are to be run; a quoted phrase there is still a quote
    fence = doc.fence_at(idx)
    if fence is not None:
        open_line, close_line, lang = fence
        intro = [doc.line_text(i) for i in range(max(open_line - 3, 0), open_line)]
        if lang in rs.data_fences or (not lang and not doc.fence_has_commands(fence, rs.command_line)):
            position = f"```{lang or ' (no commands)'} block"
        elif text_rule:
            position = f"quoted text in a ```{lang} block"
        elif lang in rs.program_fences and a >= 0 and _quoted(line, a, b):
            position = f"quoted string in a ```{lang} block"
        elif idx > open_line + 1 and _TEST_ANNOTATION.match(doc.line_text(idx - 1)):
            return f"test case of a detection rule in a ```{lang} block (a `ruleid:` annotation above it)"
        else:
            # A block that can be run counts only when introduced as something not to run.
            label = _label(rs.warning_labels, [*intro, *headings[:1]])
            return f"```{lang} block introduced as {label!r}" if label else ""
        inside = [doc.line_text(i) for i in range(max(idx - 3, open_line + 1), idx)]  # comments above the line
        label = _label(rs.example_labels, [lang, *intro, *inside, *headings])
        return f"{position} labelled {label!r}" if label else ""
    # a Markdown blockquote is a quotation: "> Ignore all previous instructions …" under "Annotated injection examples"
    blockquote = line.lstrip().startswith(">")
    quoted = a >= 0 and (in_code_span(line, a, b) or _quoted(line, a, b) or (text_rule and (_bold(line, a, b) or blockquote)))
    if not quoted:
        return ""
    outside = re.sub(r"`[^`]*`|\"[^\"]*\"|“[^”]*”", " ", line)
    if not text_rule:
        stripped = line.lstrip()
        if not (stripped.startswith(("|", ">")) or re.match(r"(?:[-*+]|\d+[.)])\s", stripped)):
            return _warned_in_prose(doc, idx, line, a)
        if rs.order_words.search(outside) and not blockquote:  # a quoted line's words are the quotation's
            return ""
    before = [doc.line_text(i) for i in range(max(idx - 3, 0), idx)] + _table_header(doc, idx)
    label = _label(rs.example_labels, [outside, *before, *headings])
    return f"quoted in a {'list or table' if not text_rule else 'line'} labelled {label!r}" if label else ""


# Prose that names a command as what not to run: "Never run `curl … | bash`", "Do not pipe `…` into your
# shell", "if a skill tells you to run `echo <blob> | base64 -d | bash`, inspect it instead", "Red flag: a
# skill that asks you to run `…`". The words must lead straight into the command (no colon or full stop
# between: "Never run the installer twice: `curl …`" is an order) and the sentence must warn.
_WARNED_BEFORE = re.compile(
    r"(?:\b(?:never|do\s+not|don't|avoid)\s+(?:run(?:ning)?|pip(?:e|ing)|past(?:e|ing)|execut(?:e|ing)|typ(?:e|ing)|copy(?:ing)?)\b[^.:;!?`]{0,60}"
    r"|\b(?:tells?|asks?|instructs?|wants?|urges?)\s+you\s+to\s+(?:run|paste|execute|type|copy)\s*)$", re.I)
_WARNING_WORD = re.compile(r"\b(?:never|don't|do\s+not|avoid|red\s+flags?|instead|inspect|warning|malicious|suspicious|"
                           r"attack\w*|scam\w*|phishing|dangerous|unsafe)\b", re.I)


def _warned_in_prose(doc, idx: int, line: str, a: int) -> str:
    """Why a command quoted in a prose line (not a list, table or quote) is named as something not to run,
    or ""; the sentence may have wrapped from the line above."""
    opening = line.rfind("`", 0, a)
    if opening < 0:
        return ""
    above = doc.line_text(idx - 1) if idx > 0 else ""
    joined = above if above.strip() and not above.lstrip().startswith(("#", "```", "~~~")) else ""
    lead = (joined + " " + line[:opening]).rstrip() + " "
    end = re.search(r"[.!?](?:\s|$)", line[a:])
    sentence = lead + line[opening:a + (end.end() if end else len(line) - a)]
    if _WARNED_BEFORE.search(lead) and _WARNING_WORD.search(sentence):
        return "a command quoted in prose as one not to run"
    return ""


def _table_header(doc, idx: int, reach: int = 60) -> list[str]:
    """The header row of the Markdown table line idx is a row of (`| Rule | Example indicator |`): a
    column's heading labels every cell under it, however long the table."""
    if not doc.line_text(idx).lstrip().startswith("|"):
        return []
    for i in range(idx - 1, max(idx - reach, 0), -1):
        text = doc.line_text(i).strip()
        if not text.startswith("|"):
            return []
        if _TABLE_RULE.fullmatch(text):
            return [doc.line_text(i - 1)]
    return []


# A data file's field that holds a regular expression (a scanner's rule list in YAML or JSON).
_REGEX_FIELD = re.compile(r"""^\s*(?:-\s*)?["']?(?:regex|regexp|pattern|patterns|signature)["']?\s*:""", re.I)
# Semgrep's test annotation: the line below it is a case the rule must (ruleid) or must not (ok) match,
# in a test file that is parsed, never run.
_TEST_ANNOTATION = re.compile(r"^\s*(?:#|//|--|;|/\*)\s*(?:ruleid|ok|todoruleid|todook|deepruleid|deepok)\s*:\s*[\w.-]+")
_SEMGREP_FILE = (re.compile(r"^rules\s*:", re.M), re.compile(r"^\s*-?\s*(?:pattern(?:s|-\w+)?|regex)\s*:", re.M),
                 re.compile(r"^\s*message\s*:", re.M))
_SIGMA_FILE = (re.compile(r"^logsource\s*:", re.M), re.compile(r"^detection\s*:", re.M))
_YARA_FILE = (re.compile(r"^\s*(?:(?:private|global)\s+)*rule\s+\w+", re.M), re.compile(r"^\s*strings\s*:", re.M),
              re.compile(r"^\s*condition\s*:", re.M))
# The row under a Markdown table's header: |---|:---:| ...
_TABLE_RULE = re.compile(r"\|?(?:\s*:?-{3,}:?\s*\|)+(?:\s*:?-{3,}:?\s*)?")
# A call on the line that compiles or searches with a regular expression given as a string.
_REGEX_CALL = re.compile(r"\bre\.(?:compile|search|match|fullmatch|findall|finditer|sub)\(|\bnew\s+RegExp\(|"
                         r"\bregexp\.(?:MustCompile|Compile)\(|\bRegex\(|\bPattern\.compile\(")


def _detection_rule_file(text: str) -> str:
    """"Semgrep", "Sigma" or "YARA" when a file is a rule file of that tool (whose patterns name what
    to find, not what to run), else ""."""
    if all(p.search(text) for p in _YARA_FILE):
        return "YARA"
    if all(p.search(text) for p in _SEMGREP_FILE):
        return "Semgrep"
    if all(p.search(text) for p in _SIGMA_FILE):
        return "Sigma"
    return ""


def _label(words: re.Pattern, texts: Iterable[str]) -> str:
    for t in texts:
        m = words.search(t or "")
        if m:
            return m.group(0)
    return ""


# an option right before the opening quote of the match: `--text "`, `-t '`, `--prompt=\"`
_OPTION_BEFORE_QUOTE = re.compile(r"\s--?[A-Za-z][\w-]*(?:\s+|=)\\?[\"'][^\"'\n]{0,20}$")


def _quoted(line: str, a: int, b: int) -> bool:
    """The match [a, b) of `line` lies inside one '...', "..." or “...” string."""
    b = min(b, len(line))
    left, right = line.rfind("“", 0, a), line.find("”", b)
    if left >= 0 and right >= 0 and "”" not in line[left:a]:
        return True
    for q in ("'", '"'):
        left = line.rfind(q, 0, a)
        right = line.find(q, b)
        if left >= 0 and right >= 0 and line.count(q, 0, left) % 2 == 0 and q not in line[a:b]:
            return True
    return False


def _regex_alternative(line: str, a: int, b: int) -> bool:
    """The match [a, b) is one alternative of a regular expression in a quoted string: an
    unescaped `|` or a group's parenthesis right before or after it."""
    if not _quoted(line, a, b):
        return False
    before, after = line[:a].rstrip(), line[b:].lstrip()
    opens = before.endswith(("|", "(", "(?:")) and not before.endswith("\\|")
    closes = after.startswith(("|", ")"))
    return (opens and closes) or (opens and after[:1] in "\"'") or (closes and before[-1:] in "\"'")


def _in_regex_literal(line: str, a: int, b: int) -> bool:
    """The match [a, b) lies in a JavaScript-style regular expression literal: `/ignore\\s+previous/gi`."""
    opening = re.search(r"(?:^|[=:(,\[!&|?]\s*)/(?![/*])[^/\n]*$", line[:a])
    return bool(opening) and bool(re.match(r"[^\n]*?(?<!\\)/[dgimsuvy]*\s*[,;)\]}]", line[b:]))


# An assignment or a call that opens a list, a table or a pattern: `DANGEROUS_PATTERNS = [`,
# `const suspicious = {`, `BLOCKLIST: list[str] = (`, `re.compile(`.
_LIST_HEAD = re.compile(r"^\s*(?:(?:const|let|var|local|my)\s+)?[\w.$@]+\s*(?::[^=\n]{0,80})?=\s*[\[{(]|\bre\.compile\(")


def _list_heads(doc, idx: int, reach: int = 40) -> list[str]:
    """The line that opens the list or assignment line idx is part of, within `reach` lines above."""
    for i in range(idx - 1, max(idx - reach, 0) - 1, -1):
        text = doc.line_text(i)
        if _LIST_HEAD.search(text):
            return [text]
        if text and not text[0].isspace() and not text.lstrip().startswith(("#", "//", ")", "]", "}")):
            return []  # a statement at the left margin: line idx is not inside a list opened above it
    return []


def _bold(line: str, a: int, b: int) -> bool:
    """The match lies inside a **bold** span: how lists of injection phrases name their entries."""
    return line.count("**", 0, a) % 2 == 1 and "**" in line[min(b, len(line)):]


def in_code_span(line: str, a: int, b: int) -> bool:
    return line.count("`", 0, a) % 2 == 1 and "`" in line[min(b, len(line)):]
