"""Deterministic rule-based skill filters, Django-free.

`evaluate(skill)` returns findings; it never deletes or edits anything (the pipeline records
each finding as a verdict with its reason). Kinds:

* "unreadable": SKILL.md could not be decoded (`skill.unreadable_reason`); nothing else is checked.
* "unsafe": credential exfiltration, destructive host commands, malware (reverse shells, miners,
  keyloggers, ransomware) and attempts to switch off the agent's safety rules.
* "private": the skill needs something a public task cannot have: secrets or API keys, hosts on
  private networks, or a (paid) account/login.
* "non_actionable": nothing a terminal could carry out (persona or prompt text only); plain
  numbered or bulleted steps naming tools, commands, files or formats count as a procedure
  (`skill_steps`).

Keeping false positives low, simply and explainably:

* An unsafe pattern is ignored when it reads as a warning or a description of threats rather
  than an instruction: its line, the two lines before it (fence lines skipped, so the prose that
  introduces a code block counts) or its section headings contain words such as never, don't,
  avoid, warning, dangerous, detect, scan, pattern, block, injection, protect, attack, or the
  line greps for it, or the match is quoted. A skill that says "never run `rm -rf /`" or a
  scanner that lists reverse-shell signatures is not itself unsafe. The flip side: a hostile
  skill can dodge a rule by wording; these filters are a first pass, not a security boundary.
* Exfiltration needs a read of a credential file (cat/tar/base64/`@file`/open(...) of ~/.ssh keys,
  ~/.aws/credentials, .netrc, keychains...) with a network sender (curl, wget, nc, requests.post...)
  on the same line or within the next few lines; `ssh -i key` and public keys do not count.
  `.env` counts only when shipped as a payload (`@.env`, `cat .env | curl`), so documenting a
  project's .env file does not trigger.
* Secrets: env vars the skill declares as required count when any name part is KEY, TOKEN,
  SECRET, PASSWORD, CREDENTIAL or AUTH; names only used in the body (`$FOO_TOKEN`, `export
  FOO_API_KEY=`) need a clearer secret shape, so BUY_TOKEN or SORT_KEY do not count.
* Required vs optional (`skill_requirements`): requirements stated only in prose ("Needs env:
  X", "API key (required)") count too; a credential said to be optional, or any credential of a
  skill with a no-key path ("free mode", "no API key required"), is recorded but not private.
  `requirements(skill)` returns them all, with where each is stated.
* Loopback URLs (localhost, 127.x) are private only when the skill does not start a server itself.
* Account dependence needs dependence wording (requires, need, must, ... required) or a
  Requirements/Prerequisites section, and no negation ("no account needed").
* Scripts among the supporting files are checked for unsafe code too (findings name the file).

Evidence is the matched text (short) and the 1-based line in SKILL.md (or in the supporting file
named by `Finding.path`); line 0 means the finding is not tied to one line.

Not split (~650 lines; the credential and step checks live in skill_requirements and skill_steps): each rule's pattern and the pass that guards it against
false positives (`_cautioned`, the account and secret checks) are read and changed together.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from facet_site.lib import skill_requirements, skill_steps
from facet_site.lib.skill_requirements import Requirement
from facet_site.lib.skillformat import ParsedSkill

__all__ = ["Finding", "KINDS", "UNREADABLE", "UNSAFE", "PRIVATE", "NON_ACTIONABLE", "evaluate", "requirements"]

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


_MAX_PER_REASON = 3
_EVIDENCE_CHARS = 120
_SCRIPT_EXTS = frozenset({"sh", "bash", "zsh", "py", "js", "mjs", "cjs", "ts", "rb", "pl", "php", "ps1", "go", "lua"})
_WINDOW_AFTER = 5  # lines after a credential read in which a network send counts as exfiltration


@dataclass(frozen=True)
class _Rule:
    kind: str
    reason: str
    pattern: re.Pattern
    needles: tuple[str, ...]  # lowercase literals; the regex only runs when one is present
    guarded: bool = True  # skip matches in warning/threat-description context


def _rule(kind, reason, pattern, needles, *, flags=re.I, guarded=True) -> _Rule:
    return _Rule(kind, reason, re.compile(pattern, flags), tuple(needles), guarded)


_END = r"(?=[\s;&|)`'\"]|$)"
_RM_TARGET = r"[\"']?(?:/\*?|~/?\*?|\$HOME/?\*?|\$\{HOME\}/?\*?)[\"']?" + _END

_UNSAFE_RULES = (
    # destructive host commands
    _rule(UNSAFE, "destructive command: recursive delete of / or home",
          r"\brm\s+(?=(?:-{1,2}[\w-]+\s+)*(?:-[a-zA-Z]*[rR]|--recursive))(?:-{1,2}[\w-]+\s+)+" + _RM_TARGET,
          ("rm -",), flags=re.M),
    _rule(UNSAFE, "destructive command: mkfs on a device", r"\bmkfs(?:\.\w+)?\s+(?:-\S+\s+)*/dev/", ("mkfs",)),
    _rule(UNSAFE, "destructive command: dd onto a disk device",
          r"\bdd\b[^\n]*\bof=/dev/(?:sd[a-z]|nvme\d|hd[a-z]|xvd[a-z]|vd[a-z]|disk\d|mmcblk\d)", ("of=/dev/",)),
    _rule(UNSAFE, "destructive command: write to a raw disk device",
          r">\s*/dev/(?:sd[a-z]|nvme\d+n\d|hd[a-z]|disk\d)\b", ("/dev/sd", "/dev/nvme", "/dev/hd", "/dev/disk")),
    _rule(UNSAFE, "destructive command: fork bomb", r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:", (":|:", ": | :"), flags=0),
    _rule(UNSAFE, "destructive command: recursive chmod/chown of /",
          r"\b(?:chmod\s+(?:-\w+\s+)*(?:-R|--recursive)\s+(?:-\w+\s+)*0?777|chmod\s+0?777\s+(?:-R|--recursive)"
          r"|chown\s+(?:-\w+\s+)*(?:-R|--recursive)\s+\S+)\s+/\*?" + _END,
          ("chmod", "chown"), flags=0),
    _rule(UNSAFE, "destructive command: shred of system paths",
          r"\bshred\b[^\n]*\s(?:/dev/(?:sd|nvme|hd)|/etc/|/boot\b|/bin/|/usr/|/var/)", ("shred",)),
    _rule(UNSAFE, "destructive command: find / -delete", r"\bfind\s+/\s[^\n]*-delete\b", ("-delete",)),
    # malware
    # Reverse shells: one rule per family so each regex only runs when its own needle is present.
    _rule(UNSAFE, "malware: reverse shell",
          r"\b(?:ba|z)?sh\s+-i\b[^\n]{0,40}>&?\s*/dev/(?:tcp|udp)/|/dev/(?:tcp|udp)/\S+\s+0>&1|exec\s+\d+<>\s*/dev/tcp/",
          ("/dev/tcp", "/dev/udp")),
    _rule(UNSAFE, "malware: reverse shell", r"\b(?:nc|ncat|netcat)\b[^\n|;]*\s-[ec]\s*(?:/bin/)?(?:ba|z)?sh\b",
          ("-e /bin/", "-c /bin/", "-e sh", "-e bash", "-c sh", "-c bash", "-e/bin/")),
    _rule(UNSAFE, "malware: reverse shell", r"\b(?:ba)?sh\s+-i\s+2>&1\s*\|\s*(?:nc|ncat|netcat)\b", ("-i 2>&1",)),
    _rule(UNSAFE, "malware: reverse shell", r"\bsocat\b[^\n]*\bexec:[^\n]*\b(?:ba|z)?sh\b", ("socat",)),
    _rule(UNSAFE, "malware: reverse shell", r"os\.dup2\(\s*\w+\.fileno\(\)|pty\.spawn\(\s*[\"']/bin/(?:ba)?sh",
          ("dup2(", "pty.spawn")),
    _rule(UNSAFE, "malware: cryptocurrency miner",
          r"\b(?:xmrig|cpuminer|minerd|ethminer|nbminer|lolminer|cgminer|bfgminer|nanominer|phoenixminer|xmr-stak)\b"
          r"|stratum\+(?:tcp|ssl)://",
          ("xmrig", "cpuminer", "minerd", "ethminer", "nbminer", "lolminer", "cgminer", "bfgminer", "nanominer",
           "phoenixminer", "xmr-stak", "stratum+")),
    _rule(UNSAFE, "malware: keylogger",
          r"\bkey\s?-?loggers?\b|\bkeystroke\s+logg(?:er|ing)\b|\bGetAsyncKeyState\b|SetWindowsHookEx\w*\(\s*WH_KEYBOARD",
          ("keylog", "key log", "key-log", "keystroke", "getasynckeystate", "wh_keyboard")),
    _rule(UNSAFE, "malware: ransomware",
          r"\bransomware\b|\byour\s+files\s+(?:have\s+been|are)\s+encrypted\b|\bransom\s+note\b|\bpay\s+(?:the\s+)?ransom\b",
          ("ransom", "files have been encrypted", "files are encrypted")),
    # safety bypass
    _rule(UNSAFE, "safety bypass: ignore previous instructions",
          r"\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:your\s+|the\s+)?(?:previous|prior|above|earlier|system)\s+"
          r"(?:instructions|prompts?|rules|guidelines|directions)",
          ("ignore", "disregard", "forget")),
    # Aimed at the model's own rules: "disable safeguards" of a trading bot's CLI is not a bypass.
    _rule(UNSAFE, "safety bypass: disable safety guardrails",
          r"\b(?:disable|bypass|override|turn\s+off|circumvent|remove|ignore)\s+(?:your\s+|the\s+|all\s+|any\s+|of\s+)*"
          r"(?:(?:ai|model|llm)\s+)?(?:safety\s+(?:rules|guidelines|filters?|guardrails|polic(?:y|ies)|training|alignment)|guardrails"
          r"|content\s+(?:filters?|polic(?:y|ies)|moderation)|ethical\s+(?:guidelines|constraints|rules)"
          r"|(?<=your\s)(?:safety|restrictions|safeguards|programming)|(?<=all\s)(?:safety|restrictions|safeguards))\b",
          ("safety", "guardrail", "safeguard", "content filter", "content polic", "content moderation", "ethical",
           "restrictions", "programming")),
    _rule(UNSAFE, "safety bypass: jailbreak",
          # The bare noun ("jailbreaks") mostly names a threat category; these forms ask for one.
          r"\byou\s+are\s+(?:now\s+)?jailbroken\b|\bjailbreak\s+mode\b|\bjailbreak\s+(?:the|your|this)\s+(?:model|ai|assistant|llm|agent|safety)\b"
          r"|\bDAN\s+mode\b|\bdo\s+anything\s+now\b|\bdeveloper\s+mode\s+(?:enabled|on)\b"
          r"|\byou\s+(?:have|are\s+under)\s+no\s+(?:restrictions|rules|limits|guidelines)\b",
          ("jailbr", "dan mode", "anything now", "developer mode", "no restrictions", "no rules", "no limits", "no guidelines")),
)

_CRED_READ = _rule(
    UNSAFE, "credential exfiltration: reads a secret file and sends it over the network",
    r"(?:\b(?:cat|base64|tar|zip|gzip|xxd|head|tail|strings|gpg|openssl|cp|Get-Content|dump-keychain)\b|[<@]|open\(|readFile\w*\("
    r"|read_text\(|read_bytes\(|expanduser\()[^\n;|]{0,60}?"
    # Public keys and the files ssh itself maintains are not secrets.
    r"(?:(?:~|\$HOME|\$\{HOME\})?/\.ssh\b(?!/[\w.-]*\.pub\b|/authorized_keys|/known_hosts)|\bid_(?:rsa|dsa|ecdsa|ed25519)\b(?!\.pub)"
    r"|\.aws/credentials\b"
    r"|\.netrc\b|\.gnupg\b|\.kube/config\b|\.docker/config\.json|/etc/shadow\b|Login\s+Data\b|login\.keychain|\.keychain-db"
    r"|\.git-credentials\b|wallet\.dat\b|\.ethereum/keystore|\.solana/id\.json|\.config/gh/hosts\.yml"
    r"|security\s+dump-keychain)",
    ("ssh", "id_rsa", "id_ed25519", "id_ecdsa", "id_dsa", ".aws", "netrc", "gnupg", ".kube", ".docker", "shadow",
     "login data", "keychain", "git-credentials", "wallet.dat", "keystore", "id.json", "hosts.yml"),
)
_ENV_PAYLOAD = _rule(
    UNSAFE, "credential exfiltration: sends a .env file over the network",
    r"@[\"']?(?:\S*/)?\.env\b(?!\.example|\.sample|\.template)|\b(?:cat|base64)\s+(?:\S*/)?\.env\b[^\n]*\|\s*(?:curl|wget|nc|ncat|netcat)\b",
    (".env",),
)
_SENDER = re.compile(
    r"\b(?:curl|wget|nc|ncat|netcat|socat|telnet|ftp)\b|Invoke-(?:WebRequest|RestMethod)|requests\.(?:post|put)\b"
    r"|urllib\.request|\bfetch\(|axios\.(?:post|put)|https?\.request\(|/dev/tcp/|\bwebhook\b|\bsmtplib\b",
    re.I,
)
_IDENTITY_USE = re.compile(r"(?:-i\s+|IdentityFile\s+|ssh-add\s+|ssh-keygen\b[^\n]*-f\s+)[\"']?\S*$")

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
_GREPPING = re.compile(r"\b(?:grep|egrep|rg|ripgrep|re\.compile|re\.search|regex|RegExp|semgrep|yara)\b")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$", re.M)
_FENCE = re.compile(r"^\s{0,3}(?:```|~~~)", re.M)

# private
_SECRET_PARTS = frozenset({"KEY", "APIKEY", "TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASS",
                           "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH", "OAUTH", "COOKIE", "JWT", "PAT"})
_SECRET_SUFFIXES = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_STRONG_SECRET_PARTS = frozenset({"SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY",
                                  "ACCESSTOKEN", "AUTHTOKEN", "PAT", "JWT", "COOKIE", "PRIVATEKEY"})
_NOT_SECRET_TOKEN_PREFIXES = frozenset({"BUY", "SELL", "INPUT", "OUTPUT", "IN", "OUT", "FEE", "SWAP", "FROM", "TO", "BASE",
                                        "QUOTE", "NATIVE", "MAX", "MIN", "NUM", "TOTAL", "COUNT", "LIMIT", "TARGET",
                                        "SOURCE", "DEST", "PAYMENT", "REWARD", "STAKE", "GAS", "WRAPPED", "ERC20", "SPL"})
_NOT_SECRET_KEY_PREFIXES = frozenset({"SORT", "PRIMARY", "PARTITION", "CACHE", "IDEMPOTENCY", "PUBLIC", "PUBLISHABLE",
                                      "ROUTING", "LOOKUP", "HASH", "MAP", "DICT", "REDIS", "OBJECT", "S3", "FOREIGN",
                                      "UNIQUE", "DEDUP", "GROUP", "MESSAGE", "SHORTCUT", "HOT", "KEYBOARD"})
_EXPORT = re.compile(r"export\s+([A-Z][A-Z0-9_]*)\s*=")
# Separate patterns with a literal start run far faster than one alternation led by \b.
_ENV_REFS = (
    ("$", re.compile(r"\$\{?([A-Z][A-Z0-9_]{2,})")),
    ("process.env", re.compile(r"process\.env\.([A-Z][A-Z0-9_]+)")),
    ("environ", re.compile(r"environ(?:\.get)?[\[(]\s*[\"']([A-Z][A-Z0-9_]+)")),
    ("getenv", re.compile(r"getenv\(\s*[\"']([A-Z][A-Z0-9_]+)")),
)
# Placeholders for a key in commands; literal-led pieces (matched on lowercased text where
# case does not matter) keep the scan fast.
_PLACEHOLDERS = (
    (True, "your_", re.compile(r"(?<![a-z0-9])your_[a-z0-9_]*(?:api_?key|token|secret|password)\b")),
    (True, "my_", re.compile(r"(?<![a-z0-9])my_[a-z0-9_]*(?:api_?key|token|secret|password)\b")),
    (True, "<", re.compile(r"<\s*(?:your[-_ ])?(?:api[-_ ]?key|token|secret|access[-_ ]token)\s*>")),
    (True, "bearer", re.compile(r"bearer\s+(?:<[^>\n]+>|your[\w-]*|\{\{[^}\n]+\}\})")),
)
_PRIVATE_HOST = re.compile(
    r"https?://(?:[^\s/@]*@)?(?P<host>localhost|127(?:\.\d{1,3}){3}|\[::1\]|10(?:\.\d{1,3}){3}|172\.(?:1[6-9]|2\d|3[01])(?:\.\d{1,3}){2}"
    r"|192\.168(?:\.\d{1,3}){2}|[\w-]+(?:\.[\w-]+)*\.(?:internal|corp|local|lan|intranet|home\.arpa)|intranet(?:\.[\w-]+)*)"
    r"(?![\w-]|\.[\w-])(?::\d+)?",  # "localhost.example.com" is a public name
    re.I,
)
_LOOPBACK = re.compile(r"^(?:localhost|127\.|\[::1\])", re.I)
_STARTS_SERVER = re.compile(
    r"\b(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?(?:dev|start|serve|preview)\b|\bpython3?\s+-m\s+http\.server\b|\buvicorn\b|\bgunicorn\b"
    r"|\bflask\s+run\b|\brails\s+s(?:erver)?\b|\bphp\s+-S\b|\bdocker(?:\s+compose|-compose)?\s+(?:run|up)\b|--port\b"
    r"|\bollama\s+serve\b|\bjupyter\b|\bstreamlit\s+run\b|\bnext\s+dev\b|\bvite\b|\bhugo\s+server\b|\bhttp-server\b"
    r"|\bnpx\s+serve\b|\bnode\s+[\w./-]*server\b|\bmanage\.py\s+runserver\b|\blisten\(\s*\d+",
    re.I,
)
# Account wording is found from the noun backwards: a regex that starts at every "need"/"requires"
# and looks ahead over a few words is several times slower on long bodies.
_ACCOUNT_WORDS = tuple(
    (needle, re.compile(pattern))
    for needle, pattern in (
        ("account", r"accounts?\b"),
        ("plan", r"plans?\b"),
        ("subscription", r"subscriptions?\b"),
        ("tier", r"tiers?\b"),
        ("membership", r"memberships?\b"),
        ("licen", r"licen[cs]es?\b"),
        ("log", r"log(?:ged)?[ -]?in\b"),
        ("sign", r"sign(?:ed)?[ -]?in\b"),
    )
)
_LOGIN_NOUNS = ("account", "subscription", "log", "sign")
_PAID_BEFORE = re.compile(r"\b(?:paid|premium|pro|plus|business|enterprise)\s+$")
_REQUIRE_BEFORE = re.compile(
    r"\b(?:requires?|need(?:s|ed)?|must\s+have|you'?ll\s+need|must(?:\s+be)?|(?:need|have)\s+to(?:\s+be)?|requires?\s+you\s+to(?:\s+be)?"
    r"|only\s+(?:for|with|on)|exclusive\s+to|available\s+(?:only\s+)?(?:on|with|to|for))"
    r"\s+(?:an?\s+|your\s+)?(?:[\w.-]+\s+){0,3}$"
)
_DEPENDS_AFTER = re.compile(r"^\)?\s*(?:is\s+|are\s+)?(?:required|needed)\b")
_ONLY_AFTER = re.compile(r"^\s*only\b")
_REQUIREMENTS_HEADING = re.compile(r"requirement|prerequisite|what you(?:'ll)? need|before you (?:start|begin)", re.I)
_NEGATION_BEFORE = re.compile(r"\b(?:no|not|without|free|never|don'?t|doesn'?t|isn'?t)\b[^.\n]{0,40}$", re.I)
_NEGATION_AFTER = re.compile(r"^[^.\n]{0,30}\b(?:not\s+(?:required|needed|necessary)|optional|needed\?\s*no)\b", re.I)

# non-actionable
_RUNNABLE_LANGS = frozenset({
    "bash", "sh", "shell", "zsh", "console", "shell-session", "shellsession", "terminal", "fish", "ksh",
    "python", "py", "python3", "javascript", "js", "mjs", "typescript", "ts", "node", "ruby", "rb", "go", "rust",
    "sql", "powershell", "ps1", "pwsh", "perl", "php", "r", "lua", "makefile", "make", "dockerfile", "http", "bat", "cmd",
})
_COMMON_CLIS = frozenset({
    "git", "gh", "npm", "npx", "pnpm", "yarn", "bun", "pip", "pip3", "pipx", "uv", "uvx", "python", "python3", "node",
    "deno", "curl", "wget", "docker", "kubectl", "brew", "apt", "apt-get", "cargo", "go", "make", "bash", "sh", "jq",
    "ffmpeg", "openssl", "ssh", "scp", "rsync", "tar", "unzip", "sqlite3", "psql", "mysql", "aws", "gcloud", "az",
    "terraform", "ruby", "gem", "java", "mvn", "gradle", "dotnet", "php", "composer", "cat", "ls", "grep", "sed", "awk",
    "find", "mkdir", "cp", "mv", "chmod", "echo", "export", "cd",
})
_INLINE_CODE = re.compile(r"`([a-z][\w.+-]*)\s+[^`\n]{1,200}`")


def evaluate(skill: ParsedSkill) -> list[Finding]:
    """All findings for one skill, ordered by kind (as in KINDS), then path and line."""
    md_path = skill.skill_md_path.rsplit("/", 1)[-1] if skill.skill_md_path else "SKILL.md"
    if skill.unreadable_reason:
        return [Finding(UNREADABLE, skill.unreadable_reason, "", 0, md_path)]
    findings: list[Finding] = []
    docs = _skill_md_docs(skill)
    scripts = [
        _Doc(f.path, f.text, 1, markdown=False)
        for f in skill.files
        if f.text and (f.path.rsplit(".", 1)[-1].lower() in _SCRIPT_EXTS or f.text.startswith("#!"))
    ]
    for doc in docs + scripts:
        _unsafe(doc, findings)
    _private(skill, docs, findings)
    if not _actionable(skill):
        findings.append(Finding(
            NON_ACTIONABLE,
            "no terminal procedure: no shell or code blocks, required bins, install specs, scripts, command steps "
            "or steps naming tools, files or formats",
            _clip(skill.description), 0, md_path,
        ))
    return _limit(findings, md_path)


class _Doc:
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
            self._nl = _newlines(self.text)
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


def _newlines(text: str) -> list[int]:
    out = []
    i = text.find("\n")
    while i >= 0:
        out.append(i)
        i = text.find("\n", i + 1)
    return out


def _cautioned(doc: _Doc, start: int, end: int) -> bool:
    """True when the match reads as a warning or a description of a threat, not an instruction."""
    line_start, line_end = doc.line_at(start)
    line = doc.text[line_start:line_end]
    if _caution(line) or _GREPPING.search(line):
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
        if _caution(prev):
            return True
    return any(_caution(h) for h in doc.headings_above(start))


_PATHLIKE = re.compile(r"\S*(?:/|\w\.\w)\S*")


def _caution(text: str) -> bool:
    if not text:
        return False
    # Host names and paths are not wording ("attacker.example", "scan.py"); snake_case names
    # such as prompt_injection are.
    return bool(_CAUTION.search(_PATHLIKE.sub(" ", text).replace("_", " ")))


def _unsafe(doc: _Doc, out: list[Finding]) -> None:
    if not doc.text:
        return
    low = doc.low
    for rule in _UNSAFE_RULES + (_ENV_PAYLOAD,):
        if not any(n in low for n in rule.needles):
            continue
        for m in rule.pattern.finditer(doc.text):
            if rule.guarded and _cautioned(doc, m.start(), m.end()):
                continue
            out.append(Finding(rule.kind, rule.reason, _clip(m.group(0)), doc.line_no(m.start()), doc.path))
    if any(n in low for n in _CRED_READ.needles):
        for m in _CRED_READ.pattern.finditer(doc.text):
            line_start, line_end = doc.line_at(m.start())
            if _IDENTITY_USE.search(doc.text[line_start:m.end()]):
                continue  # `ssh -i ~/.ssh/key` authenticates with the key; it does not ship it
            window_end = line_end
            for _ in range(_WINDOW_AFTER):
                nxt = doc.text.find("\n", window_end + 1)
                window_end = len(doc.text) if nxt < 0 else nxt
            if not _SENDER.search(doc.text, line_start, window_end):
                continue
            if _cautioned(doc, m.start(), m.end()):
                continue
            out.append(Finding(UNSAFE, _CRED_READ.reason, _clip(m.group(0)), doc.line_no(m.start()), doc.path))


def _is_secret_name(name: str, *, declared: bool = False) -> bool:
    """Does an environment variable name look like it holds a secret?

    `declared` names come from requires.env/primaryEnv/envVars: the skill says they must be set,
    so any KEY/TOKEN/SECRET/PASSWORD/CREDENTIAL/AUTH part is enough. Names merely used in the
    body are judged more strictly, so BUY_TOKEN (a token address) or SORT_KEY do not count.
    """
    parts = [p for p in re.split(r"[^A-Z0-9]+", name.upper()) if p]
    if not parts:
        return False
    if declared:
        return any(p in _SECRET_PARTS or p.endswith(_SECRET_SUFFIXES) for p in parts)
    if any(p in _STRONG_SECRET_PARTS for p in parts):
        return True
    last = parts[-1]
    prev = parts[-2] if len(parts) > 1 else ""
    if last in ("TOKEN", "AUTH", "PASS", "PWD"):
        return prev not in _NOT_SECRET_TOKEN_PREFIXES
    if last == "KEY":
        return bool(prev) and prev not in _NOT_SECRET_KEY_PREFIXES
    return False


def _secret_requirements(skill: ParsedSkill, docs: list[_Doc]) -> skill_requirements.Requirements:
    """Every credential the skill names, each judged required or optional (skill_requirements)."""
    fm_doc, body_doc = docs
    found: list[Requirement] = []
    reported: set[str] = set()
    names = list(skill.required_env) + [v.get("name", "") for v in skill.env_vars if isinstance(v, dict)]
    for name in names:
        if name and name not in reported and _is_secret_name(name, declared=True):
            reported.add(name)
            pos = fm_doc.text.find(name)
            line = fm_doc.line_no(pos) if pos >= 0 else 0
            found.append(Requirement(name, f"requires secret {name}", name, fm_doc.path, line, "frontmatter"))
    body = body_doc.text
    if body:
        for m in _EXPORT.finditer(body) if "export" in body else ():
            name = m.group(1)
            if name not in reported and _is_secret_name(name):
                reported.add(name)
                found.append(Requirement(name, f"requires secret {name}", _clip(_line_of(body_doc, m.start())),
                                         body_doc.path, body_doc.line_no(m.start()), "code"))
        for needle, pattern in _ENV_REFS:
            if needle not in body:
                continue
            for m in pattern.finditer(body):
                name = m.group(1)
                if name not in reported and _is_secret_name(name):
                    reported.add(name)
                    found.append(Requirement(name, f"requires secret {name}", _clip(m.group(0)),
                                             body_doc.path, body_doc.line_no(m.start()), "code"))
        for req in skill_requirements.prose_requirements(body, path=body_doc.path, first_line=body_doc.first_line):
            if req.name not in reported and (req.name == "API key" or _is_secret_name(req.name, declared=True)):
                reported.add(req.name)
                found.append(req)
        low = body_doc.low
        if not reported and len(low) == len(body):
            hits = []
            for lowered, needle, pattern in _PLACEHOLDERS:
                if needle in low:
                    m = pattern.search(low if lowered else body)
                    if m:
                        hits.append(m.start())
            if hits:
                start = min(hits)
                end = start + next(
                    len(m.group(0)) for lowered, _, pat in _PLACEHOLDERS
                    if (m := pat.match(low if lowered else body, start))
                )
                found.append(Requirement("API key", "requires an API key or token", _clip(body[start:end]),
                                         body_doc.path, body_doc.line_no(start), "code"))
    return skill_requirements.judge(found, texts=[(d.path, d.first_line, d.text) for d in docs])


def requirements(skill: ParsedSkill) -> skill_requirements.Requirements:
    """The credentials a skill names, required or optional, with where each is stated."""
    if skill.unreadable_reason:
        return skill_requirements.Requirements()
    return _secret_requirements(skill, _skill_md_docs(skill))


def _skill_md_docs(skill: ParsedSkill) -> list[_Doc]:
    md_path = skill.skill_md_path.rsplit("/", 1)[-1] if skill.skill_md_path else "SKILL.md"
    return [_Doc(md_path, skill.frontmatter_text, skill.frontmatter_start_line, markdown=False),
            _Doc(md_path, skill.body, skill.body_start_line, markdown=True)]


def _private(skill: ParsedSkill, docs: list[_Doc], out: list[Finding]) -> None:
    body = docs[1].text
    for req in _secret_requirements(skill, docs).required:
        out.append(Finding(PRIVATE, req.reason, req.evidence, req.line, req.path))
    starts_server = None
    for doc in docs:
        if not doc.text or "://" not in doc.text:
            continue
        for m in _PRIVATE_HOST.finditer(doc.text):
            host = m.group("host")
            if _LOOPBACK.match(host):
                if starts_server is None:
                    starts_server = bool(_STARTS_SERVER.search(body)) or any(
                        _STARTS_SERVER.search(b.get("code", "")) for b in skill.code_blocks
                    )
                if starts_server:
                    continue  # the skill runs its own local server; a container can do the same
            out.append(Finding(PRIVATE, "uses a private network host", _clip(m.group(0)), doc.line_no(m.start()), doc.path))
    for doc in docs:
        _accounts(doc, out)


def _accounts(doc: _Doc, out: list[Finding]) -> None:
    """'requires a paid account' / 'you must be logged in' style dependence.

    An account noun counts only with dependence wording in its sentence (requires, need, must,
    only, ... required) or inside a Requirements/Prerequisites section, and not when negated
    ("no account needed"). A pricing table that mentions a "Pro tier" is not a dependence.
    """
    low = doc.low
    if len(low) != len(doc.text):  # lower() changed offsets (rare non-ASCII); skip rather than misreport
        return
    matches = sorted(
        (m for needle, pattern in _ACCOUNT_WORDS if needle in low for m in pattern.finditer(low)),
        key=lambda m: m.start(),
    )
    for m in matches:
        if m.start() and (low[m.start() - 1].isalnum() or low[m.start() - 1] == "_"):
            continue  # inside a longer word; checked here because a leading lookbehind defeats re's literal search
        word = m.group(0)
        line_start, line_end = doc.line_at(m.start())
        before = low[max(line_start, m.start() - 80):m.start()]
        cut = max(before.rfind(". "), before.rfind("! "), before.rfind("? "), before.rfind("; "))
        if cut >= 0:
            before = before[cut + 2:]
        after = low[m.end():line_end]
        paid = _PAID_BEFORE.search(before)
        if not paid and not word.startswith(_LOGIN_NOUNS):
            continue  # "plan", "tier" alone are not a dependence
        need = _REQUIRE_BEFORE.search(before)
        required_after = _DEPENDS_AFTER.match(after) or (paid and _ONLY_AFTER.match(after))
        in_requirements = doc.markdown and any(_REQUIREMENTS_HEADING.search(h) for h in doc.headings_above(m.start()))
        if not (need or required_after or in_requirements):
            continue
        if _NEGATION_BEFORE.search(before) or _NEGATION_AFTER.search(after):
            continue
        reason = "requires a paid account" if paid else "requires an account or login"
        start = m.start() - len(before) + (need.start() if need else paid.start() if paid else len(before))
        end = m.end() + (required_after.end() if required_after else 0)
        out.append(Finding(PRIVATE, reason, _clip(doc.text[start:end]), doc.line_no(m.start()), doc.path))


def _actionable(skill: ParsedSkill) -> bool:
    if skill.required_bins or skill.any_bins or skill.install:
        return True
    if any(
        f.path.rsplit(".", 1)[-1].lower() in _SCRIPT_EXTS or (f.text or "").startswith("#!")
        for f in skill.files
    ):
        return True
    known = _COMMON_CLIS | set(skill.tools)
    for block in skill.code_blocks:
        lang = block.get("lang", "")
        if lang in _RUNNABLE_LANGS:
            return True
        if not lang:
            for raw in block.get("code", "").split("\n"):
                line = raw.strip()
                if not line:
                    continue
                if line.startswith("$ "):
                    return True
                first = line.split(maxsplit=1)[0]
                if first in known:
                    return True
                break
    for m in _INLINE_CODE.finditer(skill.body):
        if m.group(1) in known:
            return True
    # Plain numbered or bulleted steps naming tools, commands, files or formats (skill_steps).
    return skill_steps.has_concrete_steps(skill.body)


def _line_of(doc: _Doc, pos: int) -> str:
    start, end = doc.line_at(pos)
    return doc.text[start:end].strip()


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _EVIDENCE_CHARS else text[: _EVIDENCE_CHARS - 1] + "…"


def _limit(findings: list[Finding], md_path: str) -> list[Finding]:
    """Sorted, without duplicates, at most _MAX_PER_REASON findings per rule."""
    order = {k: i for i, k in enumerate(KINDS)}
    findings.sort(key=lambda f: (order[f.kind], f.path != md_path, f.path, f.line, f.reason))
    counts: dict[tuple[str, str], int] = {}
    out = []
    seen = set()
    for f in findings:
        ident = (f.kind, f.reason, f.path, f.line)
        if ident in seen:
            continue
        seen.add(ident)
        key = (f.kind, f.reason)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] <= _MAX_PER_REASON:
            out.append(f)
    return out
