"""Are a skill's written steps something an agent can carry out in a terminal? Django-free.

A skill without code blocks can still be actionable: "1. Parse each line with awk and keep the
third field. 2. Write the totals to totals.csv." names a tool and a file, which is enough for an
agent. `concrete_steps(body)` returns the numbered or bulleted lines (outside fenced blocks) that
name at least one concrete thing:
* a command-line tool by name (awk, jq, ffmpeg, git, curl, sqlite3 ... in `TOOLS`),
* a command, path or function name in backticks (not a bare word: "the `doppel` skill"),
* a file name with an extension (report.csv, config.yaml, main.py) or a path (./out/, ~/data),
  also where it touches Chinese or Japanese text ("保存为report.csv"),
* a data or file format (CSV, JSON, YAML, PDF, SQL ...).
List items are numbered or bulleted the ways registries write them, Chinese and Japanese markers
included ("1、", "１．", "（1）", "①", "一、", "第1步："), since many public skills are written so.
`has_concrete_steps` asks for at least `MIN_STEPS` of them, so one stray "save it as a PDF"
in a persona's advice does not count; persona text ("You are a friendly coach") and chat-only
advice ("Be warm", "Ask follow-up questions") name none of these.
"""
from __future__ import annotations

import re

__all__ = ["TOOLS", "MIN_STEPS", "concrete_steps", "has_concrete_steps"]

MIN_STEPS = 2
# Tools whose names are not everyday English words ("find", "make", "sort", "head", "cat" are left
# out: "make sure to ..." or "sort by priority" is advice, not a step).
TOOLS = frozenset({
    "awk", "gawk", "sed", "grep", "rg", "jq", "yq", "xargs", "uniq", "wc", "curl", "wget", "git",
    "gh", "npm", "npx", "pnpm", "yarn", "pip", "pip3", "pipx", "uv", "python", "python3", "node", "deno", "bun",
    "docker", "kubectl", "helm", "terraform", "ansible", "ffmpeg", "ffprobe", "imagemagick", "pandoc",
    "sqlite3", "psql", "mysql", "redis-cli", "openssl", "ssh", "scp", "rsync", "tar", "unzip", "gzip", "cargo",
    "rustc", "gcc", "clang", "cmake", "mvn", "gradle", "dotnet", "ruby", "gem", "perl", "php", "composer", "bash",
    "zsh", "pytest", "ruff", "eslint", "prettier", "tsc", "aws", "gcloud", "az", "brew", "apt-get",
    "chmod", "mkdir", "ls", "diff", "csvkit", "csvcut", "xmllint", "pdftotext", "exiftool",
    "yt-dlp", "pandas", "numpy", "duckdb", "crontab", "systemctl", "journalctl", "nmap",
})
# List markers as registries write them, Chinese and Japanese ones included: "1." "1)" "- " "Step 2:",
# "1、" "１．" "（1）" "(1)" "①" "一、" "第1步：". A CJK marker needs no space after it.
_STEP = re.compile(
    r"^\s{0,6}(?:(?:\d{1,3}[.)]|[-*+•]|step\s+\d+:?)\s+"
    r"|(?:[0-9０-９]{1,3}\s?[、．.]|[(（][0-9０-９一二三四五六七八九十]{1,3}[)）]|[\u2460-\u2473\u2776-\u277f]"
    r"|[一二三四五六七八九十]{1,3}[、.．]|第\s?[0-9一二三四五六七八九十]{1,3}\s?[步点條条][：:、.]?)\s*)"
    r"(?P<text>\S.*)$", re.I)
_FENCE = re.compile(r"^\s{0,3}(?:```|~~~)")
# Spans paired left to right: searching for "two or more characters between backticks" would also
# match the prose between two one-character spans ("`冰` (Ice) vs. `火`" holds " (Ice) vs. ").
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_FILE = re.compile(r"(?<![\w/])(?:[\w.-]+/)*[\w-]+\.(?:csv|tsv|json|jsonl|ya?ml|toml|xml|html?|md|txt|log|py|sh|js|ts|sql|db"
                   r"|pdf|png|jpe?g|svg|gif|mp3|mp4|wav|xlsx?|docx?|pptx?|ini|conf|cfg|env|parquet|zip|tar|gz)(?![A-Za-z0-9])", re.I)
_PATH = re.compile(r"(?:^|\s)(?:\./|~/|/(?:tmp|etc|var|usr|home|data|opt)/)\S*")
# ASCII boundaries: in Chinese or Japanese text a name or format touches the characters around it
# ("使用ffmpeg把视频转成MP4", "jqでJSONを整形"), and Python's \b and \w count those characters as letters.
_FORMAT = re.compile(r"(?<![A-Za-z0-9])(?:CSV|TSV|JSON|JSONL|YAML|TOML|XML|HTML|PDF|PNG|SVG|SQL|Parquet|Markdown|regex|cron)"
                     r"(?![A-Za-z0-9])")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*")


# A span that reads as a command or a path: "`git status`", "`./run.sh`", "`config.yaml`", "`--dry-run`",
# "`$HOME`", "`/api/v1`", a tool or function name (`web_fetch`, `mcp__xcode__build_sim`), or a known
# tool. A bare name in backticks ("tell builders to install the `doppel` and `block-builder` skills", a
# persona's "`Calm` mode") names a thing, not something to run.
_SPAN_COMMAND = re.compile(r"\s|[/\\.=$(:_]|^-")


def _command_or_path(span: str) -> bool:
    return len(span) >= 2 and (bool(_SPAN_COMMAND.search(span)) or span.lower() in TOOLS)


# A variable's name in backticks (`SKILL_ID`, `$OPENAI_API_KEY`) is a setting, not a command to run.
_SETTING = re.compile(r"\$?\{?[A-Z][A-Z0-9_]*\}?")
# A link to another document or a web page ("完整文档：[README.md](README.md)"): where to read, not a step.
_DOC_LINK = re.compile(r"\[[^\]\n]*\]\((?:https?://[^)\s]*|[^)\s]*\.(?:md|markdown|html?))\)", re.I)
# A heading over what the skill offers rather than what to do: its features, what is new.
_ABOUT_HEADING = re.compile(
    r"^\s{0,3}#{1,6}\s+(?:\W\s*)?(?:(?:key\s+|main\s+|core\s+)?features?|capabilities|highlights|what\s+(?:it|this\s+skill)\s+does"
    r"|what'?s\s+new\b|changelog|release\s+notes|(?:主要|核心)?功能(?:特性|特点|介绍|亮点)?|特性|特点|機能|特徴|características"
    r"|funcionalidades|fonctionnalités|funktionen|возможности)\b[^\n]*$", re.I)
_HEADING_LINE = re.compile(r"^\s{0,3}#{1,6}\s")


def _concrete(text: str) -> bool:
    text = _DOC_LINK.sub(" ", text)
    if any(_command_or_path(span) and not _SETTING.fullmatch(span)
           for span in (m.group(1).strip() for m in _CODE_SPAN.finditer(text))):
        return True
    if _FILE.search(text) or _PATH.search(text) or _FORMAT.search(text):
        return True
    # Tool names are matched as written in lower case: "Black" or "Convert" opening a sentence are words.
    return any(w in TOOLS for w in _WORD.findall(text))


def concrete_steps(body: str) -> list[tuple[int, str]]:
    """(0-based line index, text) of the list items outside fences that name something concrete."""
    out = []
    in_fence = about = False
    for i, line in enumerate((body or "").split("\n")):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if _HEADING_LINE.match(line):
            about = bool(_ABOUT_HEADING.match(line))
            continue
        m = _STEP.match(line)
        if m and not about and _concrete(m.group("text")):
            out.append((i, m.group("text").strip()))
    return out


def has_concrete_steps(body: str, *, minimum: int = MIN_STEPS) -> bool:
    return len(concrete_steps(body)) >= minimum
