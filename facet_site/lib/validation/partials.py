"""Partial solutions: solve.sh cut short at command boundaries, which the verifier must not
accept (a verifier that passes half the work is caught). Django-free.
"""
from __future__ import annotations

import re
import subprocess

_SETUP_COMMAND = re.compile(r"^\s*(set|cd|export|shopt|trap|umask|:|true)\b|^\s*$")


def _is_complete_shell(text: str) -> bool:
    # bash itself decides where a command ends: heredocs, quotes, if/for/case, functions.
    # A prefix whose heredoc runs to end-of-file parses with only a warning, so any output
    # counts as incomplete.
    try:
        proc = subprocess.run(["bash", "-n"], input=text.encode(), capture_output=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        # No bash on this host (or it hung): cut at lines that do not continue, as a fallback.
        return not text.rstrip("\n").endswith("\\")
    return proc.returncode == 0 and not proc.stderr.strip()


def solution_steps(solve_sh: str, max_lines: int = 400) -> list[str]:
    """solve.sh split into top-level commands (each may span lines), comments kept in place."""
    lines = solve_sh.splitlines(keepends=True)
    if len(lines) > max_lines:  # one bash -n per line; longer scripts are split coarsely
        lines = lines[:max_lines - 1] + ["".join(lines[max_lines - 1:])]
    steps: list[str] = []
    pending = ""
    for line in lines:
        pending += line if line.endswith("\n") else line + "\n"
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            continue  # comments and blank lines join the next command
        if _is_complete_shell(pending):
            steps.append(pending)
            pending = ""
    if pending.strip():
        steps.append(pending)
    return steps


def derive_partial_solutions(solve_sh: str, max_count: int = 3) -> list[str]:
    """Truncations of solve.sh at command boundaries: about a third, a half, and all but the
    last of its substantive commands (setup such as `set -e` or `cd` does not count).

    Each must leave the task unsolved; a verifier that gives reward 1 to one of them checks too
    little. A solution with fewer than two substantive commands yields none.
    """
    steps = solution_steps(solve_sh)
    substantive = [i for i, step in enumerate(steps)
                   if not all(_SETUP_COMMAND.match(line) or line.strip().startswith("#")
                              for line in step.splitlines())]
    n = len(substantive)
    if n < 2:
        return []
    counts: list[int] = []
    for k in (n - 1, n // 2, n // 3):  # most complete first: the likeliest to fool a verifier
        if 1 <= k < n and k not in counts:
            counts.append(k)
    partials = []
    for k in counts[:max_count]:
        cut = substantive[k]  # everything before the (k+1)-th substantive command
        body = "".join(steps[:cut]).rstrip("\n") + "\n"
        partials.append(body + f"# facet: partial solution, {k} of {n} commands\n")
    return partials
