"""Detectors for verifiers that cannot be trusted: ones that need the network at grade time,
give different answers on the same state (flaky), or only check that outputs exist.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from facet_site.lib.task_defects_findings import (
    EXISTENCE_ONLY_TESTS, FLAKY, GRADE_TIME_NETWORK, finding, is_remote_host)

# --------------------------------------------------------------------------------------------
# Grade-time network and installs

# Commands that fetch from a package index or mirror whatever their arguments are. `uv run`
# alone is left out: inside a project with a lock file and a warm cache it runs offline.
_INSTALLERS = re.compile(
    r"\b(?:python3?\s+-m\s+)?pip3?\s+(?:install|download)\b|\buv\s+(?:pip\s+install|add|sync|"
    r"tool\s+install)\b|\buv\s+run\b[^\n|;&]*\s--with\b|\buvx\s|\bpipx\s+(?:install|run)\b|"
    r"\bapt(?:-get)?\s+(?:-\S+\s+)*(?:install|update|source)\b|\bapk\s+add\b|"
    r"\b(?:yum|dnf|zypper)\s+install\b|\bconda\s+install\b|\bnpm\s+(?:install|i|ci)\b|"
    r"\bnpx\s+(?:-y|--yes)\b|\byarn\s+(?:add|install)\b|\bpnpm\s+(?:add|install)\b|"
    r"\bgem\s+install\b|\bgo\s+(?:get|mod\s+download)\b|\bcargo\s+(?:install|fetch)\b|"
    r"\binstall\.packages\(|\bastral\.sh\b")
# Flags that keep an installer on local files.
_OFFLINE_FLAGS = re.compile(r"--no-index\b|--offline\b|--find-links\b|(?<!\S)-f\s+/")
# Fetchers whose target decides: `curl localhost:8080` checks the task's own server.
_FETCHERS = re.compile(r"\b(?:curl|wget|git\s+(?:clone|fetch|pull|ls-remote)|"
                       r"urlopen|urlretrieve|requests\.\w+|httpx\.\w+|aiohttp|"
                       r"Invoke-WebRequest|socket\.create_connection)\b")
_URL_HOST = re.compile(r"(?:https?|ftp|git|ssh)://(?:[^@/\s'\"]*@)?(\[[^\]]+\]|[^:/\s'\"]+)"
                       r"|\b[\w.-]+@([\w.-]+):")
# Files under tests/ that never run at grade time: a separate verifier image's Dockerfile (its
# RUN steps run at build time) and documentation.
_NOT_RUN = re.compile(r"(^|/)(Dockerfile|[^/]*\.(md|txt|rst|json|csv|lock|toml|cfg|ini))$")


def _remote_hosts(line: str) -> list[str]:
    hosts = [a or b for a, b in _URL_HOST.findall(line)]
    return [h for h in hosts if is_remote_host(h)]


def grade_time_network(tests_files: Mapping[str, str]) -> list[dict]:
    """Errors for every line of a tests/ file that installs packages or downloads: the verifier
    runs offline (here and in Harbor's default network mode), so such a verifier either fails for
    the agent or, worse, depends on what the internet serves that day."""
    findings = []
    for rel, text in sorted(tests_files.items()):
        if _NOT_RUN.search(rel):
            continue
        python = rel.endswith(".py")
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            # subprocess.run([sys.executable, "-m", "pip", "install", ...]) reads as a command
            probe = re.sub(r"[\"',\[\]]", " ", line) if python else line
            if _FETCHERS.search(line) and (hosts := _remote_hosts(line)):
                what = f"downloads from {hosts[0]} at grade time"
            elif (m := _INSTALLERS.search(probe)) and not _OFFLINE_FLAGS.search(probe):
                what = f"installs at grade time ({m.group(0).strip()!r})"
            else:
                continue
            findings.append(finding(
                GRADE_TIME_NETWORK, "error",
                f"{rel} line {number} {what}; the verifier must run offline with what the image "
                "provides (install it in environment/Dockerfile instead)",
                file=rel, line=number, evidence=raw))
    return findings


# What a verifier run prints when it reached for the network inside an offline sandbox. Name
# resolution failures and "unreachable" mean the internet unless the line names a local host (a
# sidecar the sandbox lacks is the task's own trouble); "refused" and timeouts count only with a
# remote host on the line, because a nop trial's tests legitimately get "Connection refused"
# from the task's own server that nothing started.
_ALWAYS_NETWORK = re.compile(
    r"Could not resolve host|Temporary failure in name resolution|Name or service not known|"
    r"Temporary failure resolving|nodename nor servname|getaddrinfo (?:failed|ENOTFOUND|EAI_AGAIN)|"
    r"\bENOTFOUND\b|\bEAI_AGAIN\b|failed to lookup address information|dns error|"
    r"Network is unreachable|No route to host|Could not fetch URL|"
    r"unable to access '(?:https?|git)://", re.I)
# urllib3's NewConnectionError line names no host and says "Connection refused" when a test hits
# localhost with nothing listening, so it counts only beside a remote host like the rest.
_IF_REMOTE = re.compile(r"Connection refused|Connection timed out|timed out|Failed to connect|"
                        r"Max retries exceeded|Could not connect|NewConnectionError|"
                        r"Failed to establish a new connection", re.I)
_HOST_WORD = re.compile(r"host=['\"]?([\w.:-]+)|resolve host:?\s*'?([\w.-]+)|"
                        r"resolving '([\w.-]+)'|connect to ([\w.-]+)(?: port|:\d)|"
                        r"lookup ([\w.-]+) on|host name \"([\w.-]+)\"|ENOTFOUND ([\w.-]+)", re.I)


def _hosts_named(line: str) -> list[str]:
    named = [next(g for g in m.groups() if g) for m in _HOST_WORD.finditer(line)]
    return named + [a or b for a, b in _URL_HOST.findall(line)]


def network_attempts_in_output(text: str, limit: int = 5) -> list[str]:
    """The lines of a verifier's output that show it tried the network (at most `limit`,
    distinct, in order). Empty when it did not."""
    found: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line in found:
            continue
        hosts = _hosts_named(line)
        local_only = bool(hosts) and not any(is_remote_host(h) for h in hosts)
        if _ALWAYS_NETWORK.search(line) and not local_only:
            found.append(line[:300])
        elif _IF_REMOTE.search(line) and any(is_remote_host(h) for h in hosts):
            found.append(line[:300])
        if len(found) >= limit:
            break
    return found


# --------------------------------------------------------------------------------------------
# Flaky verifier


@dataclass
class FlakyVerdict:
    """Repeated trials of one kind on the same state that disagree."""

    kind: str  # "nop" | "oracle"
    rewards: list[float | None]
    varied_tests: dict[str, list[str]] = field(default_factory=dict)  # name -> outcome per run

    @property
    def reason(self) -> str:
        runs = len(self.rewards)
        parts = []
        if len({_reward_key(r) for r in self.rewards}) > 1:
            parts.append("rewards " + ", ".join("none" if r is None else f"{r:g}"
                                                for r in self.rewards))
        if self.varied_tests:
            names = sorted(self.varied_tests)
            shown = "; ".join(f"{n} ({'/'.join(self.varied_tests[n])})" for n in names[:8])
            more = f" and {len(names) - 8} more" if len(names) > 8 else ""
            parts.append(f"tests that varied: {shown}{more}")
        return (f"the verifier is flaky: {runs} {self.kind or 'repeated'} trials of the same "
                f"state disagree ({'; '.join(parts)})")

    def to_finding(self) -> dict:
        return finding(FLAKY, "error", self.reason, file="tests/",
                       evidence="\n".join(f"{n}: {', '.join(o)}"
                                          for n, o in sorted(self.varied_tests.items())))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "rewards": self.rewards, "varied_tests": self.varied_tests,
                "reason": self.reason}


def _get(run: Any, name: str, default: Any = None) -> Any:
    return run.get(name, default) if isinstance(run, Mapping) else getattr(run, name, default)


def _reward_key(reward: float | None) -> float | None:
    if reward is None or (isinstance(reward, float) and math.isnan(reward)):
        return None
    return round(float(reward), 6)


def compare_repeated_trials(runs: Sequence[Any], kind: str = "") -> FlakyVerdict | None:
    """A FlakyVerdict when runs of the same trial (objects or dicts with `reward` and
    `test_results` = [{name, outcome}], e.g. validation.TrialOutcome) differ in reward or in any
    test's outcome; None when they agree or there are fewer than two runs. A test that some runs
    report and others do not varied too (outcome "absent")."""
    if len(runs) < 2:
        return None
    rewards = [_get(run, "reward") for run in runs]
    outcomes: list[dict[str, str]] = []
    for run in runs:
        seen: dict[str, str] = {}
        for result in _get(run, "test_results", None) or []:
            name = str(_get(result, "name", ""))
            if name:
                seen[name] = str(_get(result, "outcome", "")).lower()
        outcomes.append(seen)
    names = sorted(set().union(*outcomes))
    varied = {}
    for name in names:
        per_run = [o.get(name, "absent") for o in outcomes]
        if len(set(per_run)) > 1:
            varied[name] = per_run
    if not varied and len({_reward_key(r) for r in rewards}) == 1:
        return None
    return FlakyVerdict(kind=kind or str(_get(runs[0], "kind", "") or ""), rewards=rewards,
                        varied_tests=varied)


# --------------------------------------------------------------------------------------------
# Tests that only check existence

_EXISTS_CALLS = {"exists", "isfile", "isdir", "lexists", "is_file", "is_dir", "is_symlink",
                 "access", "islink"}
_SIZE_CALLS = {"getsize"}
_READ_CALLS = {"read", "read_text", "read_bytes", "readlines", "readline"}
_LISTING_CALLS = {"listdir", "glob", "iterdir", "rglob", "scandir"}
# Calls that only build paths or print: they do not check anything about content.
_NEUTRAL_CALLS = {"Path", "PurePath", "PosixPath", "join", "expanduser", "abspath", "str",
                  "open", "stat", "print", "len", "list", "sorted", "resolve", "with_suffix",
                  "joinpath", "format", "fspath"} | _EXISTS_CALLS | _SIZE_CALLS | _READ_CALLS \
    | _LISTING_CALLS
_UNITTEST_ASSERTS = {"assertTrue", "assertFalse", "assertGreater", "assertGreaterEqual",
                     "assertNotEqual", "assertIsNotNone"}


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _value_kind(node: ast.AST, env: dict[str, ast.AST], depth: int = 0) -> str | None:
    """"exists" (a bool about a path), "size" (a number about a file), "content" (what a read
    returned), "const" (a literal), or None for anything that looks at content."""
    if depth > 4:
        return None
    if isinstance(node, ast.Constant):
        return "const"
    if isinstance(node, ast.Name):
        bound = env.get(node.id)
        return _value_kind(bound, env, depth + 1) if bound is not None else None
    if isinstance(node, ast.Attribute) and node.attr == "st_size":
        return "size"
    if isinstance(node, ast.Call):
        name = _call_name(node)
        if name in _EXISTS_CALLS:
            return "exists"
        if name in _SIZE_CALLS:
            return "size"
        if name in _READ_CALLS or name in _LISTING_CALLS:
            return "content"
        if name == "len" and node.args and _value_kind(node.args[0], env, depth + 1) == "content":
            return "size"
    return None


def _existence_only(node: ast.AST, env: dict[str, ast.AST]) -> bool:
    if isinstance(node, ast.BoolOp):
        return all(_existence_only(v, env) for v in node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _existence_only(node.operand, env)
    if isinstance(node, ast.Compare):
        if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            return False
        sides = [node.left, *node.comparators]
        kinds = [_value_kind(side, env) for side in sides]
        if None in kinds or all(k == "const" for k in kinds):
            return False
        # Comparing what was read with anything but emptiness checks content.
        for side, k in zip(sides, kinds):
            while isinstance(side, ast.Name):
                side = env[side.id]
            if k == "const" and "content" in kinds and side.value not in ("", b"", None, 0):
                return False
        return True
    return _value_kind(node, env) in ("exists", "size", "content", "const")


def _assert_exprs(fn: ast.AST) -> tuple[list[ast.AST], bool]:
    """(the expressions the test asserts, whether it calls anything that may check content)."""
    exprs: list[ast.AST] = []
    other_calls = False
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            exprs.append(node.test)
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            if name in _UNITTEST_ASSERTS and node.args:
                exprs.append(node.args[0])
            elif name not in _NEUTRAL_CALLS:
                other_calls = True
    return exprs, other_calls


def _test_functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
                "test"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        item.name.startswith("test"):
                    yield f"{node.name}.{item.name}", item


def _python_existence_tests(text: str) -> tuple[list[tuple[str, int, str]], int]:
    """([(test name, its line, "line: first assertion")] of the existence-only tests, number of
    tests)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return [], 0
    module_env = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
                  for t in n.targets if isinstance(t, ast.Name)}
    lines = text.splitlines()
    found = []
    functions = list(_test_functions(tree))
    for name, fn in functions:
        env = dict(module_env)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                env.update({t.id: node.value for t in node.targets if isinstance(t, ast.Name)})
            elif isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
                env[node.optional_vars.id] = node.context_expr
        exprs, other_calls = _assert_exprs(fn)
        if exprs and not other_calls and all(_existence_only(e, env) for e in exprs):
            first = next(n for n in ast.walk(fn) if isinstance(n, (ast.Assert, ast.Call))
                         and (isinstance(n, ast.Assert) or _call_name(n) in _UNITTEST_ASSERTS))
            found.append((name, fn.lineno, f"{first.lineno}: {lines[first.lineno - 1].strip()}"))
    return found, len(functions)


_SHELL_EXISTS = re.compile(r"(?:\[\[?|\btest)\s+!?\s*-(?:[efsdrL])\s+(\S+)")
# Any of these in a shell verifier means it looks at content or behaviour somewhere.
_SHELL_CONTENT = re.compile(
    r"\b(pytest|python3?|diff|cmp|grep|egrep|jq|awk|sed|sha\d+sum|md5sum|node|ruby|perl|bats|"
    r"go\s+test|cargo\s+test|make\s+test|wc|head|tail|cut|sort|curl|wget|nc|psql|sqlite3|"
    r"mysql|redis-cli)\b|\s(?:==?|!=|-eq|-ne|-lt|-le|-gt|-ge)\s|\$\(")


def _shell_existence_tests(text: str) -> list[tuple[str, int, str]]:
    code = [(n, raw) for n, raw in enumerate(text.splitlines(), 1)
            if raw.strip() and not raw.strip().startswith("#")]
    if any(_SHELL_CONTENT.search(raw) for _, raw in code):
        return []
    return [(m.group(0).strip(), n, f"{n}: {raw.strip()}") for n, raw in code
            for m in _SHELL_EXISTS.finditer(raw)]


def existence_only_tests(test_files: Mapping[str, str]) -> list[dict]:
    """A warning per tests/ file naming the tests whose every assertion only checks that a path
    exists or is non-empty (pytest functions, unittest methods, or a shell verifier made only of
    `[ -f x ]` / `test -s x`). Such a verifier passes any output of the right name."""
    findings = []
    for rel, text in sorted(test_files.items()):
        if rel.endswith(".py"):
            tests, total = _python_existence_tests(text)
            what = f"{len(tests)} of its {total} tests only check"
        elif rel.endswith(".sh"):
            tests = _shell_existence_tests(text)
            what = "it checks nothing but"
        else:
            continue
        if not tests:
            continue
        names = [name for name, _, _ in tests]
        findings.append(finding(
            EXISTENCE_ONLY_TESTS, "warning",
            f"{rel}: {what} that outputs exist or are non-empty, not what they contain: "
            f"{', '.join(names[:10])}{' ...' if len(names) > 10 else ''}",
            file=rel, line=tests[0][1],
            evidence="\n".join(source for _, _, source in tests[:6])))
    return findings
