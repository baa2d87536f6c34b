"""The safety rule files (`safety_rules/*.toml`) parsed into compiled rules, and URL classes, Django-free.

`load_rules()` reads and checks the rule files: every rule needs an id, a level, patterns that
compile, and at least one bad and one good example; a `{{name}}` in a pattern is the `[shared]`
pattern of that name. `classify_url()` puts an installer URL into
the classes the rules' `url_levels` speak of. The scanner itself is `facet_site.lib.skill_safety`.
"""
from __future__ import annotations

import io
import ipaddress
import re
import tomllib
import urllib.parse
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = [
    "CLEAN", "SUSPICIOUS", "UNSAFE", "LEVELS", "RULES_PATH", "URL_CLASSES", "FILE_CONDITIONS", "Rule", "FileRule",
    "RuleSet", "RuleFileError", "load_rules", "classify_url", "worst_level", "example_bytes",
]

CLEAN, SUSPICIOUS, UNSAFE = "clean", "suspicious", "unsafe"
LEVELS = (CLEAN, SUSPICIOUS, UNSAFE)
_RANK = {CLEAN: 0, SUSPICIOUS: 1, UNSAFE: 2}
# The rule files: `00-context.toml` (installer allow-list, throwaway hosts, context words, shared patterns)
# and one file per family of rules, read in name order as one (README.md there)
RULES_PATH = Path(__file__).with_name("safety_rules")
URL_CLASSES = frozenset({"local", "raw_ip", "plain_http", "allowlisted", "throwaway", "unlisted"})
FILE_CONDITIONS = frozenset({"executable", "archive-executable", "encrypted-archive", "encrypted-executable", "opaque-archive",
                             "pickle-code", "sourceless-bytecode"})


def worst_level(levels: Iterable[str]) -> str:
    return max(levels, key=_RANK.__getitem__, default=CLEAN)


@dataclass(frozen=True)
class Rule:
    id: str
    level: str
    description: str
    patterns: tuple[re.Pattern, ...]
    needles: tuple[str, ...] = ()
    near: tuple[re.Pattern, ...] = ()
    near_lines: int = 0
    # ... and one pattern of every one of these groups too, within the same window: a rule that needs
    # three things in one program (who runs it, where, and a send) names the second and third here
    near_also: tuple[tuple[re.Pattern, ...], ...] = ()
    unless: tuple[re.Pattern, ...] = ()
    unless_near: tuple[re.Pattern, ...] = ()  # ... nor when one of these is within `near_lines` of the match
    url_levels: Mapping[str, str] = field(default_factory=dict)  # url class -> level; only these fire
    exemptible: bool = True
    kind: str = "command"  # "text" rules (injection phrases) may be quoted in any labelled fence
    outside_fences: bool = False  # only matches outside fenced blocks count (hidden-text rules)
    multiline: bool = False  # patterns span lines: run on the whole text, not only on needle lines
    non_ascii: bool = False  # looks for non-ASCII characters only: ASCII-only texts are skipped
    scripts_only: bool = False  # runs on program files only (by extension or #! line), not on documents
    # runs on decoded text only (what base64, hex, joined pieces ... turn into), never on the file as
    # written: a raw-IP address is common in plain sight and rare hidden
    decoded_only: bool = False
    vendor_exempt: bool = False  # a match whose lines link only vendor installers (the allowlist) is not counted
    # fires only when a name in the pattern's `npm` or `pypi` group is one slip from a popular package
    # of that registry (package_names: typosquats)
    packages: bool = False
    paths: tuple[str, ...] = ()  # runs only on files whose name matches one of these globs (`requirements*.txt`)
    bad: tuple[dict, ...] = ()  # {"path", "text", "level"}: must fire this rule (at that level, if given)
    good: tuple[dict, ...] = ()  # must not fire this rule


@dataclass(frozen=True)
class FileRule:
    """A rule on what a file's bytes are (a program, an archive), not on its text."""
    id: str
    level: str
    description: str
    when: str  # one of FILE_CONDITIONS
    bad: tuple[dict, ...] = ()  # {"path", "data": bytes, "beside": other files of the skill, as paths}
    good: tuple[dict, ...] = ()


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    allowlist: tuple[tuple[str, str], ...]  # (host, path prefix) of official installers
    throwaway: frozenset[str]  # hosts anyone can point anywhere: shorteners, tunnels, paste and file drops
    example_labels: re.Pattern
    warning_labels: re.Pattern
    detector_labels: re.Pattern
    command_line: re.Pattern  # a line of a fenced block that is a shell command
    executes: re.Pattern  # a line that runs what it decodes
    inert_sample_excludes: re.Pattern  # what a decoded test sample must not hold to be inert
    setup_headings: re.Pattern
    order_words: re.Pattern
    data_fences: frozenset[str]
    program_fences: frozenset[str]
    test_dirs: frozenset[str]
    script_exts: frozenset[str]
    data_exts: frozenset[str]
    file_rules: tuple[FileRule, ...] = ()

    def rule(self, rule_id: str) -> Rule | FileRule:
        for r in (*self.rules, *self.file_rules):
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)


class RuleFileError(ValueError):
    """The rule file is malformed: a missing field, an unknown level, a regex that does not compile."""


def load_rules(path: str | Path | None = None) -> RuleSet:
    """The rules from `path`, a rule file or a folder of them (default: `safety_rules/` beside this
    module); cached for the default."""
    if path is None:
        return _default_rules()
    return _parse_rules(_read(Path(path)))


@lru_cache(maxsize=1)
def _default_rules() -> RuleSet:
    return _parse_rules(_read(RULES_PATH))


def _read(path: Path) -> dict:
    """One rule file, or a folder's `*.toml` files in name order as one: their `[[rule]]` and `[[file_rule]]`
    lists joined, their tables (`[context]` ...) each given by one file only."""
    files = sorted(path.glob("*.toml")) if path.is_dir() else [path]
    data: dict = {}
    for f in files:
        try:
            part = tomllib.loads(f.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise RuleFileError(f"{f.name}: {exc}") from exc
        for key, value in part.items():
            if isinstance(value, list):
                data.setdefault(key, []).extend(value)
            elif key in data:
                raise RuleFileError(f"{f.name}: [{key}] is given by another rule file too")
            else:
                data[key] = value
    return data


# `{{name}}` in a rule's pattern stands for the rule file's `[shared]` pattern of that name, so that a
# list two rules both need (a chat bot's endpoint, an order to keep something from the user in nine
# languages) is written once. A regex's own braces are `{2}` or `\{\{`, never a doubled brace around a name.
_SHARED_REF = re.compile(r"(?<!\\)\{\{([a-z][a-z0-9_]*)\}\}")


def _shared_patterns(data: dict) -> dict[str, str]:
    out = {}
    for name, value in data.get("shared", {}).items():
        items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        if not _SHARED_REF.fullmatch("{{%s}}" % name) or not items or not all(isinstance(v, str) for v in items):
            raise RuleFileError(f"shared.{name}: a shared pattern is a lowercase name given a pattern or a list of them")
        if any(_SHARED_REF.search(v) for v in items):
            raise RuleFileError(f"shared.{name}: a shared pattern cannot use another one")
        out[name] = "(?:" + "|".join(f"(?:{v})" for v in items) + ")"
    return out


def _compile(items, flags, where: str, shared: Mapping[str, str] = {}) -> tuple[re.Pattern, ...]:
    def expand(pattern: str) -> str:
        def one(m: re.Match) -> str:
            if m.group(1) not in shared:
                raise RuleFileError(f"{where}: no [shared] pattern named {m.group(1)!r}")
            return shared[m.group(1)]
        return _SHARED_REF.sub(one, pattern)

    try:
        return tuple(re.compile(expand(p), flags) for p in items)
    except re.error as exc:
        raise RuleFileError(f"{where}: {exc}") from exc


def _examples(items, where: str) -> tuple[dict, ...]:
    out = []
    for item in items:
        if isinstance(item, str):
            out.append({"path": "SKILL.md", "text": item, "level": ""})
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            out.append({"path": item.get("path", "SKILL.md"), "text": item["text"], "level": item.get("level", "")})
        else:
            raise RuleFileError(f"{where}: an example is a string or {{path, text}}")
    return tuple(out)


def example_bytes(example: Mapping) -> bytes:
    """The file a file rule's example describes: {hex} as bytes, or {zip = {member: text or "hex:.."},
    encrypted} built as a zip (an encrypted one only flags its members as encrypted: what a scanner
    sees of a password-protected zip without the password)."""
    if "hex" in example:
        return bytes.fromhex(example["hex"])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, text in example["zip"].items():
            zf.writestr(name, bytes.fromhex(text[4:]) if text.startswith("hex:") else text.encode())
    raw = bytearray(buf.getvalue())
    if example.get("encrypted"):
        for sig, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
            at = raw.find(sig)
            while at >= 0:
                raw[at + flag_at] |= 0x01
                at = raw.find(sig, at + 4)
    return bytes(raw)


def _file_examples(items, where: str) -> tuple[dict, ...]:
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str) or not (
                isinstance(item.get("hex"), str) or isinstance(item.get("zip"), dict)):
            raise RuleFileError(f"{where}: a file example is {{path, hex}} or {{path, zip, encrypted}}")
        beside = item.get("beside", [])
        if not isinstance(beside, list) or not all(isinstance(b, str) for b in beside):
            raise RuleFileError(f"{where}: example {item['path']}: beside is a list of the skill's other file paths")
        try:
            out.append({"path": item["path"], "data": example_bytes(item), "beside": tuple(beside)})
        except ValueError as exc:
            raise RuleFileError(f"{where}: example {item['path']}: {exc}") from exc
    return tuple(out)


def _parse_file_rules(data: dict, seen: set[str]) -> tuple[FileRule, ...]:
    out = []
    for raw in data.get("file_rule", ()):
        rid = raw.get("id", "")
        if not rid or rid in seen:
            raise RuleFileError(f"rule id missing or repeated: {rid!r}")
        seen.add(rid)
        if raw.get("level") not in (SUSPICIOUS, UNSAFE):
            raise RuleFileError(f"{rid}: levels must be suspicious or unsafe")
        if raw.get("when") not in FILE_CONDITIONS:
            raise RuleFileError(f"{rid}: when must be one of {sorted(FILE_CONDITIONS)}")
        bad, good = _file_examples(raw.get("bad", ()), rid), _file_examples(raw.get("good", ()), rid)
        if not bad or not good:
            raise RuleFileError(f"{rid}: needs at least one bad and one good example")
        out.append(FileRule(id=rid, level=raw["level"], description=raw.get("description", "").strip(),
                            when=raw["when"], bad=bad, good=good))
    return tuple(out)


def _parse_rules(data: dict) -> RuleSet:
    rules, seen = [], set()
    shared = _shared_patterns(data)
    for raw in data.get("rule", ()):
        rid = raw.get("id", "")
        if not rid or rid in seen:
            raise RuleFileError(f"rule id missing or repeated: {rid!r}")
        seen.add(rid)
        url_levels = dict(raw.get("url_levels", {}))
        if set(url_levels) - URL_CLASSES:
            raise RuleFileError(f"{rid}: unknown url class in url_levels: {sorted(set(url_levels) - URL_CLASSES)}")
        level = worst_level(url_levels.values()) if url_levels else raw.get("level")
        if level not in (SUSPICIOUS, UNSAFE) or any(v not in (SUSPICIOUS, UNSAFE) for v in url_levels.values()):
            raise RuleFileError(f"{rid}: levels must be suspicious or unsafe")
        flags = 0 if raw.get("case_sensitive") else re.IGNORECASE
        patterns = _compile(raw.get("patterns", ()), flags, rid, shared)
        if not patterns:
            raise RuleFileError(f"{rid}: no patterns")
        if url_levels and any("url" not in p.groupindex for p in patterns):
            raise RuleFileError(f"{rid}: url_levels needs a (?P<url>...) group in every pattern")
        if raw.get("near_also") and not raw.get("near"):
            raise RuleFileError(f"{rid}: near_also adds to near; give near first")
        if any(isinstance(g, str) or not g for g in raw.get("near_also", ())):
            raise RuleFileError(f"{rid}: near_also is a list of non-empty lists of patterns")
        if raw.get("packages") and any(not {"npm", "pypi"} & set(p.groupindex) for p in patterns):
            raise RuleFileError(f"{rid}: packages needs a (?P<npm>...) or (?P<pypi>...) group in every pattern")
        bad, good = _examples(raw.get("bad", ()), rid), _examples(raw.get("good", ()), rid)
        if not bad or not good:
            raise RuleFileError(f"{rid}: needs at least one bad and one good example")
        rules.append(Rule(
            id=rid, level=level, description=raw.get("description", "").strip(), patterns=patterns,
            needles=tuple(n.lower() for n in raw.get("needles", ())),
            near=_compile(raw.get("near", ()), flags, rid, shared), near_lines=int(raw.get("near_lines", 0)),
            near_also=tuple(_compile(group, flags, rid, shared) for group in raw.get("near_also", ())),
            unless=_compile(raw.get("unless", ()), flags, rid, shared),
            unless_near=_compile(raw.get("unless_near", ()), flags, rid, shared),
            url_levels=url_levels,
            exemptible=bool(raw.get("exemptible", True)), kind=raw.get("kind", "command"),
            outside_fences=bool(raw.get("outside_fences", False)), multiline=bool(raw.get("multiline", False)),
            non_ascii=bool(raw.get("non_ascii", False)), scripts_only=bool(raw.get("scripts_only", False)),
            decoded_only=bool(raw.get("decoded_only", False)),
            vendor_exempt=bool(raw.get("vendor_exempt", False)),
            packages=bool(raw.get("packages", False)), paths=tuple(raw.get("paths", ())),
            bad=bad, good=good,
        ))
    allow = []
    for entry in data.get("allowlist", {}).get("installers", ()):
        host, _, prefix = entry.lower().partition("/")
        allow.append((host, "/" + prefix if prefix else ""))
    throwaway = frozenset(h.lower().strip(".") for h in data.get("hosts", {}).get("throwaway", ()))
    ctx = data.get("context", {})

    def words(key: str) -> re.Pattern:
        # `<key>_joined`: the same labels in languages that write words together (Chinese, Japanese) or join
        # particles to them (Korean), matched inside a run of letters
        joined = ctx.get(key + "_joined", [])
        return re.compile(r"(?<!\w)(?:" + "|".join(ctx.get(key, ["(?!)"])) + r")(?!\w)"
                          + ("|(?:" + "|".join(joined) + ")" if joined else ""), re.IGNORECASE)

    return RuleSet(
        rules=tuple(rules), allowlist=tuple(allow), throwaway=throwaway,
        example_labels=words("example_labels"), warning_labels=words("warning_labels"),
        detector_labels=words("detector_labels"),
        command_line=re.compile(ctx.get("command_line", "(?!)"), re.IGNORECASE | re.MULTILINE),
        executes=re.compile(ctx.get("executes", "(?!)"), re.IGNORECASE), setup_headings=words("setup_headings"),
        inert_sample_excludes=re.compile(ctx.get("inert_sample_excludes", ""), re.IGNORECASE),
        order_words=words("order_words"),
        data_fences=frozenset(ctx.get("data_fences", ())), program_fences=frozenset(ctx.get("program_fences", ())),
        test_dirs=frozenset(ctx.get("test_dirs", ())), script_exts=frozenset(ctx.get("script_exts", ())),
        data_exts=frozenset(ctx.get("data_exts", ())), file_rules=_parse_file_rules(data, seen),
    )



def classify_url(url: str, allowlist: Iterable[tuple[str, str]] = (), throwaway: Iterable[str] = ()) -> str:
    """local, raw_ip, plain_http, allowlisted (https from a vendor installer host), throwaway (a
    URL shortener, tunnel, paste or file-drop host, which hides who serves the file) or unlisted.
    A bare host (`198.51.100.7`, a mirror list's item) is classified as that host."""
    url = url.strip("'\"`")
    if "://" not in url:
        url = "//" + url
    try:
        parts = urllib.parse.urlsplit(url)
        host = (parts.hostname or "").lower().rstrip(".")
    except ValueError:
        return "unlisted"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None:
        # Documentation ranges (203.0.113.0/24 ...) are "reserved" too but stand for real hosts here.
        # multicast and reserved addresses (mDNS's 224.0.0.251, a netmask) name no server to fetch from
        local = ip.is_loopback or ip.is_unspecified or ip.is_link_local or ip.is_multicast or ip.is_reserved or (
            ip.is_private and not _is_documentation(ip))
        return "local" if local else "raw_ip"
    if host == "localhost" or host.endswith(".localhost") or host.endswith(".local"):
        return "local"
    if not isinstance(throwaway, (set, frozenset)):
        throwaway = frozenset(throwaway)
    # The host and each domain it sits under, looked up: a pipe-to-shell per line of a long file
    # classifies as many URLs as it has lines.
    labels = host.split(".")
    if any(".".join(labels[i:]) in throwaway for i in range(len(labels))):
        return "throwaway"  # before plain http: over either scheme the file behind it can change at any time
    if parts.scheme.lower() == "http":
        return "plain_http"
    path = parts.path or "/"
    for a_host, a_prefix in allowlist:
        if (host == a_host or host.endswith("." + a_host)) and path.lower().startswith(a_prefix):
            return "allowlisted"
    return "unlisted"


_DOC_NETS = tuple(ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32"))


def _is_documentation(ip) -> bool:
    return any(ip.version == n.version and ip in n for n in _DOC_NETS)
