"""Deterministic rule-based skill filters, Django-free.

`evaluate(skill)` returns findings; it never deletes or edits anything (the pipeline records
each finding as a verdict with its reason). Kinds:

* "unreadable": SKILL.md could not be decoded (`skill.unreadable_reason`); nothing else is checked.
* "unsafe": credential exfiltration, destructive host commands, malware (keyloggers, ransomware) and
  attempts to switch off the agent's safety rules. Reverse shells are the safety scan's
  (`shell.reverse`, `shell.reverse-streams`), which tells a cheat sheet's labelled examples from a
  setup step. Cryptocurrency miners are the safety scan's too (`abuse.cryptominer`, held;
  `abuse.cryptominer-hidden`, unsafe): a miner's name alone, as in a rig owner's dashboard, is no
  verdict.
* "private": the skill needs something a public task cannot have: secrets or API keys, hosts on
  private networks, or a (paid) account/login.
* "non_actionable": nothing a terminal could carry out (persona or prompt text only); plain
  numbered or bulleted steps naming tools, commands, files or formats count as a procedure
  (`skill_steps`), and so do runnable code blocks in the skill's reference documents (at least
  REFERENCE_BLOCKS of them; README, changelog and the like excluded).

Keeping false positives low, simply and explainably:

* An unsafe pattern is ignored when it reads as a warning or a description of threats rather
  than an instruction (`skill_findings.cautioned`): a skill that says "never run `rm -rf /`" or a
  scanner that lists reverse-shell signatures is not itself unsafe. The flip side: a hostile
  skill can dodge a rule by wording; these filters are a first pass, not a security boundary
  (the safety scanner, `skill_safety`, is the one that decodes payloads and grades levels).
* Exfiltration needs a read of a credential file (cat/tar/base64/`@file`/open(...) of ~/.ssh keys,
  ~/.aws/credentials, .netrc, keychains...) with a network sender (curl, wget, nc, requests.post...)
  on the same line or within the next few lines; `ssh -i key` and public keys do not count.
  `.env` counts only when shipped as a payload (`@.env`, `cat .env | curl`), so documenting a
  project's .env file does not trigger.
* Private resources (secrets required or optional, private hosts, accounts): `skill_private`.
* Scripts among the supporting files are checked for unsafe code too (findings name the file).

Evidence is the matched text (short) and the 1-based line in SKILL.md (or in the supporting file
named by `Finding.path`); line 0 means the finding is not tied to one line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from facet_site.lib import skill_private, skill_steps
from facet_site.lib.skill_findings import (
    KINDS, NON_ACTIONABLE, PRIVATE, UNREADABLE, UNSAFE, Finding, SkillDoc, cautioned, clip, is_program, own_names,
    program_docs, skill_md_docs,
)
from facet_site.lib.skill_private import requirements
from facet_site.lib.skillformat import ParsedSkill, markdown

__all__ = ["Finding", "KINDS", "UNREADABLE", "UNSAFE", "PRIVATE", "NON_ACTIONABLE", "evaluate", "requirements"]

_MAX_PER_REASON = 3
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
    # (the bare nouns, group "noun", name a topic in a title: _TOPIC_LINE)
    _rule(UNSAFE, "malware: keylogger",
          r"(?P<noun>\bkey\s?-?loggers?\b|\bkeystroke\s+logg(?:er|ing)\b)|\bGetAsyncKeyState\b|SetWindowsHookEx\w*\(\s*WH_KEYBOARD",
          ("keylog", "key log", "key-log", "keystroke", "getasynckeystate", "wh_keyboard")),
    _rule(UNSAFE, "malware: ransomware",
          r"(?P<noun>\bransomware\b)|\byour\s+files\s+(?:have\s+been|are)\s+encrypted\b|\bransom\s+note\b|\bpay\s+(?:the\s+)?ransom\b",
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

# non-actionable
_RUNNABLE_LANGS = frozenset({
    "bash", "sh", "shell", "zsh", "console", "shell-session", "shellsession", "terminal", "fish", "ksh",
    "python", "py", "python3", "javascript", "js", "mjs", "typescript", "ts", "node", "ruby", "rb", "go", "rust",
    "sql", "powershell", "ps1", "pwsh", "perl", "php", "r", "lua", "makefile", "make", "dockerfile", "http", "bat", "cmd",
    # code the agent writes into the user's project (a Swift fix in the tenth blind check's concurrency skill)
    "swift", "kotlin", "kt", "java", "c", "cpp", "c++", "csharp", "cs", "c#", "scala", "dart", "elixir", "ex", "haskell",
    "hs", "zig", "objc", "objective-c", "groovy", "clojure", "julia", "jsx", "tsx", "vue", "svelte",
})
_COMMON_CLIS = frozenset({
    "git", "gh", "npm", "npx", "pnpm", "yarn", "bun", "pip", "pip3", "pipx", "uv", "uvx", "python", "python3", "node",
    "deno", "curl", "wget", "docker", "kubectl", "brew", "apt", "apt-get", "cargo", "go", "make", "bash", "sh", "jq",
    "ffmpeg", "openssl", "ssh", "scp", "rsync", "tar", "unzip", "sqlite3", "psql", "mysql", "aws", "gcloud", "az",
    "terraform", "ruby", "gem", "java", "mvn", "gradle", "dotnet", "php", "composer", "cat", "ls", "grep", "sed", "awk",
    "find", "mkdir", "cp", "mv", "chmod", "echo", "export", "cd",
})
_MARKDOWN_EXTS = frozenset({"md", "markdown", "mdx"})
_PACKAGE_PAPERS = frozenset({"readme", "changelog", "changes", "history", "license", "licence", "contributing",
                             "code_of_conduct", "security", "authors", "notice"})
# A block that opens with an HTTP request line ("POST https://api.example.com/v1/chat") is a call as
# runnable as curl's, written the way API references (and ```http blocks) write it.
_HTTP_REQUEST_LINE = re.compile(r"(?:GET|POST|PUT|PATCH|DELETE|HEAD)\s+(?:https?://|/)\S")
# A tool call written as the agent makes it: a snake_case tool name alone or with key=value arguments
# (`search_knowledge query="FMLA eligibility"`, `get_identity_context`), as MCP skills show their tools.
_TOOL_CALL_LINE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?:\s+[a-z][a-z0-9_]*=\S.*)?")
REFERENCE_BLOCKS = 2  # runnable blocks in reference documents that make a skill without others actionable
_INLINE_CODE = re.compile(r"`([a-z][\w.+-]*)\s+[^`\n]{1,200}`")


def evaluate(skill: ParsedSkill) -> list[Finding]:
    """All findings for one skill, ordered by kind (as in KINDS), then path and line."""
    md_path = skill.skill_md_path.rsplit("/", 1)[-1] if skill.skill_md_path else "SKILL.md"
    if skill.unreadable_reason:
        return [Finding(UNREADABLE, skill.unreadable_reason, "", 0, md_path)]
    findings: list[Finding] = []
    docs = skill_md_docs(skill)
    programs = program_docs(skill)
    for doc in docs + programs:
        _unsafe(doc, findings)
    skill_private.private_findings(skill, docs, programs, findings)
    if not _actionable(skill):
        findings.append(Finding(
            NON_ACTIONABLE,
            "no terminal procedure: no shell or code blocks, required bins, install specs, scripts, command steps, "
            "steps naming tools, files or formats, or runnable code in reference documents",
            clip(skill.description), 0, md_path,
        ))
    return _limit(findings, md_path)


# A skill's name, description, tags or a heading: a malware family named there is what the skill is about
# ("name: ransomware-ir-guide", "## Keylogger detection"), as often a defence as not; the same noun in a
# step, or a ransom note's wording anywhere, still counts (red-team set 11's Korean incident-response guide).
_TOPIC_LINE = re.compile(r"[ \t]*(?:(?:name|description|title|tags|keywords|summary)[ \t]*:|#{1,6}[ \t])", re.I)
# ... and in any other line the bare noun is a topic too unless the line asks to make, spread or run one ("write a
# keylogger that mails the keystrokes", "deploy the ransomware to every share"): an incident-response guide's
# "Ransomware encrypting production servers | SEV1" or "2. Identify ransomware variant" names the threat it meets
# (the eleventh blind check's incident-response skill, rejected as malware before).
_MAKES = re.compile(r"\b(?:write|writes|writing|create|build|make|develop|code|implement|compile|craft|generate|deploy|install"
                    r"|spread|drop|plant|launch|run|execute|turn\s+\w+\s+into)\b(?![^\n]{0,20}\b(?:detect|scan|against|remov))"
                    r"[^\n.;:|]{0,60}$", re.I)


def _unsafe(doc: SkillDoc, out: list[Finding]) -> None:
    if not doc.text:
        return
    low = doc.low
    for rule in _UNSAFE_RULES + (_ENV_PAYLOAD,):
        if not any(n in low for n in rule.needles):
            continue
        for m in rule.pattern.finditer(doc.text):
            if rule.guarded and cautioned(doc, m.start(), m.end()):
                continue
            if m.groupdict().get("noun") and (_TOPIC_LINE.match(doc.text, doc.line_at(m.start())[0])
                                               or not _MAKES.search(doc.text, doc.line_at(m.start())[0], m.start())):
                continue
            out.append(Finding(rule.kind, rule.reason, clip(m.group(0)), doc.line_no(m.start()), doc.path))
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
            if cautioned(doc, m.start(), m.end()):
                continue
            out.append(Finding(UNSAFE, _CRED_READ.reason, clip(m.group(0)), doc.line_no(m.start()), doc.path))


def _actionable(skill: ParsedSkill) -> bool:
    if skill.required_bins or skill.any_bins or skill.install:
        return True
    if any(is_program(f.path, f.text) for f in skill.files):
        return True
    known = _COMMON_CLIS | set(skill.tools)
    own = own_names(skill)
    if any(_runnable(block, known) and not _installs_itself(block, own) for block in skill.code_blocks):
        return True
    for m in _INLINE_CODE.finditer(skill.body):
        if m.group(1) in known:
            return True
    # Plain numbered or bulleted steps naming tools, commands, files or formats (skill_steps).
    if skill_steps.has_concrete_steps(skill.body):
        return True
    # A skill that keeps its procedure in reference documents (SKILL.md routes to references/*.md, which
    # hold the code): their runnable blocks count, at least REFERENCE_BLOCKS of them, so the one install
    # line a guide often carries does not make a persona actionable.
    blocks = 0
    for f in skill.files:
        if f.text and _reference_document(f.path, skill.skill_md_path):
            blocks += sum(_runnable(block, known) for block in markdown.code_blocks(f.text))
            if blocks >= REFERENCE_BLOCKS:
                return True
    return False


def _runnable(block: dict, known: set[str]) -> bool:
    """A code block in a runnable language, or without a language but opening with a prompt or a known command."""
    lang = block.get("lang", "")
    if lang in _RUNNABLE_LANGS:
        return True
    if not lang:
        for raw in block.get("code", "").split("\n"):
            line = raw.strip()
            if line:
                return (line.startswith("$ ") or line.split(maxsplit=1)[0] in known or bool(_HTTP_REQUEST_LINE.match(line))
                        or bool(_TOOL_CALL_LINE.fullmatch(line)))
    return False


# A line that installs a skill or its package by name, or fetches a skill's files into an agent's skills folder.
_INSTALL_LINE = re.compile(
    r"^(?:\$\s+)?(?:sudo\s+)?(?:(?:npm|pnpm|yarn|bun)\s+(?:i|install|add)|pip3?\s+install|pipx\s+install|uv\s+(?:pip\s+install|tool\s+install)"
    r"|npx\s+(?:-y\s+)?(?:clawhub|skills)\S*\s+(?:install|add)|clawhub\s+install|openclaw\s+skills?\s+install|git\s+clone"
    r"|claude\s+plugins?\s+install)\s+(?P<target>.+)$", re.I)
_SKILLS_FOLDER = re.compile(r"[/\\]skills[/\\]|\bSKILL\.md\b")


def _installs_itself(block: dict, own: frozenset[str]) -> bool:
    """A block whose every command installs this skill (`npm install moltlang`, `clawhub install moltlang`, a
    `curl` of its SKILL.md into ~/.moltbot/skills/): getting the skill is not a procedure it teaches."""
    lines = [ln.strip() for ln in block.get("code", "").split("\n") if ln.strip() and not ln.strip().startswith("#")]
    if not lines or not own:
        return False
    for line in lines:
        m = _INSTALL_LINE.match(line)
        if m and any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", m.group("target").lower()) for name in own):
            continue
        if not m and _SKILLS_FOLDER.search(line):
            continue
        return False
    return True


def _reference_document(path: str, skill_md_path: str) -> bool:
    """A Markdown file of the skill other than SKILL.md and the package's own papers (README, changelog,
    licence ...), which describe the package rather than how to do the task."""
    name = path.rsplit("/", 1)[-1]
    stem, _, ext = name.rpartition(".")
    if ext.lower() not in _MARKDOWN_EXTS or path == skill_md_path or name.lower() == "skill.md":
        return False
    return stem.lower() not in _PACKAGE_PAPERS


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
