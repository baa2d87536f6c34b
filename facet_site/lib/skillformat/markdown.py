"""The structure of a skill's markdown body: title, first paragraph, steps, inputs and outputs,
code blocks and the shell commands they run."""
from __future__ import annotations

import re
from functools import lru_cache

from markdown_it import MarkdownIt

from facet_site.lib.skillformat.normalise import _dedupe


_MAX_LIST_ITEMS = 50
_MAX_ITEM_CHARS = 300
_MAX_CODE_BLOCKS = 30
_MAX_CODE_CHARS = 10_000
# Markdown structure is only extracted from the head of very long bodies; the whole body is kept.
_MAX_PARSE_CHARS = 300_000

# Only block structure is needed; skipping inline parsing and unused rules (setext headings,
# tables, blockquotes, HTML blocks) halves parse time, which dominates the cost of a skill.
_MD = MarkdownIt("zero").enable(["heading", "list", "fence", "code"])
_MD.core.ruler.disable(["inline", "text_join"], ignoreInvalid=True)

_HEADING_CATS = (
    ("inputs", frozenset({"input", "inputs", "parameter", "parameters", "params", "argument", "arguments",
                          "args", "usage", "requirement", "requirements", "prerequisite", "prerequisites"})),
    ("outputs", frozenset({"output", "outputs", "return", "returns", "result", "results"})),
    ("steps", frozenset({"step", "steps", "workflow", "workflows", "procedure", "instructions", "instruction",
                         "usage", "quickstart"})),
)
_STEP_PHRASES = ("how to", "how it works", "quick start", "getting started")
_WORD = re.compile(r"[a-z]+")


@lru_cache(maxsize=4096)
def _heading_cats(heading: str) -> frozenset[str]:
    low = heading.lower()
    words = set(_WORD.findall(low))
    cats = {cat for cat, keys in _HEADING_CATS if words & keys}
    if any(p in low for p in _STEP_PHRASES):
        cats.add("steps")
    return frozenset(cats)


_MD_IMAGE_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MD_MARKS = re.compile(r"\*\*|__|`+|~~")
_HTML_TAG = re.compile(r"</?[A-Za-z][^>\n]{0,200}>")
_SPACES = re.compile(r"\s+")


def _plain(md: str, limit: int = _MAX_ITEM_CHARS) -> str:
    text = _MD_IMAGE_LINK.sub(r"\1", md)
    text = _MD_MARKS.sub("", text)
    text = _HTML_TAG.sub("", text)
    text = _SPACES.sub(" ", text).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


_SHELL_LANGS = frozenset({"bash", "sh", "shell", "zsh", "console", "shell-session", "shellsession",
                          "terminal", "fish", "ksh"})
_PROMPT_LANGS = frozenset({"console", "shell-session", "shellsession", "terminal"})
_PROMPT = re.compile(r"^\s*\$\s+(.+)$", re.M)
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_CMD_SPLIT = re.compile(r"&&|\|\||;|\||\$\(|`")
_ENV_ASSIGN = re.compile(r"""^[A-Za-z_][A-Za-z0-9_]*=(?:"[^"]*"|'[^']*'|[^\s'"]*)\s*""")
_CLI_NAME = re.compile(r"^[a-z0-9][a-z0-9_.+-]{0,48}$")
_NOT_CLI_SUFFIX = re.compile(r"\.(?:json|md|txt|ya?ml|csv|log|html?|png|jpe?g|gif|toml|xml|env)$")
_PREFIX_WORDS = frozenset({"sudo", "env", "time", "nohup", "exec", "command", "builtin", "then", "do", "else",
                           "!", "{", "(", "doas"})
_SHELL_WORDS = frozenset({
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "in",
    "function", "select", "return", "exit", "break", "continue", "export", "unset", "set", "source",
    "alias", "unalias", "cd", "pushd", "popd", "echo", "printf", "read", "local", "declare", "typeset",
    "eval", "trap", "shift", "wait", "true", "false", "test", "let", "readonly", "ulimit", "umask",
    "type", "hash", "history", "jobs", "fg", "bg", "pwd", "shopt", "setopt", "end", "fn",
})


def _shell_words(code: str, prompt_only: bool) -> list[str]:
    """First words of the commands in a shell snippet: the CLIs it runs."""
    if prompt_only:
        lines = _PROMPT.findall(code)
    else:
        lines = code.split("\n")
    words: list[str] = []
    heredoc_end = None
    pending = ""
    for line in lines:
        if heredoc_end is not None:
            if line.strip() == heredoc_end:
                heredoc_end = None
            continue
        stripped = line.strip()
        if pending:
            stripped = pending + " " + stripped
            pending = ""
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending = stripped[:-1]
            continue
        if stripped.startswith("$ "):
            stripped = stripped[2:]
        m = _HEREDOC.search(stripped)
        if m:
            heredoc_end = m.group(2)
        for segment in _CMD_SPLIT.split(stripped):
            word = _first_word(segment)
            if word:
                words.append(word)
    return words


def _first_word(segment: str) -> str:
    seg = segment.strip()
    for _ in range(8):
        seg = seg.lstrip("({!").lstrip()
        m = _ENV_ASSIGN.match(seg)
        if m:
            seg = seg[m.end():]
            continue
        word, _, rest = seg.partition(" ")
        if word in _PREFIX_WORDS:
            seg = rest.lstrip()
            while seg.startswith("-"):
                flag, _, seg = seg.partition(" ")
                seg = seg.lstrip()
                if word in ("sudo", "doas") and flag in ("-u", "-g"):
                    seg = seg.partition(" ")[2].lstrip()
            continue
        break
    else:
        return ""
    word = word.strip().rstrip(");}")
    if not word or word in _SHELL_WORDS or not _CLI_NAME.match(word):
        return ""
    if _NOT_CLI_SUFFIX.search(word) or word.replace(".", "").isdigit():
        return ""
    return word


_DATA_EXT = (
    "csv|tsv|json|jsonl|ndjson|xml|ya?ml|toml|ini|txt|md|markdown|html?|pdf|docx?|xlsx?|pptx?|odt|ods|"
    "png|jpe?g|gif|webp|svg|bmp|tiff?|mp3|wav|flac|ogg|m4a|mp4|mov|mkv|webm|avi|zip|tar|gz|tgz|"
    "sqlite3?|db|parquet|log|ics|vcf|srt|vtt|epub"
)
# Scanning for the extension and widening backwards is several times faster than one regex that
# tries a path at every position of the body.
_EXT_MENTION = re.compile(rf"\.(?:{_DATA_EXT})(?![\w/-])", re.I)
_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-/~")
_OUT_CUE = re.compile(
    r"(?:>>?|\s-o|--output(?:-file|-dir|-path)?|--out|\s-O|\bsav(?:e|es|ed|ing)(?:\s+[\w-]+){0,3}?\s+(?:to|as|in|into)"
    r"|\bwrit(?:e|es|ing|ten)(?:\s+[\w-]+){0,3}?\s+(?:to|into)|\boutputs?\s+(?:to|as|in)|\bexport(?:s|ed)?(?:\s+[\w-]+){0,2}?\s+(?:to|as)"
    r"|\bcreat(?:e|es|ed|ing)|\bgenerat(?:e|es|ed|ing)|\bproduc(?:e|es|ed|ing)|\boutput(?:\s+file)?:)"
    r"(?:\s+(?:a|an|the|new))?[\s=:\"'`(\[]*$",
    re.I,
)
_IN_CUE = re.compile(
    r"(?:<|\s-i|--input(?:-file)?|--file|\s-f|--in|\bread(?:s|ing)?(?:\s+from)?|\bload(?:s|ing)?(?:\s+from)?|\bfrom"
    r"|\bupload(?:s|ing)?|\bparse[sd]?|\bopen(?:s)?|\binput(?:\s+file)?:?|\bcat|\btakes?|\baccepts?|\bgiven)"
    r"(?:\s+(?:a|an|the|your))?[\s=:\"'`(\[]*$",
    re.I,
)


class _Structure:
    __slots__ = ("h1", "first_text", "inputs", "outputs", "steps", "code_blocks", "shell_words")

    def __init__(self):
        self.h1 = ""
        self.first_text = ""
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.steps: list[str] = []
        self.code_blocks: list[dict] = []
        self.shell_words: list[str] = []


def _structure(body: str) -> _Structure:
    s = _Structure()
    if not body.strip():
        return s
    src = body[:_MAX_PARSE_CHARS]
    tokens = _MD.parse(src)
    headings: list[tuple[int, frozenset[str]]] = []
    cats: frozenset[str] = frozenset()
    lists: list[bool] = []  # True for ordered lists
    item_pending = False
    first_item = first_heading = ""
    inputs: list[str] = []
    outputs: list[str] = []
    steps: list[str] = []
    for i, tok in enumerate(tokens):
        t = tok.type
        if t == "paragraph_open":
            content = tokens[i + 1].content
            if item_pending:
                item_pending = False
                to_steps = (lists[-1] or "steps" in cats) and len(steps) < _MAX_LIST_ITEMS
                if not (to_steps or cats or not first_item):
                    continue  # _plain is the costliest step of the walk; skip unused items
                text = _plain(content)
                if not text:
                    continue
                first_item = first_item or text
                if to_steps:
                    steps.append(text)
                if "inputs" in cats:
                    inputs.append(text)
                if "outputs" in cats:
                    outputs.append(text)
            elif not lists:
                if content.lstrip().startswith("|"):
                    if cats & {"inputs", "outputs"}:
                        rows = _table_rows(content)
                        if "inputs" in cats:
                            inputs += rows
                        if "outputs" in cats:
                            outputs += rows
                elif not s.first_text:
                    s.first_text = _plain(content, 1024)
        elif t == "heading_open":
            item_pending = False
            level = int(tok.tag[1:])
            raw_heading = tokens[i + 1].content
            if level == 1 and not s.h1:
                s.h1 = _plain(raw_heading)
            first_heading = first_heading or raw_heading
            own = _heading_cats(raw_heading)
            while headings and headings[-1][0] >= level:
                headings.pop()
            # A subsection without its own category inherits its parent's ("## Usage" > "### Example").
            cats = own or (headings[-1][1] if headings else frozenset())
            headings.append((level, cats))
        elif t == "bullet_list_open" or t == "ordered_list_open":
            lists.append(t == "ordered_list_open")
        elif t == "bullet_list_close" or t == "ordered_list_close":
            if lists:
                lists.pop()
        elif t == "list_item_open":
            item_pending = True
        elif t == "list_item_close":
            item_pending = False
        elif t == "fence":
            item_pending = False
            lang = tok.info.strip().split(maxsplit=1)[0].lower() if tok.info.strip() else ""
            lang = lang.strip("{}.")
            code = tok.content
            if lang in _SHELL_LANGS:
                s.shell_words += _shell_words(code, lang in _PROMPT_LANGS)
            elif "$ " in code:
                s.shell_words += _shell_words(code, True)
            if len(s.code_blocks) < _MAX_CODE_BLOCKS:
                s.code_blocks.append({
                    "lang": lang,
                    "code": code[:_MAX_CODE_CHARS],
                    "line": (tok.map[0] + 1) if tok.map else 1,
                    "truncated": len(code) > _MAX_CODE_CHARS,
                })
        elif t == "code_block":
            if "$ " in tok.content:
                s.shell_words += _shell_words(tok.content, True)
    if not s.first_text:
        s.first_text = _plain(first_item or first_heading, 1024)
    _path_mentions(src, inputs, outputs)
    s.inputs = _dedupe(inputs, limit=_MAX_LIST_ITEMS)
    s.outputs = _dedupe(outputs, limit=_MAX_LIST_ITEMS)
    s.steps = _dedupe(steps, limit=_MAX_LIST_ITEMS)
    s.shell_words = _dedupe(s.shell_words)
    return s


def code_blocks(markdown: str) -> list[dict]:
    """The fenced code blocks of a Markdown document as SKILL.md's are recorded (`ParsedSkill.code_blocks`:
    lang, code, line, truncated), for supporting documents that are read the same way."""
    return _structure(markdown or "").code_blocks


def _table_rows(content: str) -> list[str]:
    rows = []
    lines = [ln.strip() for ln in content.split("\n") if ln.strip().startswith("|")]
    has_header = len(lines) > 1 and set(lines[1]) <= set("|-: ")
    for n, line in enumerate(lines):
        if has_header and n <= 1:
            continue
        cells = [_plain(c) for c in line.strip("|").split("|")]
        cells = [c for c in cells if c]
        if cells:
            rows.append(_plain(" — ".join(cells)))
    return rows


def _path_mentions(body: str, inputs: list[str], outputs: list[str]) -> None:
    """File paths whose wording marks them as read (inputs) or written (outputs)."""
    for m in _EXT_MENTION.finditer(body):
        start = m.start()
        while start > 0 and body[start - 1] in _PATH_CHARS:
            start -= 1
        path = body[start:m.end()]
        stem = path.rsplit("/", 1)[-1][: -len(m.group(0))]
        # URLs ("//host/x.json", "host.com/x.json") and bare extensions (".json") are not files.
        if "//" in path or not stem.strip(".") or (start and body[start - 1] in ":@$"):
            continue
        line_start = body.rfind("\n", 0, start) + 1
        before = body[max(line_start, start - 60):start]
        if _OUT_CUE.search(before):
            outputs.append(path)
        elif _IN_CUE.search(before):
            inputs.append(path)

