"""Private-resource verdicts of the skill filters, Django-free: what a public task cannot have.

A skill is private when it needs secrets or API keys, hosts on private networks, or a (paid)
account or login. The rules keep false positives low, simply and explainably:

* Secrets: env vars the skill declares as required count when any name part is KEY, TOKEN,
  SECRET, PASSWORD, CREDENTIAL or AUTH; names only used in the body (`$FOO_TOKEN`, `export
  FOO_API_KEY=`) need a clearer secret shape, so BUY_TOKEN or SORT_KEY do not count.
* Required vs optional (`skill_requirements`): requirements stated only in prose ("Needs env:
  X", "API key (required)") count too; a credential said to be optional, or any credential of a
  skill with a no-key path ("free mode", "no API key required"), is recorded but not private.
  `requirements(skill)` returns them all, with where each is stated.
* Secret-named settings given a placeholder in a config block or .env file (`"CLIENT_SECRET": "your-..."`)
  count as used variables.
* Hosts on the user's own network (`skill_private_hosts`): private-network URLs, loopback URLs unless
  the skill starts the server itself (one on a login redirect line is a sign-in), devices given by
  address, and a device the prose says to share a network with.
* Account dependence needs dependence wording (requires, need, must, ... required) or a
  Requirements/Prerequisites section, and no negation ("no account needed"); a `<tool> login`
  command in a code block, or a declared variable naming an account (X_TENANT_ID, X_EMAIL), is one too;
  so is a required one holding the address of the user's own service (`skill_declared_env`).
  The same in Chinese and Japanese: an account or login word with a requirement word ("需要登录",
  "アカウントが必要"), a QR-code sign-in ("扫码登录"), or an account pairing step ("完成账号配对").
* The user's own mailbox or chats on their Mac (Mail.app, Messages: scripting them, their stores under
  ~/Library, or the app named as what the skill works on) are accounts a task cannot have.
* Paying per call: a skill that spends from the user's wallet (x402 or micropayments, "fund your
  wallet", "paid via x402") needs money a task cannot have, unless a wallet is said to be optional
  or a free mode exists (`skill_payments`).
"""
from __future__ import annotations

import re

from facet_site.lib import skill_declared_env, skill_payments, skill_private_hosts, skill_requirements
from facet_site.lib.skill_findings import PRIVATE, Finding, SkillDoc, clip, is_program, line_of, own_names, skill_md_docs
from facet_site.lib.skill_requirements import Requirement
from facet_site.lib.skillformat import ParsedSkill

_SECRET_PARTS = frozenset({"KEY", "APIKEY", "TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASS",
                           "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH", "OAUTH", "COOKIE", "JWT", "PAT"})
# Variables every shell sets itself: `$PWD` is the working directory, not a password.
_SHELL_VARIABLES = frozenset({"PWD", "OLDPWD"})
_SECRET_SUFFIXES = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_STRONG_SECRET_PARTS = frozenset({"SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY",
                                  "ACCESSTOKEN", "AUTHTOKEN", "PAT", "JWT", "COOKIE", "PRIVATEKEY"})
_NOT_SECRET_TOKEN_PREFIXES = frozenset({"BUY", "SELL", "INPUT", "OUTPUT", "IN", "OUT", "FEE", "SWAP", "FROM", "TO", "BASE",
                                        "QUOTE", "NATIVE", "MAX", "MIN", "NUM", "TOTAL", "COUNT", "LIMIT", "TARGET",
                                        "SOURCE", "DEST", "PAYMENT", "REWARD", "STAKE", "GAS", "WRAPPED", "ERC20", "SPL"})
_NOT_SECRET_KEY_PREFIXES = frozenset({"SORT", "PRIMARY", "PARTITION", "CACHE", "IDEMPOTENCY", "PUBLIC", "PUBLISHABLE",
                                      "ROUTING", "LOOKUP", "HASH", "MAP", "DICT", "REDIS", "OBJECT", "S3", "FOREIGN",
                                      "UNIQUE", "DEDUP", "GROUP", "MESSAGE", "SHORTCUT", "HOT", "KEYBOARD",
                                      # ids some APIs call keys (Feishu's image_key and file_key)
                                      "IMAGE", "FILE", "FOLDER", "FIELD", "RECORD", "ROW", "ITEM", "NODE"})
_EXPORT = re.compile(r"export\s+([A-Z][A-Z0-9_]*)\s*=")
# Separate patterns with a literal start run far faster than one alternation led by \b.
_ENV_REFS = (
    ("$", re.compile(r"\$\{?([A-Z][A-Z0-9_]{2,})")),
    ("process.env", re.compile(r"process\.env\.([A-Z][A-Z0-9_]+)")),
    ("environ", re.compile(r"environ(?:\.get)?[\[(]\s*[\"']([A-Z][A-Z0-9_]+)")),
    ("getenv", re.compile(r"getenv\(\s*[\"']([A-Z][A-Z0-9_]+)")),
)
# A secret-named setting given a placeholder in a config block or .env file: `"CLIENT_SECRET": "your-client-secret"`,
# `API_TOKEN=<token>`, `SERVICE_KEY: xxx`, `"api_key": "your-api-key"`. The value must read as a stand-in, so a
# documented default does not count.
_CONFIG_SECRET = re.compile(
    r"[\"']?\b([A-Z][A-Z0-9_]{2,})[\"']?\s*[:=]\s*[\"']?"
    r"(?:(?P<addressed>your[-_ ]|<|\{\{|changeme|replace[-_ ]?me)|\.\.\.|x{3,}|sk-\.\.\.|\*{3,})",
    re.I,
)
# Placeholders for a key in commands; literal-led pieces (matched on lowercased text where
# case does not matter) keep the scan fast.
_PLACEHOLDERS = (
    (True, "your_", re.compile(r"(?<![a-z0-9])your_[a-z0-9_]*(?:api_?key|token|secret|password)\b")),
    (True, "my_", re.compile(r"(?<![a-z0-9])my_[a-z0-9_]*(?:api_?key|token|secret|password)\b")),
    (True, "<", re.compile(r"<\s*(?:your[-_ ])?(?:api[-_ ]?key|token|secret|access[-_ ]token)\s*>")),
    # ... and a key of the service's own shape with its secret part left out: `Bearer clawk_xxx`, `Bearer sk-...`
    (True, "bearer", re.compile(r"bearer\s+(?:<[^>\n]+>|your[\w-]*|\{\{[^}\n]+\}\}|[a-z0-9]*[_-]?(?:x{3,}|\.{3}|…)(?![\w.]))")),
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
# "account" as a verb or in a phrase ("must account for", "take into account"; the eleventh blind check's security rules)
_ACCOUNT_VERB = re.compile(r"\s+for\b")
# `rbw login`, `$ gkeep login you@example.com`, `gh auth login`, `sudo tailscale login`; not a comment
_LOGIN_COMMAND = re.compile(r"^\s*(?:\$\s+)?(?:sudo\s+)?[A-Za-z][\w.-]*\s+(?:auth\s+)?login\b(?![^\n]*--help)")
# The same command in an inline code span, on a line that orders it or says it is needed
_LOGIN_SPAN = re.compile(r"`(?:\$\s+)?(?:sudo\s+)?[A-Za-z][\w.-]*\s+(?:auth\s+)?login\b[^`\n]*`")
_LOGIN_ORDER = re.compile(r"\b(?:run|first|make\s+sure|must|before|prerequisites?|requires?|required|needs?|completed|once)\b", re.I)
# Chinese and Japanese account dependence: no word boundaries and no "a", so a requirement word and an
# account noun close together, either way round, on one line; a negation there ("无需登录") or a
# question ("需要登录吗？") is none.
_CJK_ACCOUNT_NOUN = r"(?:账号|帐号|账户|帐户|帳號|帳戶|帳号|登录|登入|登陆|登錄|アカウント|ログイン|サインイン)"
_CJK_ACCOUNT = re.compile(
    rf"(?:需要|必须|必需|务必|要求|须先|必要|必須|请先|請先|先)[^\n。！!？?]{{0,12}}?{_CJK_ACCOUNT_NOUN}"
    rf"|{_CJK_ACCOUNT_NOUN}[^\n。！!？?]{{0,8}}?(?:配对|配對|绑定|綁定|授权|授權|連携|连携|が必要|が必須|してください)"
    r"|(?:扫码|掃碼|扫描二维码|QR\s?コードで)\s?(?:登录|登入|ログイン)"
)
_CJK_NEGATED = re.compile(r"不需要|不必|无需|無需|无须|不用|免登录|免登入|免注册|不要|なし|なしで|任意|可选|可選|オプション")
_CJK_QUESTION = re.compile(r"^[^\n。！!]{0,12}?[吗嗎？?]")
# An account the skill's own command creates ("系统首次使用时，必须先注册总监账号" over `milb-tracker init
# --name ...`, "You must first create an admin account" over `./scripts/add_user.sh`) lives in the
# skill's own local store, not with an outside service. The wording must be about creating, not signing
# in, and the first command of the code block that follows must be the skill's own.
_CREATES_ACCOUNT = re.compile(r"注册|註冊|创建|創建|新建|初始化|作成|登録|\b(?:create|register|set\s+up|add|initiali[sz]e)\b", re.I)
_SIGNS_IN = re.compile(r"登录|登入|登陆|登錄|ログイン|サインイン|\blog(?:ged)?[ -]?in\b|\bsign(?:ed)?[ -]?in\b|\bauth\b|oauth", re.I)
_OWN_SCRIPT = re.compile(r"^(?:\./|scripts/|bin/|\{baseDir\}|\$\{?(?:baseDir|SKILL_DIR)\b)")
_RUNNER = frozenset({"python", "python3", "node", "bash", "sh", "uv", "npx", "bun", "deno", "ruby", "php"})
_PAID_BEFORE = re.compile(r"\b(?:paid|premium|pro|plus|business|enterprise)\s+$")
_REQUIRE_BEFORE = re.compile(
    r"\b(?:requires?|need(?:s|ed)?|must\s+have|you'?ll\s+need|must(?:\s+be)?|(?:need|have)\s+to(?:\s+be)?|requires?\s+you\s+to(?:\s+be)?"
    r"|only\s+(?:for|with|on)|exclusive\s+to|available\s+(?:only\s+)?(?:on|with|to|for)"
    # "Requires the Codex CLI, authenticated with your ChatGPT account"
    r"|authenticated\s+(?:with|to|via|using)|(?:signed|logged)\s+in\s+(?:with|to|into|using|via)"
    # "Ensure you have a Zu.lk account or are ready to sign in via Google"
    r"|(?:ensure|make\s+sure)\s+(?:that\s+)?you(?:'ve|\s+have))"
    r"\s+(?:an?\s+|your\s+)?(?:\*{0,2}[\w.-]+\s+){0,3}\*{0,2}$"  # "you need a **Humanod account**"
)
_HEDGED = re.compile(r"\b(?:may|might|could|can|sometimes|occasionally)\s+(?:also\s+)?$")
_DEPENDS_AFTER = re.compile(r"^\)?\s*(?:is\s+|are\s+)?(?:required|needed)\b")
_ONLY_AFTER = re.compile(r"^\s*only\b")
_FIRST_AFTER = re.compile(r"^\s*(?:first|beforehand|before\s+(?:using|running|you\s+start))\b(?!\s*\?)")  # "sign in with your account first"
_NEGATION_AFTER = re.compile(r"^[^.\n]{0,30}\b(?:not\s+(?:required|needed|necessary)|optional|needed\?\s*no)\b", re.I)


def _is_secret_name(name: str, *, declared: bool = False) -> bool:
    """Does an environment variable name look like it holds a secret?

    `declared` names come from requires.env/primaryEnv/envVars: the skill says they must be set,
    so any KEY/TOKEN/SECRET/PASSWORD/CREDENTIAL/AUTH part is enough. Names merely used in the
    body are judged more strictly, so BUY_TOKEN (a token address) or SORT_KEY do not count.
    """
    if name.upper() in _SHELL_VARIABLES:
        return False
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


def _secret_requirements(skill: ParsedSkill, docs: list[SkillDoc]) -> skill_requirements.Requirements:
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
    for setting in skill_declared_env.manifest_settings(skill):
        if setting.required and setting.name not in reported and (setting.secret or _is_secret_name(setting.name, declared=True)):
            reported.add(setting.name)
            found.append(Requirement(setting.name, f"requires secret {setting.name}", setting.evidence, setting.path,
                                     setting.line, "manifest"))
    body = body_doc.text
    if body:
        for m in _EXPORT.finditer(body) if "export" in body else ():
            name = m.group(1)
            if name not in reported and _is_secret_name(name):
                reported.add(name)
                found.append(Requirement(name, f"requires secret {name}", clip(line_of(body_doc, m.start())),
                                         body_doc.path, body_doc.line_no(m.start()), "code"))
        for needle, pattern in _ENV_REFS:
            if needle not in body:
                continue
            for m in pattern.finditer(body):
                name = m.group(1)
                if name not in reported and _is_secret_name(name):
                    reported.add(name)
                    found.append(Requirement(name, f"requires secret {name}", clip(m.group(0)),
                                             body_doc.path, body_doc.line_no(m.start()), "code"))
        for m in _CONFIG_SECRET.finditer(body) if ("=" in body or ":" in body) else ():
            name = m.group(1)
            # A lower-case key (`"api_key": "your-api-key"`, `password=<your-nas-password>`) counts only with a
            # placeholder addressed to the user: `password="..."` is as often a pattern a scanner looks for.
            lower_ok = not name.isupper() and m.group("addressed")
            # camelCase as JSON configs write it: "apiKey": "your-kalibr-api-key" reads as API_KEY
            judged = name if name.isupper() or name.islower() else re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
            if (name.isupper() or lower_ok) and name not in reported and _is_secret_name(judged):
                reported.add(name)
                found.append(Requirement(name, f"requires secret {name}", clip(line_of(body_doc, m.start())),
                                         body_doc.path, body_doc.line_no(m.start()), "code"))
        prose = skill_requirements.prose_requirements(body, path=body_doc.path, first_line=body_doc.first_line)
        # the frontmatter's own words too ("compatibility: Requires ... THIRDWEB_SECRET_KEY"), after the body's
        if fm_doc.text:
            prose += skill_requirements.prose_requirements(fm_doc.text, path=fm_doc.path, first_line=fm_doc.first_line)
        # "Create an API key and save it as `LINEAR_API_KEY`": one requirement, the named one
        named_lines = {r.line for r in prose if r.name != "API key" and _is_secret_name(r.name, declared=True)}
        for req in prose:
            if req.name == "API key" and req.line in named_lines:
                continue
            if req.optional_because and _is_secret_name(req.name, declared=True):
                found.append(req)  # a table's "not required" settles the variable wherever it was found
                continue
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
                found.append(Requirement("API key", "requires an API key or token", clip(body[start:end]),
                                         body_doc.path, body_doc.line_no(start), "code"))
        found.extend(_script_requirements(skill, body, reported))
    companions = [(f.path, f.text) for f in skill.files
                  if f.text and "/" not in f.path and skill_requirements.COMPANION_DOCUMENTS.match(f.path)]
    return skill_requirements.judge(found, texts=[(d.path, d.first_line, d.text) for d in docs], companions=companions)


# A program that cannot run without the variable: Python's `os.environ["X_API_KEY"]` (a KeyError when
# unset) and the shell's `${X_TOKEN:?message}`.
_HARD_READS = (
    ("environ[", re.compile(r"\benviron\[\s*[\"']([A-Z][A-Z0-9_]{2,})[\"']\s*\]")),
    (":?", re.compile(r"\$\{([A-Z][A-Z0-9_]{2,}):?\?")),
    # a helper that stops without it: require_env("STORY_LLM_API_KEY", ...), get_required_env('X_TOKEN')
    ("_env(", re.compile(r"\b(?:require[ds]?|must|ensure|get_required|need)_env\(\s*[\"']([A-Z][A-Z0-9_]{2,})")),
)
# ... or that stops with an error naming it: `sys.exit("X_API_KEY is not set")`, `throw new Error("Set
# X_TOKEN")`, `echo "X_TOKEN missing" >&2; exit 1`.
_EMPTY_TEST = re.compile(r"\[\[?\s*-z\s+[\"']?\$\{?([A-Z][A-Z0-9_]{2,})")
_STOPS = re.compile(r"\b(?:raise|throw|die|sys\.exit|process\.exit|exit|abort|fatal|panic|console\.error)\b|>&2|\bstderr\b")


def _script_requirements(skill: ParsedSkill, body: str, reported: set[str]) -> list[Requirement]:
    """Secrets that a program SKILL.md runs (named there by its path or file name) cannot run
    without. A variable a program merely reads may be one of several modes' keys; these are not."""
    out = []
    for f in skill.files:
        if not f.text or not is_program(f.path, f.text):
            continue
        name_of_file = f.path.rsplit("/", 1)[-1]
        if f.path not in body and not re.search(rf"(?<![\w.-]){re.escape(name_of_file)}\b", body):
            continue
        lines = f.text.split("\n")
        hits: dict[str, int] = {}
        for needle, pattern in _HARD_READS:
            if needle in f.text:
                for m in pattern.finditer(f.text):
                    hits.setdefault(m.group(1), f.text.count("\n", 0, m.start()))
        for i, line in enumerate(lines):
            if _STOPS.search(line):
                for name in re.findall(r"[\"'`]\s*[^\"'`\n]{0,80}?\b([A-Z][A-Z0-9_]{2,})\b", line):
                    hits.setdefault(name, i)
                # ... or under a test that it is empty: `if [ -z "$BOT_TOKEN" ]; then echo "token not found" >&2; exit 1`
                for j in range(max(i - 2, 0), i + 1):
                    for name in _EMPTY_TEST.findall(lines[j]):
                        hits.setdefault(name, j)
        for name, i in sorted(hits.items(), key=lambda kv: kv[1]):
            if name not in reported and _is_secret_name(name):
                reported.add(name)
                out.append(Requirement(name, f"requires secret {name}", clip(lines[i]), f.path, i + 1, "code"))
    return out


def requirements(skill: ParsedSkill) -> skill_requirements.Requirements:
    """The credentials a skill names, required or optional, with where each is stated."""
    if skill.unreadable_reason:
        return skill_requirements.Requirements()
    return _secret_requirements(skill, skill_md_docs(skill))


def private_findings(skill: ParsedSkill, docs: list[SkillDoc], programs: list[SkillDoc], out: list[Finding]) -> None:
    """Append the PRIVATE findings of a skill whose SKILL.md `docs` are (frontmatter, body) and whose
    programs are `programs` (`program_docs`)."""
    for req in _secret_requirements(skill, docs).required:
        out.append(Finding(PRIVATE, req.reason, req.evidence, req.line, req.path))
    skill_private_hosts.host_findings(skill, docs, out)
    own = own_names(skill, binaries=True)
    for doc in docs:
        _accounts(doc, out, own)
        _accounts_cjk(doc, out, own)
    _login_commands(docs[1], out)
    skill_payments.payment_findings(docs, programs, out)
    for doc in docs:
        _cloud_logins(doc, out)
    _personal_stores(docs + programs, out)
    _service_accounts(docs, out)
    out.extend(skill_declared_env.dependencies(skill, docs[0]))


def _login_commands(doc: SkillDoc, out: list[Finding]) -> None:
    """A `<tool> login` or `<tool> auth login` command in a code block (`rbw login`, `gkeep login you@…`,
    `gh auth login`): the skill runs as someone signed in, unless the block's lead-in or the line says
    it is optional."""
    if "login" not in doc.low:
        return
    in_fence, lead_in, last_prose = False, "", ""
    pos = 0
    for line in doc.text.split("\n"):
        if skill_requirements.FENCE_LINE.match(line):
            in_fence = not in_fence
            lead_in = last_prose if in_fence else ""
        elif in_fence:
            m = _LOGIN_COMMAND.match(line)
            if m and not skill_requirements.OPTIONAL.search(line) and not skill_requirements.OPTIONAL.search(lead_in):
                out.append(Finding(PRIVATE, "requires an account or login", clip(line.strip()), doc.line_no(pos), doc.path))
                return
        elif line.strip():
            last_prose = line
            # "Make sure you are logged in: run `codex login` first.", "Prerequisite: `gh auth login` completed."
            if _LOGIN_SPAN.search(line) and _LOGIN_ORDER.search(line) and not skill_requirements.OPTIONAL.search(line):
                out.append(Finding(PRIVATE, "requires an account or login", clip(line.strip()), doc.line_no(pos), doc.path))
                return
        pos += len(line) + 1


def _accounts(doc: SkillDoc, out: list[Finding], own: frozenset[str] = frozenset()) -> None:
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
        if word == "account" and (_ACCOUNT_VERB.match(low, m.end()) or low.endswith("into ", 0, m.start())):
            continue  # "must account for these risks", "take into account": the verb, not a login
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
        if need and _HEDGED.search(before, 0, need.start()):
            need = None  # "WSJ may require subscription cookies for some content": a site's paywall, not the skill's need
        required_after = _DEPENDS_AFTER.match(after) or (paid and _ONLY_AFTER.match(after)) or _FIRST_AFTER.match(after)
        in_requirements = doc.markdown and (any(skill_requirements.NEEDS_HEADING.search(h) for h in doc.headings_above(m.start()))
                                            or _under_needs_lead_in(doc, line_start))
        if not (need or required_after or in_requirements):
            continue
        if skill_requirements.NEGATION_BEFORE.search(before) or _NEGATION_AFTER.search(after):
            continue
        if not paid and _created_by_own_command(doc, doc.text[line_start:line_end], line_end, own):
            continue
        reason = "requires a paid account" if paid else "requires an account or login"
        start = m.start() - len(before) + (need.start() if need else paid.start() if paid else len(before))
        end = m.end() + (required_after.end() if required_after else 0)
        out.append(Finding(PRIVATE, reason, clip(doc.text[start:end]), doc.line_no(m.start()), doc.path))


def _under_needs_lead_in(doc: SkillDoc, line_start: int) -> bool:
    """The line at `line_start` is an item of a list whose lead-in line says what follows is needed."""
    if not skill_requirements.LIST_ITEM.match(doc.text[line_start:line_start + 12]):
        return False
    pos = line_start
    for _ in range(12):
        pos, text = doc.previous_line(pos)
        if pos < 0:
            return False
        if not skill_requirements.LIST_ITEM.match(text):
            return bool(skill_requirements.NEEDS_LEAD_IN.search(text))
    return False


def _accounts_cjk(doc: SkillDoc, out: list[Finding], own: frozenset[str] = frozenset()) -> None:
    """Chinese and Japanese account dependence ("使用前需要登录", "アカウントが必要です", "扫码登录",
    "完成账号配对"); the first one found. `own` names the skill's own commands (`own_names`)."""
    if doc.text.isascii():
        return
    for m in _CJK_ACCOUNT.finditer(doc.text):
        line_start, line_end = doc.line_at(m.start())
        around = doc.text[max(line_start, m.start() - 6):min(line_end, m.end() + 6)]
        if _CJK_NEGATED.search(around) or _CJK_QUESTION.match(doc.text, m.end()):
            continue
        if _created_by_own_command(doc, doc.text[line_start:line_end], line_end, own):
            continue
        out.append(Finding(PRIVATE, "requires an account or login", clip(m.group(0)), doc.line_no(m.start()), doc.path))
        return


def _created_by_own_command(doc: SkillDoc, wording: str, line_end: int, own: frozenset[str]) -> bool:
    """Is the account named on the line ending at `line_end` created by the skill's own command? The
    line's wording must be about creating an account (not signing in), and the first command of a code block opening within
    the next four lines must be the skill's own (a declared binary, its name, or a script it ships)."""
    if not _CREATES_ACCOUNT.search(wording) or _SIGNS_IN.search(wording):
        return False
    lines = doc.text[line_end + 1:].split("\n", 12)[:12]
    fence = next((i for i, line in enumerate(lines[:5]) if skill_requirements.FENCE_LINE.match(line)), None)
    if fence is None:
        return False
    for line in lines[fence + 1:]:
        if skill_requirements.FENCE_LINE.match(line) or _SIGNS_IN.search(line):
            return False
        words = line.strip().removeprefix("$").split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "sudo":
            words = words[1:]
        if words and words[0] in _RUNNER and len(words) > 1:
            words = words[1:]
        first = words[0].lower() if words else ""
        return first in own or bool(_OWN_SCRIPT.match(first))
    return False


# The user's own mailbox or chats on their Mac: Mail.app and Messages hold the mail and chat accounts the
# user signed into, which a task cannot have (nor the Mac they run on). Scripting the app, its stores on
# disk, or the app named as what the skill works on all count.
_PERSONAL_STORE = re.compile(
    r'\btell\s+application\s+"(?:Mail|Messages)"|~?/Library/(?:Mail|Messages)\b|\bEnvelope\s+Index\b|\bchat\.db\b'
    r"|\b(?:Apple\s+)?(?:Mail|Messages)\.app\b")


def _personal_stores(docs: list[SkillDoc], out: list[Finding]) -> None:
    """A skill (SKILL.md or a program) that reads or sends the user's own mail or chats through Mail.app
    or Messages."""
    for doc in docs:
        if m := _first_stated(doc, _PERSONAL_STORE):
            out.append(Finding(PRIVATE, "works in the user's own mail or chats (Mail.app, Messages)",
                               clip(line_of(doc, m.start())), doc.line_no(m.start()), doc.path))
            return


# A service that only an account opens, named as where the skill acts for the user: sending or posting
# there ("Send WhatsApp messages", "post to LinkedIn", "发送消息到飞书"), reading the user's own data there
# ("summarize your LinkedIn feed", "search WhatsApp history"), or its bot, docs or app ("飞书机器人",
# "写入飞书文档"). No key need be named: the skill may lean on the agent's own channel to the service,
# which a task cannot have either. Naming the service otherwise ("WhatsApp-style chat videos", "a
# Twitter post converted to a prompt", "trends from public aggregators") is not acting there.
# Names that are also everyday words (threads, signal, teams, lark, luma) count only capitalised.
_ACCOUNT_SERVICES = (
    r"Feishu|DingTalk|WeCom|WeChat|Slack|Discord|Telegram|WhatsApp|iMessage|Notion|Gmail"
    r"|Google\s+(?:Calendar|Drive|Docs|Sheets|Keep|Tasks|Photos)|Outlook|Microsoft\s+(?:365|Teams|To\s+Do)"
    r"|Twitter|X\s*/\s*Twitter|Twitter\s*/\s*X|LinkedIn|Instagram|Facebook|TikTok|Bluesky|Mastodon"
    r"|Todoist|Trello|Asana|Airtable|Dropbox|OneDrive|Evernote|Spotify"
    r"|(?-i:Lark|Signal|Teams|Threads|Luma)"
)
_SERVICE_ACCOUNT = re.compile(
    rf"\b(?:send|post|reply|repl(?:y|ies)\s+to|react|publish|upload|tweet|share|deliver|push|notify)\w*\s+"
    rf"(?:[\w'-]+\s+){{0,5}}?(?:to|on|via|through|in|into)\s+(?:the\s+user's\s+|your\s+|their\s+)?(?:an?\s+)?(?:{_ACCOUNT_SERVICES})\b"
    rf"|\b(?:send|post|read|search|sync|check|fetch|list|summari[sz]e|manage|reply\s+to)\w*\s+(?:[\w'-]+\s+){{0,3}}?"
    rf"(?:{_ACCOUNT_SERVICES})\s+(?:messages?|dms?|inbox|history|chats?|feed|notifications|posts?|tweets?|events?|tasks|pages?|docs?|files)\b"
    rf"|\b(?:your|the\s+user's|user's|my|their)\s+(?:own\s+)?(?:{_ACCOUNT_SERVICES})\s+(?:account|messages?|inbox|feed|calendar|events?"
    rf"|workspace|channels?|chats?|contacts|dms?|notes|tasks|drive|docs|pages?|databases?|boards?|history|profile|followers"
    rf"|timeline|bot|app|library|playlists?)\b"
    r"|(?:发送|发|推送|同步|写入|读取|上传)[^\n。，,]{0,8}?(?:到|至|给|进)?\s*(?:飞书|钉钉|企业微信|微信|Lark|Slack|Telegram)"
    r"|(?:飞书|钉钉|企业微信)\s*[^\s\n，。,、]{0,4}?(?:机器人|文档|多维表格|群|消息|应用|日历|审批)",
    re.I)


def _service_accounts(docs: list[SkillDoc], out: list[Finding]) -> None:
    """A skill whose stated job is acting in the user's account on a service only an account opens. Only
    what says what the skill is for counts: the frontmatter (name, description), or without one the
    body's opening lines; a step deep in the body ("notify via Telegram" in a cron example) is a side
    feature, and a task can do the main job without it."""
    front, body = docs[0], docs[1]
    if front.text.strip():
        where, limit = front, len(front.text)
    else:
        where, limit = body, sum(len(ln) + 1 for ln in body.text.split("\n")[:12])
    if m := _first_stated(where, _SERVICE_ACCOUNT, end=limit):
        out.append(Finding(PRIVATE, "works in the user's account on a service (messages, posts or documents there)",
                           clip(line_of(where, m.start())), where.line_no(m.start()), where.path))


# A cloud provider's command-line tool set up with the user's credentials: "`aws` CLI configured with
# appropriate IAM permissions", "gcloud authenticated", "AWS credentials". The account is the user's.
_CLOUD_LOGIN = re.compile(
    r"\b(?:aws|gcloud|az|azure|doctl|oci|aliyun|tccli|ibmcloud)`?\s*(?:cli\b)?`?[^\n.;]{0,20}?\b(?:configured|authenticated|logged\s+in|signed\s+in)\b",
    re.I)


def _cloud_logins(doc: SkillDoc, out: list[Finding]) -> None:
    """A cloud CLI set up with the user's credentials, in a Requirements/Prerequisites section or on a
    line that says it is needed (not "Verify the AWS CLI is configured" in a troubleshooting example)."""
    def stated_as_needed(m: re.Match) -> bool:
        return (doc.markdown and any(skill_requirements.NEEDS_HEADING.search(h) for h in doc.headings_above(m.start())[:1])
                or bool(skill_requirements.NEEDED.search(line_of(doc, m.start()))))

    if m := _first_stated(doc, _CLOUD_LOGIN, also=stated_as_needed):
        out.append(Finding(PRIVATE, "requires an account or login", clip(line_of(doc, m.start())), doc.line_no(m.start()), doc.path))


def _first_stated(doc: SkillDoc, pattern: re.Pattern, *, end: int | None = None, also=None) -> re.Match | None:
    """The first match of `pattern` in `doc` (before `end`) that its line does not take back (optional,
    or negated before it: `skill_requirements.hedged`) and that passes `also`, if given."""
    for m in pattern.finditer(doc.text, 0, len(doc.text) if end is None else end):
        if not skill_requirements.hedged(doc.text, m.start()) and (also is None or also(m)):
            return m
    return None
