"""Shell command lines as the analytics see them: whether a command only reads ("observation") or
may change something ("action"), the programs it runs, a turn's state from its commands' kinds,
and the record one command is stored as. Django-free; used by rollouts and by Harbor job import.
"""
from __future__ import annotations

import posixpath
import re
from typing import Any, Literal

TurnState = Literal["observation", "action", "mixed", "none"]

# Shell builtins that only move around or set shell state: "cd /app && cat x" is a cat.
_NAVIGATION = {"cd", "pushd", "popd", "export", "set", "unset", "source", ".", "shopt", "umask",
               "alias", "true", ":"}


class _Unparsable(ValueError):
    pass


# Longest first: the tokenizer takes the first alternative that matches.
_OPERATORS = ("&>>", ";;&", "<<<", "<<-", "&>", ">>", ">|", ">&", "<&", "<>", "<<", "&&", "||",
              "|&", ";;", ";&", ">", "<", "|", "&", ";", "(", ")", "\n")
_SEPARATORS = {"&&", "||", "|", "|&", "&", ";", ";;", ";&", ";;&", "(", ")", "\n"}
_OUT_REDIRECTS = {">", ">>", ">|", "&>", "&>>", ">&", "<>"}  # <> opens read-write
_IN_REDIRECTS = {"<", "<<", "<<<", "<<-", "<&"}
_TOKEN = re.compile(r"[ \t\r]+|(" + "|".join(re.escape(o) for o in _OPERATORS)
                    + r")|([^\s;&|<>()]+)")
_PLACEHOLDER = re.compile("\x01(\\d+)\x02")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_HEREDOC = re.compile(r"<<(-?)[ \t]*(?:'([^']*)'|\"([^\"]*)\"|\\?([^\s;&|<>()]+))")
_SUBST = "__facet_subst__"

# Writing to these is not a change to the task's state.
_HARMLESS_TARGETS = re.compile(r"^(/dev/(null|stdout|stderr|tty|fd/\d+)|\d+-?|-)$")

# Words that start or end a compound command; the command proper follows them.
_LEADING_KEYWORDS = {"if", "then", "elif", "else", "do", "while", "until", "!", "{", "}", "time",
                     "[[", "]]"}
_NEUTRAL = {"done", "fi", "esac", "in"}
_HEADERS = {"for", "select", "case", "function"}

# Programs that only read (files, the system's state) and print. Anything not known here is an
# action: an unknown program may write, and counting a write as an observation would hide it.
_READ_ONLY = {
    "cat", "tac", "nl", "head", "tail", "less", "more", "most", "grep", "egrep", "fgrep", "rg",
    "ag", "ack", "zgrep", "zcat", "bzcat", "xzcat", "zless", "wc", "file", "stat", "pwd", "echo",
    "printf", "ls", "ll", "dir", "vdir", "tree", "du", "df", "which", "whereis", "type",
    "whoami", "id", "groups", "hostname", "uname", "date", "printenv", "ps", "pgrep", "pstree",
    "free", "uptime", "lsof", "ss", "netstat", "diff", "cmp", "comm", "md5sum", "sha1sum",
    "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum", "cksum", "sum", "base64",
    "base32", "od", "hexdump", "strings", "readlink", "realpath", "basename", "dirname", "cut",
    "tr", "paste", "column", "fold", "fmt", "rev", "expand", "unexpand", "jq", "test", "[",
    "true", "false", ":", "sleep", "cd", "pushd", "popd", "dirs", "history", "clear", "locate",
    "man", "help", "lsblk", "getent", "nproc", "lscpu", "seq", "expr", "yes", "join", "look",
    "numfmt", "tsort", "ldd", "nm", "objdump", "readelf", "lsattr", "namei", "tput", "locale",
    "alias", "shopt", "set", "export", "unset", "ulimit", "umask", "wait", "jobs", "cal",
    "lslocks", "ipcs", "top", "htop", "vmstat", "iostat", "w", "who", "last", "env",
}
# Programs that run another command given as their arguments, after some options of their own.
_WRAPPERS = {"sudo", "nohup", "nice", "timeout", "stdbuf", "env", "command", "builtin", "exec",
             "xargs", "watch", "ionice", "chronic", "unbuffer", "time", "setsid", "runuser",
             "doas", "chroot"}
_WRAPPER_OPTS_WITH_ARG = {
    "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"},
    "nice": {"-n"}, "timeout": {"-s", "-k", "--signal", "--kill-after"},
    "env": {"-u", "-C", "-S", "--unset", "--chdir"},
    "xargs": {"-I", "-i", "-n", "-P", "-d", "-L", "-l", "-s", "-E", "-e", "-a", "--delimiter",
              "--max-args", "--max-procs", "--arg-file", "--replace", "--max-lines"},
    "watch": {"-n", "--interval", "-d"}, "ionice": {"-c", "-n", "-p"},
    "stdbuf": {"-i", "-o", "-e"}, "runuser": {"-u", "-g", "-G", "-l"},
}
_SHELLS = {"bash", "sh", "dash", "zsh", "ksh"}
_GIT_READ = {"status", "log", "diff", "show", "ls-files", "ls-tree", "rev-parse", "describe",
             "blame", "grep", "shortlog", "cat-file", "rev-list", "whatchanged", "show-ref",
             "for-each-ref", "count-objects", "help", "version"}
_PIP_READ = {"list", "show", "freeze", "check", "help", "search", "index", "inspect"}
_APT_READ = {"list", "show", "search", "policy", "showpkg", "depends", "rdepends", "madison",
             "changelog"}
_SQL_READ = re.compile(r"^\s*(select|pragma|explain|with\s+\w+\s+as|\.(schema|tables|indexes|"
                       r"indices|dump|headers|mode|databases|show|help))\b", re.I)
_AWK_WRITES = re.compile(r"\bsystem\s*\(|\bprintf?\b[^;}\n]*>|\|\s*\"|\bfflush\b")
_VERSION_ARGS = {"--version", "-V", "--help", "-h", "version", "-version"}


def _match_paren(text: str, open_at: int) -> int:
    """Index of the ')' closing the '(' at open_at, skipping quoted text."""
    depth, i = 0, open_at
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "'\"":
            end = text.find(ch, i + 1)
            if end < 0:
                raise _Unparsable("unterminated quote")
            i = end + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise _Unparsable("unbalanced parenthesis")


def _scan(text: str) -> tuple[str, list[str], list[str]]:
    """The command with quoting resolved into placeholders (so a quoted '>' is never read as a
    redirection), comments, heredoc bodies and line continuations removed, and every command
    substitution ($(...), `...`, <(...), >(...)) cut out for separate classification.
    Returns (text, quoted strings by placeholder number, substituted commands)."""
    out: list[str] = []
    quoted: list[str] = []
    inner: list[str] = []
    heredocs: list[str] = []
    n, i = len(text), 0

    def hold(content: str) -> str:
        quoted.append(content)
        return f"\x01{len(quoted) - 1}\x02"

    while i < n:
        ch = text[i]
        if ch == "\\":
            if text.startswith("\n", i + 1):
                i += 2  # line continuation
                continue
            out.append(hold(text[i + 1:i + 2]))
            i += 2
            continue
        if ch == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise _Unparsable("unterminated single quote")
            out.append(hold(text[i + 1:end]))
            i = end + 1
            continue
        if ch == '"':
            buf: list[str] = []
            j = i + 1
            while True:
                if j >= n:
                    raise _Unparsable("unterminated double quote")
                c = text[j]
                if c == "\\" and j + 1 < n:
                    buf.append(text[j + 1])
                    j += 2
                elif c == '"':
                    break
                elif text.startswith("$((", j):
                    j = _match_paren(text, j + 1) + 1
                    buf.append("0")
                elif text.startswith("$(", j):
                    end = _match_paren(text, j + 1)
                    inner.append(text[j + 2:end])
                    buf.append(_SUBST)
                    j = end + 1
                elif c == "`":
                    end = text.find("`", j + 1)
                    if end < 0:
                        raise _Unparsable("unterminated backquote")
                    inner.append(text[j + 1:end])
                    buf.append(_SUBST)
                    j = end + 1
                else:
                    buf.append(c)
                    j += 1
            out.append(hold("".join(buf)))
            i = j + 1
            continue
        if text.startswith("$((", i):
            i = _match_paren(text, i + 1) + 1  # arithmetic, not a command
            out.append("0")
            continue
        if ch in "$<>" and text.startswith("(", i + 1):
            end = _match_paren(text, i + 1)
            inner.append(text[i + 2:end])
            out.append(_SUBST if ch == "$" else f" {_SUBST} ")
            i = end + 1
            continue
        if ch == "`":
            end = text.find("`", i + 1)
            if end < 0:
                raise _Unparsable("unterminated backquote")
            inner.append(text[i + 1:end])
            out.append(_SUBST)
            i = end + 1
            continue
        if ch == "#" and (i == 0 or text[i - 1] in " \t\n;&|()"):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if text.startswith("<<", i) and not text.startswith("<<<", i):
            m = _HEREDOC.match(text, i)
            if m:
                heredocs.append(m.group(2) or m.group(3) or m.group(4) or "")
                out.append(" << HEREDOC ")
                i = m.end()
                continue
        if ch == "\n" and heredocs:
            # The bodies follow this line, in order; none of it is shell code.
            out.append("\n")
            i += 1
            for delimiter in heredocs:
                while i < n:
                    end = text.find("\n", i)
                    line = text[i:n if end < 0 else end]
                    i = n if end < 0 else end + 1
                    if line.strip() == delimiter:
                        break
            heredocs.clear()
            continue
        out.append(ch)
        i += 1
    return "".join(out), quoted, inner


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) with kind "op" or "word"; an fd number glued to a redirection is dropped."""
    raw: list[tuple[str, str, int, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise _Unparsable(f"cannot tokenize at {text[pos:pos + 20]!r}")
        if m.group(1):
            raw.append(("op", m.group(1), m.start(), m.end()))
        elif m.group(2):
            raw.append(("word", m.group(2), m.start(), m.end()))
        pos = m.end()
    result = []
    for idx, (kind, tok, _start, end) in enumerate(raw):
        nxt = raw[idx + 1] if idx + 1 < len(raw) else None
        if (kind == "word" and tok.isdigit() and nxt is not None and nxt[0] == "op"
                and nxt[2] == end and (nxt[1] in _OUT_REDIRECTS or nxt[1] in _IN_REDIRECTS)):
            continue  # "2>" : the 2 is a file descriptor, not an argument
        result.append((kind, tok))
    return result


def _restore(word: str, quoted: list[str]) -> str:
    return _PLACEHOLDER.sub(lambda m: quoted[int(m.group(1))], word)


def _options_then_command(prog: str, args: list[str]) -> list[str]:
    """The command a wrapper runs: its arguments after its own options (and assignments)."""
    with_arg = _WRAPPER_OPTS_WITH_ARG.get(prog, set())
    i = 0
    if prog == "timeout":
        while i < len(args) and args[i].startswith("-"):
            i += 2 if args[i] in with_arg else 1
        return args[i + 1:]  # the duration comes first
    while i < len(args):
        a = args[i]
        if prog == "env" and _ASSIGNMENT.match(a):
            i += 1
        elif a == "--":
            return args[i + 1:]
        elif a.startswith("-") and len(a) > 1:
            i += 2 if a in with_arg else 1
        else:
            break
    return args[i:]


def _positionals(args: list[str]) -> list[str]:
    return [a for a in args if not (a.startswith("-") and len(a) > 1)]


def _classify_simple(words: list[str], programs: list[str], depth: int) -> str | None:
    """observation/action for one simple command (words without operators), None when it has
    no effect either way (a keyword, a bare assignment, a loop header)."""
    i = 0
    while i < len(words) and (words[i] in _LEADING_KEYWORDS or _ASSIGNMENT.match(words[i])):
        i += 1
    if i >= len(words):
        return None
    prog, args = posixpath.basename(words[i]), words[i + 1:]
    if prog in _HEADERS or prog in _NEUTRAL:
        return None
    if prog == _SUBST:
        return None  # the substitution itself was classified on its own
    if prog in _WRAPPERS:
        if prog == "command" and args[:1] in (["-v"], ["-V"]):
            programs.append(prog)
            return "observation"
        rest = _options_then_command(prog, args)
        if not rest:
            programs.append(prog)
            return "observation" if prog in ("env", "time") else "action"
        return _classify_simple(rest, programs, depth)
    programs.append(prog)
    if len(args) == 1 and args[0] in _VERSION_ARGS:
        return "observation"
    if prog in _SHELLS:
        if "-c" in args and args.index("-c") + 1 < len(args):
            return _classify(args[args.index("-c") + 1], programs, depth + 1)
        return "action"  # runs a script we cannot see
    if prog in ("sed", "gsed"):
        inplace = any(a.startswith("-i") or a.startswith("--in-place")
                      or (a.startswith("-") and not a.startswith("--") and "i" in a[1:])
                      for a in args if a.startswith("-"))
        return "action" if inplace else "observation"
    if prog in ("awk", "gawk", "mawk", "nawk"):
        if "inplace" in args or any(_AWK_WRITES.search(a) for a in args):
            return "action"
        return "observation"
    if prog == "find":
        if any(a in ("-delete", "-fprint", "-fprint0", "-fprintf", "-fls") for a in args):
            return "action"
        for flag in ("-exec", "-execdir", "-ok", "-okdir"):
            if flag in args:
                sub = args[args.index(flag) + 1:]
                end = next((k for k, a in enumerate(sub) if a in (";", "+")), len(sub))
                if _classify_simple(sub[:end], programs, depth) == "action":
                    return "action"
        return "observation"
    if prog == "sort":
        return "action" if any(a == "-o" or a.startswith("--output") or
                               (a.startswith("-o") and not a.startswith("--")) for a in args) \
            else "observation"
    if prog == "uniq":
        return "action" if len(_positionals(args)) > 1 else "observation"  # uniq IN OUT
    if prog == "xxd":
        return "action" if len(_positionals(args)) > 1 else "observation"
    if prog == "tee":
        targets = [a for a in _positionals(args) if not _HARMLESS_TARGETS.match(a)]
        return "action" if targets else "observation"
    if prog == "git":
        k = 0
        while k < len(args) and args[k].startswith("-"):
            k += 2 if args[k] in ("-C", "-c", "--git-dir", "--work-tree") else 1
        sub = args[k] if k < len(args) else ""
        rest = args[k + 1:]
        if sub in _GIT_READ or not sub:
            return "observation"
        if sub in ("branch", "tag", "remote", "stash", "config", "reflog", "worktree"):
            read_forms = {"branch": {"-a", "-r", "-l", "--list", "-v", "-vv", "--show-current",
                                     "--all", "--contains", "--merged"},
                          "tag": {"-l", "--list", "-n"}, "remote": {"-v", "show", "get-url"},
                          "stash": {"list", "show"},
                          "config": {"--get", "--list", "-l", "--get-all", "--get-regexp"},
                          "reflog": {"show"}, "worktree": {"list"}}[sub]
            if not rest or rest[0] in read_forms:
                return "observation"
        return "action"
    if prog in ("pip", "pip3") or (prog.startswith("python") and args[:2] in (["-m", "pip"],
                                                                              ["-m", "pip3"])):
        rest = args[2:] if prog.startswith("python") else args
        sub = next((a for a in rest if not a.startswith("-")), "")
        return "observation" if sub in _PIP_READ else "action"
    if prog in ("apt", "apt-cache"):
        sub = next((a for a in args if not a.startswith("-")), "")
        return "observation" if prog == "apt-cache" or sub in _APT_READ else "action"
    if prog == "dpkg":
        return "observation" if any(a in ("-l", "-L", "-s", "-S", "--list", "--listfiles",
                                          "--status", "--search", "-p") for a in args) \
            else "action"
    if prog == "curl":
        writes = {"-o", "-O", "--output", "--remote-name", "-d", "--data", "--data-raw",
                  "--data-binary", "--data-urlencode", "-F", "--form", "-T", "--upload-file",
                  "--json", "-X", "--request", "-c", "--cookie-jar", "-D", "--dump-header"}
        return "action" if any(a in writes or a.startswith("--data") or
                               (a.startswith("-") and not a.startswith("--")
                                and set(a[1:]) & set("oOdFTX")) for a in args) \
            else "observation"
    if prog == "wget":
        to_stdout = any(a in ("-O-", "--spider", "-qO-") for a in args) or \
            any(a == "-O" and args[k + 1:k + 2] == ["-"] for k, a in enumerate(args))
        return "observation" if to_stdout else "action"
    if prog in ("sqlite3",):
        sql = _positionals(args)[1:]
        if "-readonly" in args or (sql and all(_SQL_READ.match(s) for s in sql)):
            return "observation"
        return "action"
    if prog in ("yq",):
        return "action" if any(a in ("-i", "--inplace") for a in args) else "observation"
    if prog in ("systemctl", "service"):
        return "observation" if any(a in ("status", "is-active", "is-enabled", "list-units",
                                          "show", "cat", "--status-all") for a in args) \
            else "action"
    if prog in ("top", "htop") and not args:
        return "observation"
    return "observation" if prog in _READ_ONLY else "action"


def _classify(command: str, programs: list[str], depth: int = 0) -> str:
    if depth > 8:
        return "action"  # substitutions nested this deep are not worth the recursion
    text, quoted, inner = _scan(command)
    kinds: list[str] = []
    for sub in inner:
        kinds.append(_classify(sub, programs, depth + 1))
    words: list[str] = []
    tokens = _tokens(text)
    idx = 0

    def flush() -> None:
        if words:
            kind = _classify_simple(words, programs, depth)
            if kind:
                kinds.append(kind)
            words.clear()

    while idx < len(tokens):
        kind, tok = tokens[idx]
        if kind == "op" and tok in _SEPARATORS:
            flush()
        elif kind == "op" and tok in _OUT_REDIRECTS:
            target = _restore(tokens[idx + 1][1], quoted) if idx + 1 < len(tokens) else ""
            idx += 1
            if not _HARMLESS_TARGETS.match(target):
                kinds.append("action")
        elif kind == "op" and tok in _IN_REDIRECTS:
            idx += 1  # the file read from, or the heredoc delimiter
        else:
            words.append(_restore(tok, quoted))
        idx += 1
    flush()
    return "action" if "action" in kinds else "observation"


def classify_command(cmd: str) -> Literal["observation", "action"]:
    """Whether a shell command only reads ("observation") or may change something ("action").

    The command line is split the way bash would (quotes, pipelines, `;`/`&&`/`||`, newlines,
    heredocs, comments) and every simple command in it must be a read: a program from the
    read-only list (cat, ls, head, tail, grep, find, wc, less, file, stat, pwd, echo, jq, diff,
    ps, git status/log/diff, pip list, ...), used without its writing options (sed -i, sort -o,
    find -delete/-exec rm, uniq IN OUT, tee FILE, curl -o/-d, git commit ...), and nothing may
    redirect output into a file (`> /dev/null` and `2>&1` are fine). Command substitutions are
    classified too. Anything else, and anything that does not parse, is an action: an unknown
    program may write, and calling a write an observation would hide a state change. cd, export
    and other shell-state-only builtins count as observations (they change no file).
    """
    try:
        return "action" if _classify(cmd, [], 0) == "action" else "observation"
    except (_Unparsable, RecursionError):
        return "action"


def command_programs(cmd: str) -> list[str]:
    """The programs a command line runs, in order, wrappers (sudo, timeout, xargs) looked
    through: `cd /app && sudo grep -r x . | wc -l` gives ["cd", "grep", "wc"]. For "most
    frequent commands" statistics; [] when the line does not parse."""
    programs: list[str] = []
    try:
        _classify(cmd, programs, 0)
    except (_Unparsable, RecursionError):
        return []
    return programs


def turn_state(kinds: list[str]) -> TurnState:
    """A turn's state from its commands' kinds: none, observation, action, or mixed."""
    if not kinds:
        return "none"
    if all(k == "observation" for k in kinds):
        return "observation"
    if all(k == "action" for k in kinds):
        return "action"
    return "mixed"


def main_program(command: str) -> str:
    """The program a command line is about: the first one that is not cd, export and the like
    ("cd /app && cat x" -> "cat"); "" when it does not parse."""
    programs = command_programs(command)
    for prog in programs:
        if prog not in _NAVIGATION:
            return prog
    return programs[0] if programs else ""


def command_record(command: str, **extra: Any) -> dict:
    """How one command is stored in Turn.commands: the text, its main program and its kind
    (observation | action), which the command-pattern statistics group by in SQL."""
    return {"command": command, "program": main_program(command)[:60], "kind": classify_command(command), **extra}
