"""Partial solutions at a finer grain than solve.sh's commands: truncations of a Python or shell
script embedded in a heredoc, cut at statement boundaries, so the weak-verifier check still runs
when the whole solution is one `python3 - <<'EOF'` block.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Sequence

from facet_site.lib.task_defects_findings import NO_PARTIAL_SOLUTION, finding

_HEREDOC = re.compile(r"(?<!<)<<(-?)\s*(['\"]?)([A-Za-z_][\w-]*)\2")  # not a <<< here-string
_PYTHON_OPENER = re.compile(r"\bpython(?:3(?:\.\d+)?)?\b|\.py\b")
_SHELL_OPENER = re.compile(r"^\s*(?:\S+=\S+\s+)*(?:bash|sh)(?:\s+-\w+)*\s*(?:-\s*)?<<|"
                           r"\.(?:ba)?sh\b")
_STDOUT_USED = re.compile(r"(?<![<2&])>(?!&)|\|")
_WRITE_TARGET = re.compile(r"(?:cat|tee)\b[^<>|]*?(?:>>?\s*|\s)([\w./-]+\.(?:py|sh))\b")


@dataclass
class EmbeddedScript:
    language: str  # "python" | "shell"
    start: int  # index of the body's first line in solve.sh's lines
    end: int  # index of the delimiter line that closes the body
    opener_line: int  # 1-based line of the heredoc's command
    body: str
    stdout_is_output: bool = False  # its stdout is redirected or piped, so prints are work


@dataclass
class PartialPlan:
    """What derive_fine_partials made and, when it made nothing, why."""

    partials: list[str] = field(default_factory=list)
    grain: str = ""  # which of "commands", "written", "statements" were used, joined by "+"
    reason: str | None = None


def embedded_scripts(solve_sh: str) -> list[EmbeddedScript]:
    """Python and shell scripts that solve.sh feeds to an interpreter or writes to a .py/.sh
    file through a heredoc. Other heredocs (config files, data) are not scripts to cut."""
    lines = solve_sh.splitlines(keepends=True)
    scripts = []
    i = 0
    while i < len(lines):
        m = _HEREDOC.search(lines[i])
        if not m:
            i += 1
            continue
        strip_tabs, delimiter = m.group(1) == "-", m.group(3)
        end = next((j for j in range(i + 1, len(lines))
                    if (lines[j].lstrip("\t") if strip_tabs else lines[j]).rstrip("\r\n")
                    == delimiter), None)
        if end is None:  # unterminated: bash would read to the end of the file; not a script
            i += 1
            continue
        opener = lines[i]
        bare = opener[:m.start()] + opener[m.end():]  # `cat <<EOF > run.py` reads as `cat > run.py`
        language = None
        target = _WRITE_TARGET.search(bare)
        if target:
            language = "python" if target.group(1).endswith(".py") else "shell"
        elif _PYTHON_OPENER.search(bare):
            language = "python"
        elif _SHELL_OPENER.search(opener):
            language = "shell"
        if language:
            runs = [bare]
            if target:
                runs = [line for line in lines[end + 1:] if target.group(1) in line]
            scripts.append(EmbeddedScript(language, i + 1, end, i + 1, "".join(lines[i + 1:end]),
                                          any(_STDOUT_USED.search(r) for r in runs)))
        i = end + 1
    return scripts


def _cut_counts(n: int, max_count: int) -> list[int]:
    # Most complete first: the likeliest to fool a verifier (as validation does for commands).
    counts: list[int] = []
    for k in (n - 1, n // 2, n // 3):
        if 1 <= k < n and k not in counts:
            counts.append(k)
    return counts[:max_count]


MAX_WRITTEN_PARTIALS = 3  # partial solutions the model wrote that one validation runs

_REPORTING_CALLS = {"print", "pprint", "debug", "info", "warning", "log", "write"}


def _is_work(stmt: ast.stmt, prints_matter: bool = False) -> bool:
    """Imports, definitions, a docstring, self-checks (assert) and (unless stdout is the output)
    printing or logging prepare or report; everything else does something. A cut that only drops
    a closing print("done") or assert would leave the task solved and reject a good verifier."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef, ast.Assert, ast.Pass)):
        return False
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return False
    reporting = (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                 and _call_id(stmt.value.func) in _REPORTING_CALLS)
    return prints_matter or not reporting


def _call_id(func: ast.AST) -> str:
    """print for print(...), info for log.info(...), write for sys.stdout.write(...)."""
    if isinstance(func, ast.Attribute):
        if func.attr == "write" and _call_id(func.value) not in ("stdout", "stderr"):
            return ""  # f.write(...) writes an output file: that is work
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _stmt_start(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", [])
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _called_function(tree: ast.Module) -> ast.FunctionDef | None:
    """The function a script's top level calls to do its work (`main()`), when there is one."""
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for stmt in tree.body:
        calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id in defs]
        if _is_work(stmt) and calls:
            return defs[calls[0].func.id]
    return None


def _python_cuts(body: str, max_count: int, prints_matter: bool = False
                 ) -> tuple[list[tuple[str, int, int]], str | None]:
    """([(truncated body, k, n)], reason when none). Cuts keep the script valid Python."""
    try:
        tree = ast.parse(body)
    except SyntaxError as exc:
        return [], (f"it does not parse as Python (line {exc.lineno}: {exc.msg}; an unquoted "
                    "heredoc delimiter lets the shell rewrite it)")
    lines = body.splitlines(keepends=True)
    work = [s for s in tree.body if _is_work(s, prints_matter)]
    if len(work) >= 2:
        return [("".join(lines[:_stmt_start(work[k]) - 1]), k, len(work))
                for k in _cut_counts(len(work), max_count)], None
    fn = _called_function(tree)
    inner = [s for s in fn.body if _is_work(s, prints_matter)] if fn else []
    if len(inner) < 2:
        return [], "it has fewer than two top-level statements that do work"
    tail = "".join(lines[fn.end_lineno:])
    cuts = []
    for k in _cut_counts(len(inner), max_count):
        head = "".join(lines[:_stmt_start(inner[k]) - 1])
        cuts.append((head + tail, k, len(inner)))
    return cuts, None


def _shell_cuts(body: str, max_count: int) -> tuple[list[tuple[str, int, int]], str | None]:
    # The embedded script is cut exactly as validation cuts solve.sh (bash decides where a
    # command ends); imported when called, as the validation package will import this module.
    from facet_site.lib.validation.partials import derive_partial_solutions

    cuts = []
    for partial in derive_partial_solutions(body, max_count=max_count):
        m = re.search(r"# facet: partial solution, (\d+) of (\d+) commands\n$", partial)
        cuts.append((partial, int(m.group(1)), int(m.group(2))) if m else (partial, 0, 0))
    if not cuts:
        return [], "it has fewer than two commands that do work"
    return cuts, None


def _script_partials(solve_sh: str, max_count: int) -> tuple[list[str], list[str]]:
    lines = solve_sh.splitlines(keepends=True)
    partials, reasons = [], []
    for script in embedded_scripts(solve_sh):
        if script.language == "python":
            cuts, reason = _python_cuts(script.body, max_count, script.stdout_is_output)
        else:
            cuts, reason = _shell_cuts(script.body, max_count)
        if reason:
            reasons.append(f"the {script.language} script at line {script.opener_line}: {reason}")
        for body, k, n in cuts:
            if body and not body.endswith("\n"):
                body += "\n"
            text = "".join(lines[:script.start]) + body + "".join(lines[script.end:])
            text = text.rstrip("\n") + (f"\n# facet: partial solution, {k} of {n} statements "
                                        f"of the script at line {script.opener_line}\n")
            partials.append(text)
    return partials, reasons


def plan_partials(solve_sh: str, max_count: int = 3, *, written: Sequence[str] = ()
                  ) -> PartialPlan:
    """Partial solutions for the weak-verifier check, at most max_count, and the reason when
    there are none.

    Command-level partials (validation.derive_partial_solutions) come first, so a task that has
    them is checked exactly as before; then `written`, partial solve.sh texts the model wrote
    during construction (up to MAX_WRITTEN_PARTIALS, always all of them: the command cuts give
    up places to them, keeping at least the most complete cut, so the model's partials run beside
    the mechanical ones and the total may exceed max_count); truncations of embedded scripts fill
    the remaining places, which for a solve.sh that is one heredoc means all of them.
    """
    from facet_site.lib.validation.partials import derive_partial_solutions

    written = [p for p in written if p.strip()][:MAX_WRITTEN_PARTIALS]
    by_command = derive_partial_solutions(solve_sh, max_count=max_count)
    by_statement, reasons = _script_partials(solve_sh, max_count)
    merged: list[str] = []
    used = []
    limits = {"commands": max(max_count - len(written), 1), "written": len(written)}
    for grain, source in (("commands", by_command), ("written", written),
                          ("statements", by_statement)):
        room = limits.get(grain, max_count - len(merged))
        fresh = [p for p in source if p.strip() and p not in merged][:max(room, 0)]
        if fresh:
            merged += fresh
            used.append(grain)
    grain = "+".join(used)
    reason = None
    if not merged:
        why = "; ".join(reasons) if reasons else "it embeds no Python or shell script"
        reason = f"solve.sh has fewer than two commands that do work and {why}"
    return PartialPlan(partials=merged, grain=grain, reason=reason)


def derive_fine_partials(solve_sh: str, max_count: int = 3) -> list[str]:
    """Partial solutions (whole solve.sh texts) at command and at embedded-statement grain;
    plan_partials says why when this is empty."""
    return plan_partials(solve_sh, max_count).partials


def no_partial_finding(plan: PartialPlan) -> dict | None:
    """A warning recording that the weak-verifier check could not run, and why."""
    if plan.partials:
        return None
    return finding(NO_PARTIAL_SOLUTION, "warning",
                   f"no partial solution could be derived, so nothing checked that the verifier "
                   f"rejects half the work: {plan.reason}",
                   file="solution/solve.sh")
