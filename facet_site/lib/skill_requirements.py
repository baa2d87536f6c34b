"""Credential requirements of a skill, required or optional, Django-free.

`skill_filters` finds the secrets a skill names (declared env vars in the frontmatter, secret-shaped
variables and key placeholders in the body) and hands them here as `Requirement`s; this module adds
the requirements stated only in prose and decides which are really required:

* Prose, in the body and in the frontmatter's text fields (description, compatibility): "Needs env:
  OPENAI_API_KEY", "Required environment variables: A_TOKEN, B_SECRET", "Requires a thirdweb API key
  (THIRDWEB_SECRET_KEY environment variable)",
  "API key (required)", "requires an API key", "you'll need a personal access token",
  "an API key is required", "create an API key", "you must set `NOTION_TOKEN`", "save it as
  `LINEAR_API_KEY`". A negation on the line ("no API key required") is not a requirement.
* The same in Chinese, Japanese, Spanish, Portuguese, French and German ("需要设置 `X_API_KEY`",
  "申请 API Key", "`X` の設定が必要です", "necesitas una clave de API"), with their negations
  ("无需 API Key", "sin clave") and optional words ("可选", "opcional", "facultatif").
* Tables: a Markdown table with a "Required" (or "Mandatory") column lists a variable as required
  when its cell says yes, required, true or a check mark (a qualifier in brackets may follow: "Yes
  (trading)"), and as optional when it says no or optional (which then holds for every other mention
  of the variable).
* Optional: the requirement's line, or any line that names the same variable, says optional,
  "if you have", "if available/set/provided", "not required", "for higher rate limits" ... ; for a
  mention inside a code block, also the line leading into the block, when it is about a key
  ("With an API key (for higher limits):"). An unnamed key ("get your API key at ...") is optional
  when a line about a key says so and none says a key is needed.
* A no-key path: the skill says it works without a key anywhere ("free mode", "no API key
  needed", "works without an API key", "keyless", "no signup"); then no credential is required.
  A line that replaces the key with payment ("keyless, just pay per call") is no such path.

Only required credentials make a skill "private"; every requirement is recorded with where it is
(`path`, 1-based `line`), where it came from (frontmatter, code, prose) and whether a no-key path
exists, and shown on the skill page.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

__all__ = ["Requirement", "Requirements", "judge", "prose_requirements", "hedged", "OPTIONAL", "NO_KEY_PATH", "FENCE_LINE"]

OPTIONAL = re.compile(
    r"\b(?:optional(?:ly)?|if\s+you\s+(?:have|want|prefer)|if\s+(?:available|set|provided|present|configured|needed)"
    r"|not\s+(?:required|needed|necessary|mandatory)|for\s+(?:higher|better|increased)\s+(?:rate\s+)?limits?"
    r"|to\s+unlock|recommended\s+but|can\s+be\s+omitted|falls?\s+back|opcional|facultati(?:f|ve)|optionnel(?:le)?)\b"
    # one feature's extra key, not the skill's: "Syncing to Notion requires an additional API key",
    # "Notion 同步需要额外配置 API key" (the ninth blind check's journal skill)
    r"|\b(?:sync(?:ing)?|exports?|exporting|uploads?|uploading|notifications?|integrations?|backups?|publishing)\b"
    r"[^.\n]{0,40}?\b(?:needs|requires|uses)\s+(?:an?\s+)?(?:additional|extra|separate)\b"
    # Chinese and Japanese have no word boundaries to anchor on
    r"|可选|选填|非必需|非必须|不是必须|不设置也|如果(?:你)?有|若有|任意|オプション|省略可"
    r"|(?:同步|推送|通知|导出|上传|备份|集成|发布)(?:功能)?[^。\n]{0,6}?(?:需要|需)额外",
    re.I,
)
NO_KEY_PATH = re.compile(
    r"\b(?:free\s+mode|no[- ]key\s+mode|keyless|works?\s+without\s+(?:an?\s+|any\s+)?(?:api\s+)?(?:key|token|account)s?"
    r"|no\s+(?:api\s+)?(?:key|token)s?\s+(?:is\s+|are\s+)?(?:required|needed|necessary)"
    r"|(?:requires|needs)\s+no\s+(?:api\s+)?(?:key|token)s?|without\s+(?:an?\s+|any\s+)?api\s+keys?"
    r"|no\s+sign[- ]?up|no\s+registration"
    r"|sin\s+clave(?:\s+de)?\s+API|no\s+(?:se\s+)?(?:necesita|requiere)\s+(?:una\s+|ninguna\s+)?clave|sans\s+clé"
    r"|ohne\s+API-?Schlüssel|kein(?:en)?\s+API-?Schlüssel)\b"
    r"|(?:无需|无须|不需要|不用)\s*(?:任何\s*)?(?:API\s?-?Key|密钥|秘钥|注册|登录|账号)|免费模式|免注册|免密钥|APIキー(?:は)?不要|登録不要",
    re.I,
)
_NEGATED = re.compile(r"\b(?:no|not|without|never|don'?t|doesn'?t)\b", re.I)
# "Keyless: no API keys needed, just pay and use" (x402): the key is replaced by payment, not waived.
_PAID_INSTEAD = re.compile(r"\b(?:pay|pays|paid|payments?|micropayments?|x402)\b", re.I)
_FREE = re.compile(r"\bfree\b", re.I)
_KEY_NOUN = r"(?:api[ _-]?keys?|access[ _-]tokens?|auth(?:entication)?[ _-]tokens?|secret[ _-]keys?|bearer\s+tokens?|personal\s+access\s+tokens?)"
# An unnamed key ("get your API key at ...") is optional where a line naming a key says so ("With
# an API key (for higher limits):") and no line naming a key says it is needed.
_KEY_NOUN_ANY = re.compile(_KEY_NOUN + r"|\bapi\s?-?key\b", re.I)
# "If you have a `MOLTDJ_API_KEY` saved, skip to Step 4": where to pick up once the key is had, not a
# key one can do without.
_RESUMES = re.compile(r"\bif\s+you\s+(?:already\s+)?have\b[^.\n]{0,80}?\b(?:saved|stored|already)\b|\bskip\s+(?:to|ahead|straight)\b", re.I)
# A free way to use what else is paid for: "free tier", "free plan", "free tools", a pricing table's
# "| **FREE** | $0/mo |" row. Beside a licence key (HEFESTO_LICENSE_KEY) the key unlocks paid features
# and the free tier does the work; beside a wallet (skill_payments) nothing need be paid.
FREE_TIER = re.compile(r"\bfree\s+(?:tier|plan|version|edition|mode|tools?)\b|^\s*\|\s*\**\s*free\s*\**\s*\|\s*\$?\s*0\b",
                       re.I | re.M)
_LICENSE_NAME = re.compile(r"LICEN[CS]E", re.I)
# The agent gets the key by registering itself: a registration call (`curl -X POST https://…/agents/register`) with,
# within a few lines, a response that holds the key (`"api_key": "…"`). Nothing of the user's is needed for it.
_REGISTRATION = re.compile(r"https?://[^\s\"'`]{1,200}?/(?:agents?/|v\d/)*(?:register|signup|sign-up|sign_up|enroll|onboard)\b"
                           r"(?![^\n]{0,80}\b(?:your|the\s+user'?s)\s+(?:email|phone|card|account)\b)", re.I)
_KEY_IN_RESPONSE = re.compile(r"[\"'](?:api_?key|apiKey|access_?token|accessToken|agent_?token|token)[\"']\s*:", re.I)
_REGISTRATION_LINES = 25
# The one vocabulary of need, for credentials here and for accounts and logins in skill_private: a word
# that says something is needed; the words of a heading (or a list's lead-in) over what a skill
# needs; a line ending in a colon that leads into such a list ("**You'll need:**", "Required:").
NEEDED = re.compile(r"\b(?:required|requires?|mandatory|must|needs?|needed|prerequisites?)\b", re.I)
_NEEDS_WORDS = (r"prerequisites?|requirements?|before\s+you\s+(?:start|begin)|what\s+you(?:'ll|\s+will)?\s+need"
                r"|前置条件|前提条件|准备工作|依赖")
NEEDS_HEADING = re.compile(_NEEDS_WORDS, re.I)
NEEDS_LEAD_IN = re.compile(rf"(?:you(?:'ll|\s+will)?\s+need|required|{_NEEDS_WORDS})[^\n]{{0,20}}?[:：]\s*(?:\*\*)?\s*$", re.I)
# A negation just before a requirement or an account word, in its clause: "no account needed", "free, without a wallet".
NEGATION_BEFORE = re.compile(r"\b(?:no|not|without|free|never|don'?t|doesn'?t|isn'?t)\b[^.\n]{0,40}$", re.I)


def hedged(text: str, pos: int) -> bool:
    """Whether what is said at `pos` is taken back on its own line: the line says optional, or a negation
    opens the clause before it ("no Telegram account needed", "works without Mail.app")."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return bool(OPTIONAL.search(text, start, len(text) if end < 0 else end) or NEGATION_BEFORE.search(text[start:pos]))

FENCE_LINE = re.compile(r"^\s{0,3}(?:```|~~~)")
_FENCE_OPEN = re.compile(r"^\s{0,3}(?:```|~~~)\s*([\w+-]*)")
_PROSE_ENV = re.compile(
    r"\b(?i:needs?|requires?|required)\s+(?i:env(?:ironment)?(?:\s+var(?:iable)?s?)?)\s*:\s*"
    r"((?:`?[A-Z][A-Z0-9_]{2,}`?(?:\s*,\s*|\s+and\s+|\s+)?)+)"
)
_PROSE_KEY = re.compile(
    rf"\b{_KEY_NOUN}\s*\(\s*(?:required|mandatory)\s*\)"
    rf"|\b(?:requires?|needs?|you(?:'ll|\s+will)?\s+need|must\s+(?:have|set|provide|supply))\s+(?:an?\s+|your\s+|the\s+)?"
    rf"(?:[\w.-]+\s+){{0,2}}?{_KEY_NOUN}\b"
    rf"|\b{_KEY_NOUN}\s+(?:is|are)\s+(?:required|mandatory|needed)\b"
    rf"|\b(?:create|generate|obtain|get|grab|request|copy|paste)\s+(?:an?\s+|your\s+(?:own\s+)?|the\s+)?(?:[\w.-]+\s+){{0,2}}?{_KEY_NOUN}\b"
    # a heading over the steps that get one: "## Getting Your API Key", "### Obtaining an access token"
    rf"|^\s{{0,3}}#{{1,6}}\s+(?:\W\s*)?(?:\d+[.)]\s+)?(?:get(?:ting)?|obtain(?:ing)?|creat(?:e|ing)|generat(?:e|ing))\s+"
    rf"(?:an?\s+|your\s+(?:own\s+)?|the\s+)?(?:[\w.-]+\s+){{0,2}}?{_KEY_NOUN}\s*$",
    re.I,
)
# "you must set `NOTION_TOKEN`", "make sure to export X", "save it as `X`": a named variable the
# skill cannot run without (the caller keeps only secret-shaped names).
_PROSE_SET = re.compile(
    r"\b(?i:must|need\s+to|have\s+to|required\s+to|be\s+sure\s+to|make\s+sure\s+(?:to|you)|remember\s+to)\s+"
    r"(?i:first\s+)?(?i:set|export|provide|configure|define|add)\s+(?i:the\s+|your\s+|an?\s+)?`?\$?([A-Z][A-Z0-9_]{2,})`?"
    r"|\b(?i:save|store|put|set|export|add)\s+(?i:it|this|the\s+(?:key|token|secret))\s+(?i:as|in|to|into)\s+"
    r"(?i:the\s+|your\s+|an?\s+)?(?i:env(?:ironment)?\s+var(?:iable)?\s+)?`?\$?([A-Z][A-Z0-9_]{2,})`?"
)
# A setup step that opens with the imperative: "- Export `PLAID_CLIENT_ID`, `PLAID_SECRET`, and
# `PLAID_ENVIRONMENT`", "2. Set `NOTION_TOKEN`". Every name of the list counts (the caller keeps the
# secret-shaped ones); "Set `A` or `B`" names alternatives and is left to the other rules.
_PROSE_SET_STEP = re.compile(
    r"^\s*(?:[-*+]\s+|\d{1,2}[.)]\s+)?(?:\*\*)?(?i:export|set)(?:\*\*)?\s+"
    r"((?:`\$?[A-Z][A-Z0-9_]{2,}`(?:\s*,\s*(?:and\s+)?|\s+and\s+)?)+)"
)
# A requirement word and a variable name in one clause: "Requires network access and a thirdweb API key
# (THIRDWEB_SECRET_KEY environment variable)", as the Agent Skills `compatibility` field says it. The
# name must end as a credential's does (_KEY, _TOKEN, _SECRET, _PASSWORD): "Requires Python 3.10 and
# FFMPEG" names none, and YOUR_API_KEY is a placeholder, not a variable.
_PROSE_NEEDS_NAME = re.compile(
    r"\b(?i:requires?|needs?|you(?:'ll|\s+will)?\s+need)\b[^.;\n]{0,100}?`?\$?\b(?!YOUR_|MY_)([A-Z][A-Z0-9_]*_(?:API_?KEY|KEY|TOKEN|SECRET(?:_KEY)?|PASSWORD))\b"
)
# The name first, then the word: "Node.js 18+. OPENAI_API_KEY required.", "`SVC_TOKEN` is required";
# not a requirement qualified by what it is for, which other lines judge.
_PROSE_NAME_NEEDED = re.compile(
    r"`?\$?\b(?!YOUR_|MY_)([A-Z][A-Z0-9_]*_(?:API_?KEY|KEY|TOKEN|SECRET(?:_KEY)?|PASSWORD))\b`?\s+(?:is\s+|are\s+)?(?i:required|needed|mandatory)\b"
    r"(?!\s+(?i:for|to|when|if|only|with|by)\b)"  # "GIPHY_API_KEY required for `--source giphy`": one mode's key
)
# What the skill says a credential must hold, or that it checks is there: "`HOSPITABLE_TOKEN` must contain
# the token body only", "Verify `SVC_API_KEY` is available in the environment". Both take it as given.
# "... must be set when using --cloud" is one mode's key, which other lines judge.
_PROSE_NAME_MUST = re.compile(
    r"`?\$?\b(?!YOUR_|MY_)([A-Z][A-Z0-9_]*_(?:API_?KEY|KEY|TOKEN|SECRET(?:_KEY)?|PASSWORD))\b`?\s+(?i:must)\s+"
    r"(?i:contain|hold|include|start\s+with|be\s+(?:set|exported|provided|configured|defined|available|present|valid))\b"
    r"(?!\s+(?i:for|when|if|only|with|by|in\s+(?:cloud|remote|server)\s+mode)\b)"
    r"|\b(?i:verify|check|ensure|make\s+sure|confirm)\s+(?i:that\s+)?`?\$?\b(?!YOUR_|MY_)([A-Z][A-Z0-9_]*_(?:API_?KEY|KEY|TOKEN|SECRET(?:_KEY)?|PASSWORD))\b`?"
    r"\s+(?i:is|are)\s+(?i:set|available|exported|present|configured|defined|loaded)\b"
)
# "Check that GITHUB_TOKEN is set, otherwise skip the upload": the check leads to a way on without it.
_WITHOUT_IT = re.compile(r"\b(?:otherwise|else|if\s+not|if\s+(?:it\s+is\s+)?(?:missing|unset|absent))\b[^.;\n]{0,40}?"
                         r"\b(?:skip|fall\s*back|continue|proceed|use\s+the\s+(?:free|public|anonymous)|anonymous)", re.I)
# The same statements in the other languages public skills are often written in (Chinese, Japanese,
# Spanish, Portuguese, French, German): a requirement word and a key noun, or a variable name, close
# together on one line; a negation there ("不需要", "sin", "ohne") means there is none.
_INTL_NEED = (r"(?:需要|必须|必需|必填|请(?:先)?(?:设置|配置|填写|提供)|务必|必要|必須|設定してください"
              r"|necesitas?|requiere|obligatori[oa]|debes|precisa|nécessite|obligatoire|vous\s+devez|il\s+faut"
              r"|benötigt|erforderlich|musst|müssen)")
_INTL_KEY = (r"(?:API\s?-?(?:Key|密钥|キー|Schlüssel)|AccessKey|访问密钥|密钥|秘钥|访问令牌|令牌|アクセストークン"
             r"|clave\s+(?:de\s+)?(?:la\s+)?API|chave\s+(?:de\s+)?API|clé\s+(?:d['’]\s?)?API|token\s+de\s+acceso)")
_INTL_GET = r"(?:申请|获取|注册|创建|生成|取得|発行|obt[eé]n|obtener|crea|crear|obtenez|créez|obtenha|crie|erstellen?|besorgen?)"
_PROSE_KEY_INTL = re.compile(
    rf"{_INTL_NEED}[^\n。！!]{{0,30}}?{_INTL_KEY}|{_INTL_KEY}[^\n。]{{0,12}}?{_INTL_NEED}|{_INTL_GET}[^\n。！!]{{0,30}}?{_INTL_KEY}",
    re.I,
)
_PROSE_SET_INTL = re.compile(
    rf"(?i:{_INTL_NEED})[^\n。]{{0,30}}?`?\$?([A-Z][A-Z0-9_]{{2,}})`?|`?\$?([A-Z][A-Z0-9_]{{2,}})`?[^\n。]{{0,30}}?(?i:{_INTL_NEED})"
)
_NEGATED_INTL = re.compile(
    r"不需要|不必|无需|无须|不用|免(?:费|注册|密钥)|不要|なし|\b(?:sin|sans|ohne|kein(?:e|en)?)\b"
    r"|\bno\s+(?:se\s+)?(?:necesita|requiere|precisa)|\bpas\s+(?:de|besoin)", re.I)
# A line that says what follows is needed and leads into a list ("Required environment variables:",
# "该技能必须在 `.env` 中配置以下核心参数才能激活："): the names in the list's items are requirements.
_LEADS_INTO_LIST = re.compile(r"[:：]\s*(?:\*\*)?\s*$")
# A heading that names the credentials the skill runs with ("## Credentials", "## Authentication",
# "### API keys") or what it needs ("## Prerequisites", "## Requirements", "## Before you start"): the
# secrets listed right under it are what it runs with, unless an item says optional. Not
# "## Environment variables" or "## Configuration": there skills list every variable a tool reads
# (NOMAD_TOKEN beside NOMAD_REGION), needed or not.
_CREDENTIALS_HEADING = re.compile(
    rf"^\s{{0,3}}#{{1,6}}\s+(?:\W\s*)?(?:credentials|authentication|auth|secrets|api\s+keys?|access\s+tokens?|{_NEEDS_WORDS})\s*:?\s*$",
    re.I)
# A heading that names the keys and says they are needed: "## AccessKey priority (must follow)", "### API key (required)".
_KEY_HEADING_NEEDED = re.compile(
    r"^\s{0,3}#{1,6}\s+(?=[^\n]*\b(?:access\s?keys?|api\s?keys?|credentials|secrets|tokens?)\b)(?=[^\n]*\b(?:must|required|mandatory)\b)[^\n]*$",
    re.I)
_CONDITION = re.compile(r"`\s+(?:\(\s*)?(?:if|when|unless|only\s+(?:if|when|for))\b|(?:如果|若|仅当|仅在)", re.I)
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,2}[.)])\s+")
# A line that sets a value: `QQ_TOKEN=...`, `export X_KEY=...`, `api_key: ...`, `"token": ...`.
_SETTING_LINE = re.compile(r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*\s*=|^\s*[\"']?[A-Za-z_][\w.-]*[\"']?\s*:\s")
# A skill's own setup documents beside SKILL.md, at its top level: what they say of a variable SKILL.md
# uses ("# QQ notifications (optional)" above `QQ_TOKEN=` in .env.example) counts for it.
COMPANION_DOCUMENTS = re.compile(r"^(?:readme|install(?:ation)?|setup|configur(?:e|ation)|config)(?:\.[\w-]+)?\.(?:md|markdown)$"
                                 r"|^\.?env\.(?:example|sample|template|dist)$", re.I)
_TABLE_ROW = re.compile(r"^\s*\|(.+)\|\s*$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}")
# The Required column as registries write it, translated ones included: "是否必需", "必填", "必須",
# "필수", "Obligatorio", "Obrigatório", "Erforderlich", "Обязательный".
_REQUIRED_HEADER = re.compile(
    r"^\s*(?:required|mandatory|req\.?|needed|(?:是否)?(?:必需|必须|必填|必要)|必須|필수(?:\s*여부)?|obligatori[oa]|requerid[oa]"
    r"|obrigatóri[oa]|erforderlich|pflicht(?:feld)?|requis|obligatoire|обязательн\w*)\??\s*$", re.I)
# a qualifier in brackets after the word, as the "no" cells have it: "Yes (trading)", "是（交易）"
_YES_CELL = re.compile(r"^\s*(?:\*\*)?(?:yes|y|required|mandatory|true|x|✓|✔|✔️|✅|是|必需|必须|必填|必須|はい|예|필수|s[ií]|sim|ja|oui|да)"
                       r"(?:\*\*)?\s*(?:[(（][^)）]{1,60}[)）])?\s*$", re.I)
_NO_CELL = re.compile(r"^\s*(?:\*\*)?(?:no|n|optional|false|-|—|✗|❌|否|可选|选填|非必需|任意|いいえ|아니오|선택|não|nein|non|нет)"
                      r"(?:\*\*)?\s*(?:[(（].*[)）])?\s*$", re.I)
_NAME = re.compile(r"[A-Z][A-Z0-9_]{2,}")
_EVIDENCE_CHARS = 120


@dataclass(frozen=True)
class Requirement:
    name: str  # the variable, or "API key" for a requirement stated without one
    reason: str  # the private verdict's reason when required
    evidence: str  # the text that states it
    path: str
    line: int  # 1-based; 0 when not tied to a line
    source: str  # frontmatter | code | prose
    required: bool = True
    optional_because: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "path": self.path, "line": self.line, "source": self.source,
                "required": self.required, "evidence": self.evidence, "optional_because": self.optional_because}


@dataclass(frozen=True)
class Requirements:
    items: tuple[Requirement, ...] = ()
    no_key_path: bool = False
    no_key_evidence: str = ""
    no_key_line: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def required(self) -> list[Requirement]:
        return [r for r in self.items if r.required]

    def to_dict(self) -> dict:
        return {"requirements": [r.to_dict() for r in self.items], "no_key_path": self.no_key_path,
                "no_key_evidence": self.no_key_evidence, "no_key_line": self.no_key_line}


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _EVIDENCE_CHARS else text[: _EVIDENCE_CHARS - 1] + "…"


def _lines(text: str) -> list[str]:
    return (text or "").split("\n")


def prose_requirements(body: str, *, path: str, first_line: int) -> list[Requirement]:
    """Requirements stated in the body's prose ("Needs env: X", "API key (required)") and in
    tables with a Required column (a "no" there is returned as an optional requirement). A line
    may yield a named variable and an unnamed "API key" both; the caller, which knows which names
    are secrets, keeps the named one."""
    out: list[Requirement] = []
    required_column = -1  # index of the Required column of the table being read, or -1
    lines = _lines(body)
    quoted_document = False  # inside a ```markdown block: a template shown for other skills, not this one speaking
    for i, line in enumerate(lines):
        if fence := _FENCE_OPEN.match(line):
            quoted_document = not quoted_document and fence.group(1).lower() in ("markdown", "md")
            continue
        if quoted_document:
            continue
        line = line.replace("**", "")  # bold is emphasis, not words: "you need a **Humanod API Key**"
        if row := _TABLE_ROW.match(line):
            cells = row.group(1).split("|")
            if _TABLE_RULE.match(line):
                continue
            # a header only opens a table: under one, a cell may read like it ("必填" says yes to "必填")
            header = [j for j, c in enumerate(cells) if _REQUIRED_HEADER.match(c.strip("*` "))] if required_column < 0 else []
            if header:
                required_column = header[0]
                continue
            if 0 <= required_column < len(cells):
                cell = cells[required_column]
                others = " ".join(c for j, c in enumerate(cells) if j != required_column)
                for name in dict.fromkeys(_NAME.findall(others)):
                    if _YES_CELL.match(cell):
                        out.append(Requirement(name, f"requires secret {name}", _clip(line), path, first_line + i, "prose"))
                    elif _NO_CELL.match(cell):
                        out.append(Requirement(name, f"requires secret {name}", _clip(line), path, first_line + i, "prose",
                                               required=False, optional_because="its table row says it is not required"))
            continue
        required_column = -1
        if _LEADS_INTO_LIST.search(line) or _CREDENTIALS_HEADING.match(line) or _KEY_HEADING_NEEDED.match(line):
            out.extend(_listed_requirements(line, lines[i + 1:i + 16], path, first_line + i + 1))
        for m in _PROSE_SET.finditer(line):
            name = m.group(1) or m.group(2)
            if not _NEGATED.search(line[max(0, m.start() - 30):m.start()]):
                out.append(Requirement(name, f"requires secret {name}", _clip(line), path, first_line + i, "prose"))
        if m := _PROSE_SET_STEP.match(line):
            for name in dict.fromkeys(_NAME.findall(m.group(1))):
                out.append(Requirement(name, f"requires secret {name}", _clip(line), path, first_line + i, "prose"))
        for m in _PROSE_NAME_NEEDED.finditer(line):
            if not _NEGATED.search(line[max(0, m.start() - 30):m.end()]):
                out.append(Requirement(m.group(1), f"requires secret {m.group(1)}", _clip(line), path, first_line + i, "prose"))
        for m in _PROSE_NAME_MUST.finditer(line):
            name = m.group(1) or m.group(2)
            if not _NEGATED.search(line[max(0, m.start() - 30):m.end()]) and not _WITHOUT_IT.search(line, m.end()):
                out.append(Requirement(name, f"requires secret {name}", _clip(line), path, first_line + i, "prose"))
        for m in _PROSE_NEEDS_NAME.finditer(line):
            if not _NEGATED.search(line[max(0, m.start() - 30):m.end()]):
                out.append(Requirement(m.group(1), f"requires secret {m.group(1)}", _clip(line), path, first_line + i, "prose"))
        if "env" in line.lower():
            for m in _PROSE_ENV.finditer(line):
                for name in _NAME.findall(m.group(1)):
                    out.append(Requirement(name, f"requires secret {name}", _clip(line), path, first_line + i, "prose"))
        for m in _PROSE_KEY.finditer(line):
            if _NEGATED.search(line[max(0, m.start() - 30):m.end()]) or _QUESTION.match(line, m.end()):
                continue  # "no API key required", "does not need an API key", a FAQ's "Do I need an API key?"
            out.append(Requirement("API key", "requires an API key (stated in prose)", _clip(m.group(0)), path,
                                   first_line + i, "prose"))
            break
        if not line.isascii() or _INTL_HINT.search(line):
            out.extend(_intl_requirements(line, path, first_line + i, after="\n".join(lines[i + 1:i + 6])))
    return out


def _listed_requirements(lead: str, following: list[str], path: str, first_line: int) -> list[Requirement]:
    """The names in the list under a lead-in line that says they are needed; nothing when the lead-in
    is negated or says optional. Each item is its own evidence, so a "(optional)" there counts."""
    if not (NEEDED.search(lead) or re.search(_INTL_NEED, lead, re.I) or _CREDENTIALS_HEADING.match(lead)):
        return []
    if _NEGATED.search(lead) or _NEGATED_INTL.search(lead) or OPTIONAL.search(lead):
        return []
    out = []
    for j, item in enumerate(following):
        if not item.strip() and not j:
            continue  # a blank line between the lead-in and its list
        if not LIST_ITEM.match(item):
            break
        if _CONDITION.search(item):
            continue  # "`NOMAD_TOKEN` if ACLs are enabled": needed in some setups, which the item names
        names = list(dict.fromkeys(re.findall(r"`\$?([A-Z][A-Z0-9_]{2,})`", item)))
        for name in names:
            out.append(Requirement(name, f"requires secret {name}", _clip(item), path, first_line + j, "prose"))
        # an item naming the key but no variable: "- **Bankr API key** configured at `~/.../config.json`"
        if not names and _KEY_NOUN_ANY.search(item.replace("**", "")) and not OPTIONAL.search(item):
            out.append(Requirement("API key", "requires an API key (stated in prose)", _clip(item), path, first_line + j, "prose"))
    return out


# The clause goes on to a question mark: a FAQ asking, not the skill stating ("需要API Key吗？").
_QUESTION = re.compile(r"[^\n。.!！:：]{0,12}?[吗？?]")
_INTL_HINT = re.compile(r"necesit|requiere|obligat|debes|precisa|nécessite|devez|il faut|benötigt|erforderlich|musst|müssen"
                        r"|clave|chave|clé|Schlüssel|obt[eé]n|obtenez|créez|obtenha|crie|erstell|besorg", re.I)


# "生成密钥" (generate a key) followed by `ssh-key-setup.sh gen`, or "使用Ed25519算法生成身份密钥" (an identity key
# made with Ed25519): a key the skill makes itself, not one to be given
_LOCAL_KEY = re.compile(r"\bssh\b|ssh-key|keygen|\bgpg\b|\bpgp\b|(?<![A-Za-z0-9])(?:ed25519|x25519|secp256k1|curve25519)(?![A-Za-z0-9])"
                        r"|密钥对|鍵ペア", re.I)


def _intl_requirements(line: str, path: str, line_no: int, *, after: str = "") -> list[Requirement]:
    """`after`: the lines that follow, where a key made locally (an SSH or GPG key) shows itself."""
    out = []
    for m in _PROSE_SET_INTL.finditer(line):
        if not _NEGATED_INTL.search(line[max(0, m.start() - 12):m.end()]) and not _QUESTION.match(line, m.end()):
            name = m.group(1) or m.group(2)
            out.append(Requirement(name, f"requires secret {name}", _clip(line), path, line_no, "prose"))
    for m in _PROSE_KEY_INTL.finditer(line):
        if _LOCAL_KEY.search(line) or _LOCAL_KEY.search(after):
            break
        if not _NEGATED_INTL.search(line[max(0, m.start() - 12):m.end()]) and not _QUESTION.match(line, m.end()):
            out.append(Requirement("API key", "requires an API key (stated in prose)", _clip(m.group(0)), path,
                                   line_no, "prose"))
            break
    return out


def judge(found: list[Requirement], *, texts: list[tuple[str, int, str]],
          companions: Sequence[tuple[str, str]] = ()) -> Requirements:
    """Mark each requirement optional or required. `texts` are (path, first line, text) of
    SKILL.md's frontmatter and body, searched for optional wording and a no-key path.
    `companions` are (path, text) of the skill's own setup documents (README.md, INSTALL.md,
    .env.example; `COMPANION_DOCUMENTS`): what they say of a variable SKILL.md uses counts for it,
    but they add no requirement and no no-key path."""
    no_key = ("", 0, "")
    lines: list[tuple[str, int, str]] = []
    # the line that introduces each fenced block ("With an API key (for higher limits):"): what it
    # says holds for every line of the block
    intro: dict[tuple[str, int], str] = {}
    # a comment that heads a group of settings inside a block ("# QQ notifications (optional)"):
    # what it says holds for the settings under it, up to a blank line or the next comment; a comment
    # over a command ("# Create if needed" above a curl line) speaks of the step, not of a key
    group: dict[tuple[str, int], str] = {}
    sources = [(path, first, text, True, True) for path, first, text in texts]
    sources += [(path, 1, text, False, path.lower().endswith((".md", ".markdown"))) for path, text in companions]
    for path, first, text, own, markdown in sources:
        # an .env.example is all settings: read as one block, so its comments head groups too
        in_fence, last_prose, block_intro, heading = not markdown, "", "", ""
        for i, line in enumerate(_lines(text)):
            lines.append((path, first + i, line))
            if own and not no_key[2] and (m := NO_KEY_PATH.search(line)) and (
                    not _PAID_INSTEAD.search(line) or _FREE.search(line)):
                no_key = (path, first + i, _clip(m.group(0)))
            if markdown and FENCE_LINE.match(line):
                in_fence = not in_fence
                block_intro = last_prose if in_fence else ""
                heading = ""
            elif in_fence:
                intro[(path, first + i)] = block_intro
                stripped = line.strip()
                if stripped.startswith(("#", "//")):
                    heading = stripped
                elif not stripped:
                    heading = ""
                elif heading and _SETTING_LINE.match(line):
                    group[(path, first + i)] = heading
            elif line.strip():
                # only a line that leads into what follows ("... (for higher limits):") speaks for it
                last_prose = line if line.rstrip().endswith((":", "：")) and not line.lstrip().startswith("|") else ""
    own_paths = {path for path, _, _ in texts}
    key_lines = [ln for p, _, ln in lines if p in own_paths and _KEY_NOUN_ANY.search(ln)]
    needed = any(NEEDED.search(ln) and not (OPTIONAL.search(ln) or NO_KEY_PATH.search(ln) or _NEGATED.search(ln))
                 for ln in key_lines)
    key_lines_if_optional = [] if needed else key_lines
    items = []
    seen: set[tuple[str, str]] = set()
    # A table that says a variable is not required settles it for its other mentions too.
    said_optional = {r.name: r.optional_because for r in found if r.optional_because}
    named_elsewhere = {r.name for r in found if not r.optional_because}
    registrations = _registrations([ln for p, _, ln in lines if p in own_paths])
    for req in found:
        if (req.name, req.source) in seen and req.name != "API key":
            continue
        if req.optional_because and req.name in named_elsewhere:
            continue  # recorded once, where the variable is used, as optional
        seen.add((req.name, req.source))
        why = said_optional.get(req.name, "")
        if req.name != "API key":
            # a block's intro speaks for the variable only when it is about a key ("With an API key
            # (for higher limits):"), not about a step ("Attach a wallet if needed:")
            mentions = [t for p, n, ln in lines if req.name in ln
                        for t in (ln, intro.get((p, n), "")) if t is ln or _KEY_NOUN_ANY.search(t) or req.name in t]
            mentions += [group[(p, n)] for p, n, ln in lines if req.name in ln and (p, n) in group]
        else:
            mentions = key_lines_if_optional
        own = [ln for p, n, ln in lines if p == req.path and n == req.line]
        for text in own + mentions if not why else ():
            if (m := OPTIONAL.search(text)) and not _RESUMES.search(text):
                why = f"said to be optional: “{_clip(m.group(0))}”"
                break
        if not why and no_key[2]:
            why = f"the skill has a no-key path: “{no_key[2]}” (line {no_key[1]})"
        if not why and (reg := _self_registered(registrations, req.name)):
            why = f"the agent registers itself for the key: “{reg}”"
        if not why and _LICENSE_NAME.search(req.name) and (free := next(
                (ln for p, _, ln in lines if p in own_paths and FREE_TIER.search(ln)), None)):
            # a licence key unlocks the paid tiers; the free tier does the skill's work without one
            why = f"a licence key, and the skill has a free tier: “{_clip(free.strip())}”"
        items.append(replace(req, required=not why, optional_because=why))
    # A variable named both in the frontmatter and in prose: one requirement, the first found.
    return Requirements(items=tuple(items), no_key_path=bool(no_key[2]), no_key_evidence=no_key[2], no_key_line=no_key[1])


def _registrations(own: list[str]) -> list[tuple[str, list[str]]]:
    """(address, the lines around it) for each registration the skill's own text shows the agent making, with a
    response that holds the key within `_REGISTRATION_LINES` lines."""
    out = []
    for i, line in enumerate(own):
        if (m := _REGISTRATION.search(line)):
            window = own[max(0, i - 3):i + _REGISTRATION_LINES]
            if any(_KEY_IN_RESPONSE.search(w) for w in window):
                out.append((m.group(0), window))
    return out


def _self_registered(registrations: list[tuple[str, list[str]]], name: str) -> str:
    """The registration address that gives the key `name`: an unnamed "API key", a variable named within the
    registration's lines, or one whose first word is in the address (MOLTBOOK_API_KEY for moltbook.com)."""
    prefix = name.split("_")[0].lower()
    for address, window in registrations:
        if name == "API key" or any(name in w for w in window) or (len(prefix) > 3 and prefix in address.lower()):
            return _clip(address)
    return ""
