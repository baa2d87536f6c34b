"""Partial solutions: solve.sh cut short at command boundaries, which the verifier must not
accept (a verifier that passes half the work is caught), and the partial solutions the model
wrote during construction, stored with the task under solution/partials/. Django-free.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

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
        # bash -n accepts a line continued by a backslash at the end of its input, but the command
        # goes on in the next line (`a \` then `  | b`): never a boundary.
        if not pending.rstrip("\n").endswith("\\") and _is_complete_shell(pending):
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


# --- partial solutions the model wrote ------------------------------------------------------------
# The solution stage also returns two or three partial solutions (scripts that stop before a
# requirement). They are stored with the task as solution/partials/NN-<name>.sh, so reviewers see
# them and an export carries them, and validation runs them beside the mechanical cuts above
# (task_defects.plan_partials: command cuts first, then these, then statement cuts).

PARTIALS_DIR = "solution/partials/"
_NAME = re.compile(r"[^a-z0-9]+")


def partial_solution_files(partials) -> dict[str, str]:
    """path -> text for the model's partial solutions, each a dict or object with `name`,
    `stops_before` and `solve_sh`; the requirement it stops before goes into a comment under the
    shebang, so the file says what it is for."""
    files: dict[str, str] = {}
    for number, partial in enumerate(partials or [], 1):
        get = partial.get if isinstance(partial, dict) else (lambda k, p=partial: getattr(p, k, ""))
        body = str(get("solve_sh") or "")
        if not body.strip():
            continue
        name = _NAME.sub("-", str(get("name") or "partial").lower()).strip("-")[:40] or "partial"
        note = " ".join(str(get("stops_before") or "").split())[:300]
        lines = body.splitlines(keepends=True)
        comment = f"# facet partial solution: stops before: {note}\n" if note else ""
        if lines and lines[0].startswith("#!"):
            text = lines[0] + comment + "".join(lines[1:])
        else:
            text = "#!/bin/bash\n" + comment + body
        files[f"{PARTIALS_DIR}{number:02d}-{name}.sh"] = text if text.endswith("\n") else text + "\n"
    return files


def written_partials(files) -> list[str]:
    """The partial solutions stored with a task (path -> text or bytes), in file order."""
    out = []
    for path in sorted(files):
        if path.startswith(PARTIALS_DIR) and path.endswith(".sh"):
            data = files[path]
            out.append(data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data))
    return out


def partials_stored_in(task_dir) -> list[str]:
    """written_partials of a Harbor task directory on disk."""
    root = Path(task_dir) / PARTIALS_DIR
    if not root.is_dir():
        return []
    return written_partials({f"{PARTIALS_DIR}{p.name}": p.read_bytes() for p in sorted(root.glob("*.sh"))
                             if p.is_file()})
