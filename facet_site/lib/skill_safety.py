"""Safety scanning of every text file of a skill, with decoded evidence, Django-free.

`scan_skill(files)` takes {relative path: text} for every text file of a skill (SKILL.md
included) and returns a `SafetyReport`: a level (clean, suspicious, unsafe) and the findings that
decided it, each naming the rule, the file, the 1-based line and the matched text. The rules live
in data, the `safety_rules/*.toml` files beside this module (parsed by `skill_safety_rules`): ids, levels,
descriptions, regular expressions with their context conditions, the vendor allow-list of
official installer hosts, and for every rule a malicious example and a legitimate look-alike
(the tests run them all).

How a rule decides (all conditions are fields of the rule in the data file):
* `patterns`: any of them matching fires the rule. `needles` (lowercase literals) pick the lines
  the patterns run on, which keeps the 693-skill sample corpus to about 6 seconds.
* `near` + `near_lines`: one of these must also match within that many lines of the match (a
  credential read only counts with a network send close by); `near_also`: groups of patterns of
  which one each must match there too (a user name read, with a host name read and a send).
* `unless`: the rule stays quiet when the match's line(s) match one of these; `unless_near`: nor
  when one of these is within `near_lines` (a key path read for `key_filename=` a few lines on).
* `url_levels`: the pattern's `url` group is classified as `local`, `raw_ip`, `plain_http`,
  `allowlisted` (https from a vendor host in `[allowlist]`), `throwaway` (a host in `[hosts]`:
  shorteners, tunnels, paste and file drops) or `unlisted`; the rule fires only for
  the classes it names, at the level it gives each. So `curl https://get.docker.com | sh` stays
  clean, the same command from a raw IP or over plain http is unsafe, from another host suspicious.
* `outside_fences`: hidden-text rules (HTML comments) ignore what a fenced block shows openly.
* `vendor_exempt`: a match whose line(s) link somewhere, and only to vendor installer hosts of the
  `[allowlist]`, is not counted ("download and run `rustup-init.exe` from https://rustup.rs").
* `scripts_only`: the rule runs on program files only (a script extension or a #! line), where a
  whole-file `near` window means one program does both things, not two examples of a document.
  `paths`: the rule runs only on files whose name matches one of these globs (`requirements*.txt`).
* `decoded_only`: the rule runs on decoded text only (see below), never on the file as written: an
  address on a raw IP is common in plain sight and rare hidden in base64, hex or joined pieces.
* `{{name}}` in any pattern stands for the file's `[shared]` pattern of that name (one list that
  two rules need, written once).
* `packages`: the pattern's `npm` or `pypi` group lists package names (an install command's words,
  a manifest's dependencies); the rule fires only for a name one slip from a popular package of
  that registry (`package_names`), and the finding's excerpt starts by saying which.

Encoded payloads (`skill_safety_decode`): base64 runs, `\\xNN` and hex strings, %-encoded runs
and Unicode tag characters are decoded (nested up to `MAX_DECODE_DEPTH`) and the decoded text is
scanned with every rule again. Such findings carry the decoding chain and the decoded text and
stand on the line of the encoded text. An unsafe finding in decoded text stays unsafe only when
its line runs something (`| sh`, eval, exec ...: `[context] executes`); an encoded payload that
nothing runs is suspicious, for a reviewer to look at.

Documented examples. Security skills quote attack strings; a dropper may also *claim* to be an
example. A match counts as a documented example (kept in `SafetyReport.examples`, not in the
level) only when its position says it is not to be run, judged from structure first and words
second:
* a fenced block whose language is data or text (```text, ```json ...), or that has no language
  and no line that reads as a shell command, or a quoted string in a ```python (etc.) block, or an
  inline code span or quoted string in a list item or table row whose prose gives no order (run,
  install, paste, download ...) -- each labelled nearby as example, fixture, detection, pattern,
  malicious, attack ...; or a quoted string or data file under a tests/fixtures folder;
* a block that can be run (```bash, or commands in a block without a language) only when the
  lines just above it or its heading call it something not to run (malicious, attack, never run,
  a red cross mark ...): a dropper would have to call itself malicious to its own reader;
* never under a setup heading (prerequisites, install, setup, quick start, usage), never in a
  script outside a test folder (but for a phrase rule's match quoted as an option's argument in a
  labelled usage example: `detect.js --text "Ignore all previous instructions"`, and for one
  alternative of a regular expression in a list named as a scanner's, `DANGEROUS_PATTERNS = [...
  r"(cookies\\.sqlite|Login Data)"`), never in plain prose, and never for hidden text
  (`exemptible = false`: Unicode tags, HTML comments).
So "this is a detection example" written above a ```bash block or a bare command does nothing.
Phrase rules (`kind = "text"`: prompt-injection wording, zero-width characters) accept a quoted,
bold or fenced phrase anywhere it is labelled, because quoting a phrase is how defences list it.

Files that are not text (`[[file_rule]]`s, on `skillformat.content.FileContent`): a compiled
program, an archive holding one, a password-protected archive (unsafe when it holds something
named like a program), a 7z or RAR archive nothing here can open, a pickle that runs code when
loaded (`skillformat.pickles`; also inside a zip, as a PyTorch checkpoint's `data.pkl`). Scripts that are UTF-16,
not valid UTF-8 or over the stored-text limit, and the text members of zip and tar archives, are
scanned by the text rules like any file (an archive member's path reads `archive.zip!member`).

Scripts over the reading limit: their first and last 1 MB are scanned here as texts, and their
middle by `scan_text_part`, block by block as `skillformat.discover` reads it (skillformat.middle).

Publisher taint (a publisher with an unsafe skill makes their other skills suspicious) is in
`skill_publishers`.
"""
from __future__ import annotations

import bisect
import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from facet_site.lib.package_names import first_near_miss
from facet_site.lib.skill_safety_decode import MAX_DECODE_DEPTH, decode_tree
from facet_site.lib.skill_safety_doc import ScannedFile, line_starts
from facet_site.lib.skill_safety_examples import example_reason, in_code_span
from facet_site.lib.skillformat.content import EXECUTABLE_KINDS, OPAQUE_ARCHIVE_KINDS, FileContent, named_like_program
from facet_site.lib.skill_safety_rules import (
    CLEAN, LEVELS, RULES_PATH, SUSPICIOUS, UNSAFE, FileRule, Rule, RuleFileError, RuleSet, classify_url, load_rules,
    worst_level,
)

__all__ = [
    "CLEAN", "SUSPICIOUS", "UNSAFE", "LEVELS", "RULES_PATH", "MAX_DECODE_DEPTH",
    "Finding", "SafetyReport", "Rule", "RuleSet", "RuleFileError", "load_rules", "classify_url", "scan_skill",
    "scan_parsed_skill", "scan_text_part", "keep_unseen_findings", "worst_level",
]

_EXCERPT_CHARS = 160
_DECODED_CHARS = 300
_MAX_PER_RULE_AND_FILE = 5
_MAX_SCAN_CHARS = 2_000_000  # per file; the tail of a larger text file is not scanned


@dataclass(frozen=True)
class Finding:
    rule_id: str
    level: str  # suspicious or unsafe
    path: str  # the skill file, relative to the skill directory
    line: int  # 1-based line in `path` (for decoded text: the line of the encoded text)
    excerpt: str  # the matched text (capped)
    description: str  # what the rule looks for, from the rule file
    decoded_chain: tuple[str, ...] = ()  # e.g. ("base64",) or ("hex", "base64"), outermost first
    decoded_text: str = ""  # the decoded text the rule fired on (capped)
    example_reason: str = ""  # set on findings recognised as documented examples

    @property
    def message(self) -> str:
        """One line for a reviewer: where, which rule, and what the payload decodes to."""
        where = f"{self.path}:{self.line}"
        if self.decoded_chain:
            return f"{where} [{self.rule_id}] {' then '.join(self.decoded_chain)} on line {self.line} decodes to: {self.decoded_text}"
        return f"{where} [{self.rule_id}] {self.excerpt}"

    def to_dict(self) -> dict:
        return {
            "rule_id": self.rule_id, "level": self.level, "path": self.path, "line": self.line,
            "excerpt": self.excerpt, "description": self.description,
            "decoded_chain": list(self.decoded_chain), "decoded_text": self.decoded_text,
            "example_reason": self.example_reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Finding:
        return cls(**{**data, "decoded_chain": tuple(data.get("decoded_chain", ()))})


@dataclass(frozen=True)
class SafetyReport:
    level: str  # clean, suspicious or unsafe: the worst level among `findings`
    findings: tuple[Finding, ...] = ()  # what decided the level, in file and line order
    examples: tuple[Finding, ...] = ()  # matches recognised as documented examples; not counted
    files_scanned: int = 0

    @property
    def rule_ids(self) -> frozenset[str]:
        return frozenset(f.rule_id for f in self.findings)

    def to_dict(self) -> dict:
        return {
            "level": self.level, "files_scanned": self.files_scanned,
            "findings": [f.to_dict() for f in self.findings], "examples": [f.to_dict() for f in self.examples],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> SafetyReport:
        return cls(
            level=data["level"], files_scanned=data.get("files_scanned", 0),
            findings=tuple(Finding.from_dict(f) for f in data.get("findings", ())),
            examples=tuple(Finding.from_dict(f) for f in data.get("examples", ())),
        )


def scan_skill(files: Mapping[str, str], *, rules: RuleSet | None = None,
               contents: Mapping[str, FileContent] | None = None) -> SafetyReport:
    """Scan every text file of one skill (relative path -> text, SKILL.md included) and, from
    `contents` (path -> `skillformat.content.FileContent` of files that are not stored text), the
    texts read from their bytes and archives and what kind of file each is."""
    rs = rules or load_rules()
    texts = dict(files)
    for content in (contents or {}).values():
        for path, text in content.scan_texts:
            texts.setdefault(path, text)
    active: list[Finding] = []
    examples: list[Finding] = []
    for path in sorted(texts):
        text = texts[path]
        if not isinstance(text, str) or not text:
            continue
        doc = ScannedFile(path, text[:_MAX_SCAN_CHARS], rs)
        for finding in _scan_doc(rs, doc):
            (examples if finding.example_reason else active).append(finding)
    for path in sorted(contents or {}):
        if contents[path].scan_tail is not None:  # the end of a file too large to read whole
            first_line, tail = contents[path].scan_tail
            head = next((t for p, t in contents[path].scan_texts if p == path), "")
            doc = ScannedFile(path, tail[:_MAX_SCAN_CHARS], rs, first_line=first_line, head=head)
            for finding in _scan_doc(rs, doc):
                (examples if finding.example_reason else active).append(finding)
    for path in sorted(contents or {}):
        for finding in contents[path].part_findings:  # the middle of a file too large to keep
            (examples if finding.example_reason else active).append(finding)
        active.extend(_file_findings(rs, path, contents[path], paths=texts.keys() | contents.keys()))
    return SafetyReport(
        level=worst_level(f.level for f in active), findings=tuple(active), examples=tuple(examples),
        files_scanned=len(texts),
    )


def scan_text_part(path: str, text: str, first_line: int, head: str) -> tuple[Finding, ...]:
    """Findings in one part of a text file read in parts (`skillformat.middle`): `text` starts on
    the file's line `first_line`, and `head` is the file's start, which says what kind of file it
    is. Made for `skillformat.discover(scan_text=...)`, with the default rules."""
    rs = load_rules()
    return tuple(_scan_doc(rs, ScannedFile(path, text[:_MAX_SCAN_CHARS], rs, first_line=first_line, head=head)))


def scan_parsed_skill(skill, *, rules: RuleSet | None = None) -> SafetyReport:
    """Scan a `skillformat.ParsedSkill`: SKILL.md rebuilt with its line numbers, plus every text file,
    plus what the bytes of its other files hold."""
    entries = getattr(skill, "files", ())
    files = {f.path: f.text for f in entries if f.text is not None}
    md_name = PurePosixPath(getattr(skill, "skill_md_path", "") or "SKILL.md").name
    files[md_name] = _skill_md_text(skill)
    contents = {f.path: f.content for f in entries if getattr(f, "content", None) is not None}
    return scan_skill(files, rules=rules, contents=contents)


def keep_unseen_findings(report: SafetyReport, previous: Mapping | None, readable: Iterable[str]) -> SafetyReport:
    """`report` from a re-scan of the stored copy of a skill, plus the findings of the `previous`
    report (a stored `to_dict()`) on files the stored copy cannot show: programs, archives and texts
    too large to store are scanned at ingest from their bytes, which are not kept, so a re-scan
    must not clear them. `readable` are the paths the re-scan read."""
    seen = set(readable)
    carried = [Finding.from_dict(f) for f in (previous or {}).get("findings", ())
               if f.get("path") and f["path"].split("!", 1)[0] not in seen]
    if not carried:
        return report
    findings = tuple(sorted((*report.findings, *carried), key=lambda f: (f.path, f.line, f.rule_id)))
    return replace(report, level=worst_level(f.level for f in findings), findings=findings)


_KIND_NAMES = {"elf": "ELF program (Linux)", "pe": "Windows program (PE)", "mach-o": "Mach-O program (macOS)",
               "7z": "7z archive", "rar": "RAR archive", "zip": "zip archive", "zip document": "zip-based document",
               "tar": "tar archive", "pickle": "pickle", "python bytecode": "compiled Python module (.pyc)"}


def _file_findings(rs: RuleSet, path: str, content: FileContent, paths: Iterable[str] = ()) -> list[Finding]:
    """Findings of the file rules on one file's kind and archive members; `paths` are every file of
    the skill (a compiled Python module counts as sourceless when its .py is not among them)."""
    members = content.executable_members
    named_programs = [m for m in content.members if named_like_program(m, scripts=True)]
    holds = {
        "executable": content.kind in EXECUTABLE_KINDS,
        "archive-executable": bool(members) and not content.encrypted,
        "encrypted-archive": content.encrypted and not named_programs,
        "encrypted-executable": content.encrypted and bool(named_programs),
        "opaque-archive": content.kind in OPAQUE_ARCHIVE_KINDS,
        "pickle-code": any(i.dangerous for i in content.pickle_imports),
        "sourceless-bytecode": content.kind == "python bytecode" and _source_of(path) not in set(paths),
    }
    what = _KIND_NAMES.get(content.kind, content.kind or "data")
    out = []
    for rule in rs.file_rules:
        if not holds[rule.when]:
            continue
        if rule.when == "pickle-code":
            out.append(_pickle_finding(rule, path, content))
            continue
        shown = named_programs if rule.when == "encrypted-executable" else members if members else content.members
        listing = f": {', '.join(shown[:5])}" + (f" and {len(shown) - 5} more" if len(shown) > 5 else "") if shown else ""
        prefix = "password-protected " if content.encrypted else ""
        out.append(Finding(rule_id=rule.id, level=rule.level, path=path, line=0,
                           excerpt=_cap(f"{prefix}{what}{listing}", _EXCERPT_CHARS), description=rule.description))
    return out




def _source_of(pyc: str) -> str:
    """The .py a compiled module is made from: pkg/mod.pyc and pkg/__pycache__/mod.cpython-311.pyc
    both come from pkg/mod.py."""
    p = PurePosixPath(pyc)
    if p.parent.name == "__pycache__":
        return str(p.parent.parent / (p.name.split(".", 1)[0] + ".py")).removeprefix("./")
    return str(p.with_suffix(".py"))


def _pickle_finding(rule: FileRule, path: str, content: FileContent) -> Finding:
    dangerous = [i for i in content.pickle_imports if i.dangerous]
    names = ", ".join(dict.fromkeys(i.qualified for i in dangerous))
    inside = sorted({i.where.split("!", 1)[1] for i in dangerous if "!" in i.where})
    where = f" ({', '.join(inside[:3])})" if inside else ""
    carries = f"; it carries: {' | '.join(content.pickle_strings)}" if content.pickle_strings else ""
    return Finding(rule_id=rule.id, level=rule.level, path=path, line=0,
                   excerpt=_cap(f"pickle{where} that calls {names} when loaded{carries}", _EXCERPT_CHARS),
                   description=rule.description)


def _skill_md_text(skill) -> str:
    head = []
    if skill.frontmatter_text or skill.frontmatter_start_line:
        head = ["---", *skill.frontmatter_text.rstrip("\n").split("\n"), "---"]
    # Pad or trim so that body lines keep the numbers SKILL.md gives them.
    want = max(skill.body_start_line - 1, 0)
    head = (head + [""] * want)[:want]
    return "\n".join(head + [skill.body]) if head else skill.body


def _scan_doc(rs: RuleSet, doc: ScannedFile) -> list[Finding]:
    out: list[Finding] = []
    per_rule: dict[str, int] = {}
    seen: set[tuple] = set()
    layers = decode_tree(doc.norm, 1)

    def add(rule: Rule, level: str, line_idx: int, excerpt: str, chain=(), decoded="", start=None, end=None,
            note: str = "") -> None:
        key = (rule.id, line_idx, chain)
        if key in seen or per_rule.get(rule.id, 0) >= _MAX_PER_RULE_AND_FILE:
            return
        seen.add(key)
        if rule.outside_fences and (doc.fence_at(line_idx) is not None or (
                doc.is_markdown and start is not None and in_code_span(doc.line_text(line_idx), start - doc.starts[line_idx],
                                                                      end - doc.starts[line_idx]))):
            return  # shown as code (a fenced block or an inline `span`), so not hidden from a reader
        if chain and level == UNSAFE and not rs.executes.search(doc.line_text(line_idx)):
            level = SUSPICIOUS  # an encoded payload that nothing on its line runs
        reason = example_reason(rs, doc, rule, line_idx, start, end) if rule.exemptible else ""
        if (not reason and chain and doc.in_test_dir and rule.id.startswith("encoded.")
                and _inert_sample(rs, doc, line_idx, layers)):
            reason = "a test sample whose encoded text decodes to nothing that runs, loads or reaches out"
        if not reason:
            per_rule[rule.id] = per_rule.get(rule.id, 0) + 1
        out.append(Finding(
            rule_id=rule.id, level=level, path=doc.path, line=line_idx + doc.first_line,
            excerpt=_cap(f"{note}: {excerpt}" if note else excerpt, _EXCERPT_CHARS),
            description=rule.description, decoded_chain=tuple(chain), decoded_text=_cap(decoded, _DECODED_CHARS),
            example_reason=reason,
        ))

    name = PurePosixPath(doc.path.rsplit("!", 1)[-1]).name
    for rule, level, start, end, note in _matches(rs, doc.norm, doc.low, doc.norm_starts, doc.ascii, doc.is_script, name):
        idx = doc.line_of(start)
        decoded = ""
        chain: tuple[str, ...] = ()
        if rule.id.startswith("encoded."):
            # Show what the executed payload is, even when it fires no rule of its own.
            on_line = [lay for lay in layers if doc.line_of(lay.start) == idx]
            if on_line:
                chain, decoded = on_line[0].chain, on_line[0].text
        # The excerpt runs on to the end of the line: a match that stops at a URL still shows the "| sh".
        # It is cut at what a finding keeps, so a long line with many matches is not copied for each.
        eol = doc.norm.find("\n", start, start + _EXCERPT_CHARS + 1)
        add(rule, level, idx, doc.norm[start:eol if eol >= 0 else start + _EXCERPT_CHARS + 1], chain, decoded, start, end,
            note)
    for layer in layers:
        idx = doc.line_of(layer.start)
        low = layer.text.lower()
        for rule, level, _start, _end, note in _matches(rs, layer.text, low, line_starts(layer.text), layer.text.isascii(),
                                                        doc.is_script, name, decoded=True):
            if rule.kind == "text" and layer.text[_start:_end] in doc.norm:
                continue  # a phrase that stands whole in the file was judged there, example or not (a usage text's pieces)
            add(rule, level, idx, doc.norm[layer.start:layer.end], layer.chain, layer.text, layer.start, layer.end, note)
    out.sort(key=lambda f: (f.line, f.rule_id))
    return out


def _inert_sample(rs: RuleSet, doc: ScannedFile, line_idx: int, layers) -> bool:
    """Every decoded text on the line is short and holds nothing that runs, loads, reaches out or decodes again
    (`console.log('hello')`): a deobfuscator's sample of the shape it undoes, in a tests or samples folder."""
    texts = [lay.text for lay in layers if doc.line_of(lay.start) == line_idx]
    return bool(texts) and all(len(t) <= 200 and not rs.inert_sample_excludes.search(t) for t in texts)


def _matches(rs: RuleSet, text: str, low: str, starts: list[int], ascii_only: bool, is_script: bool, name: str = "",
             decoded: bool = False):
    """(rule, level, start, end, note) for every rule match in `text` whose conditions hold; `is_script`
    says whether `text` is (decoded from) a program file, where `scripts_only` rules run; `name` is
    the file's name, for `paths` rules; `decoded` whether `text` is a decoded layer, where
    `decoded_only` rules run; `note` says what a `packages` rule found."""
    needle_lines: dict[str, list[int]] = {}  # needles shared by rules are looked for once
    for rule in rs.rules:
        if (rule.non_ascii and ascii_only) or (rule.scripts_only and not is_script) or (rule.decoded_only and not decoded):
            continue
        if rule.paths and not any(fnmatch.fnmatch(name.lower(), glob) for glob in rule.paths):
            continue
        spans = _needle_spans(rule, text, low, starts, needle_lines)
        # Matches on one line share their windows: without this, a long one-line file with many
        # matches costs (matches x line length x conditions).
        unless_at: dict[tuple[int, int], bool] = {}
        near_at: dict[tuple[int, int], bool] = {}
        for pattern in rule.patterns:
            for m in (x for a, b in spans for x in pattern.finditer(text, a, b)):
                level = rule.level
                if rule.url_levels:
                    level = rule.url_levels.get(classify_url(m.group("url") or "", rs.allowlist, rs.throwaway))
                    if level is None:
                        continue
                first = bisect.bisect_right(starts, m.start()) - 1
                last = bisect.bisect_right(starts, max(m.end() - 1, m.start())) - 1
                if rule.unless:
                    if (first, last) not in unless_at:
                        unless_at[first, last] = _any_search(rule.unless, _span(text, starts, first, last))
                    if unless_at[first, last]:
                        continue
                if rule.vendor_exempt and _links_only_vendors(rs, _span(text, starts, first, last)):
                    continue
                note = ""
                if rule.packages:
                    eco = "npm" if m.groupdict().get("npm") is not None else "pypi"
                    if (squat := first_near_miss(eco, m.group(eco) or "")) is None:
                        continue
                    note = f"{squat[0]} is one letter from {squat[1]}, a popular {eco} package"
                if rule.near or rule.unless_near:
                    if (first, last) not in near_at:
                        window = _span(text, starts, first - rule.near_lines, last + rule.near_lines)
                        near_at[first, last] = ((not rule.near or _any_search(rule.near, window))
                                                and all(_any_search(group, window) for group in rule.near_also)
                                                and not _any_search(rule.unless_near, window))
                    if not near_at[first, last]:
                        continue
                yield rule, level, m.start(), m.end(), note


def _needle_spans(
    rule: Rule, text: str, low: str, starts: list[int], cache: dict[str, list[int]]
) -> list[tuple[int, int]]:
    """The stretches of `text` a rule's patterns need to see: the runs of lines holding a needle.

    Python's regex engine tries every position of a pattern without a literal prefix, so running
    60 patterns over whole files costs seconds per thousand skills; needle lines cost almost nothing.
    """
    if not rule.needles:
        return [(0, len(text))]
    hits: set[int] = set()
    for needle in rule.needles:
        lines = cache.get(needle)
        if lines is None:
            lines = cache[needle] = []
            i = low.find(needle)
            while i >= 0:
                line = bisect.bisect_right(starts, i) - 1
                lines.append(line)
                i = low.find(needle, starts[line + 1] if line + 1 < len(starts) else len(low))  # next line
        hits.update(lines)
    if not hits:
        return []
    if rule.multiline:
        return [(0, len(text))]
    spans: list[tuple[int, int]] = []
    for line in sorted(hits):
        a = starts[line]
        b = starts[line + 1] if line + 1 < len(starts) else len(text)
        if spans and spans[-1][1] == a:
            spans[-1] = (spans[-1][0], b)
        else:
            spans.append((a, b))
    return spans


_LINK = re.compile(r"https?://[^\s'\"`)<>\]]+")


def _links_only_vendors(rs: RuleSet, lines: str) -> bool:
    """`lines` link somewhere, and only to official installers ("run `rustup-init.exe` from https://rustup.rs")."""
    urls = [u.rstrip(".,;:") for u in _LINK.findall(lines)]
    return bool(urls) and all(classify_url(u, rs.allowlist, rs.throwaway) == "allowlisted" for u in urls)


def _span(text: str, starts: list[int], first: int, last: int) -> str:
    first = max(first, 0)
    end = starts[last + 1] if last + 1 < len(starts) else len(text)
    return text[starts[first]:end]


def _any_search(patterns: Iterable[re.Pattern], text: str) -> bool:
    return any(p.search(text) for p in patterns)


def _cap(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
