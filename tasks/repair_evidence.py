"""The validation evidence a repair round is given, and the token budget its prompts stay within.

`gather` reads a failed validation as a repair needs it: which step failed (build, solve.sh, the
verifier, the static checks) in which trial; the tests at fault with their assertion messages (as
facet_site.lib.verifier_output read them from the verifier's JUnit or CTRF report); the tails of
the failing trial's solve.sh and test.sh output; how each nop, oracle and partial trial went and
the script of a partial the tests accepted; the static findings and flaky verdicts; and the earlier
rounds of the same task with their diffs and outcomes. The result is plain JSON: the repair round
stores it (RepairRound.evidence) and the task page's repair timeline shows what each round was
given. `render` turns it into the text every repair and router prompt quotes.

Budgets are in tokens, estimated at four characters a token as the LLM limiter does
(facet_site.lib.llm.limits.estimate_tokens); BUDGET below is the one place for their numbers.
Logs keep their tail (where the error is) and lose their head; messages, scripts and files keep
their head and lose their tail, so an assertion message always starts with what was asserted.
`fit` then holds a whole rendered prompt to PROMPT_TOKENS, shortening the largest parts first.
"""
from __future__ import annotations

import difflib
import math
from pathlib import Path

from facet_site.lib.llm import Prompt

from .models import RepairRound, Task, Trial, Validation, ValidationStatus

CHARS_PER_TOKEN = 4
# A whole repair or router prompt (system and user message) at most, in tokens.
PROMPT_TOKENS = 24_000
# What each part may take (tokens). The parts together stay below PROMPT_TOKENS with room for the
# prompt's own text; `fit` enforces the total whatever the parts hold.
BUDGET = {
    "tests": 1_600,  # the tests at fault, with their messages
    "test_message": 250,  # one assertion message (its head)
    "solution_output": 1_000,  # solve.sh's output of the failing trial (its tail)
    "verifier_output": 1_200,  # test.sh's output of the failing trial (its tail)
    "build_log": 1_500,  # the image build's log (its tail), when the build failed
    "trials": 300,  # one line per nop, oracle and partial trial
    "partial_script": 600,  # a partial solution the tests accepted (its head)
    "findings": 900,  # static findings, errors first, and flaky verdicts
    "previous_rounds": 2_000,  # earlier rounds of this task: what changed and what came of it
    "round_diff": 600,  # one earlier round's diff (its head)
    # the task as the prompts quote it
    "scenario": 1_500,
    "e0": 3_000,
    "dockerfile": 800,
    "instruction": 1_500,
    "solve_sh": 2_500,
    "test_sh": 500,
    "test_py": 3_000,
}
MAX_TESTS = 30  # tests listed with their messages; the rest by name only
MAX_FINDINGS = 12
# Derived from the artifacts (the content hash of the files); a repair never writes it.
NOT_DIFFED = {"task.toml"}


def tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def prompt_tokens(messages: list[dict]) -> int:
    return sum(tokens(str(m.get("content") or "")) for m in messages)


def keep_head(text: str, budget_tokens: int) -> str:
    """The text's beginning within the budget, saying how much of its end was cut."""
    limit = budget_tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    note = f"\n[... {{}} more characters cut here]"
    keep = max(0, limit - len(note) - 8)
    return text[:keep] + note.format(len(text) - keep)


def keep_tail(text: str, budget_tokens: int) -> str:
    """The text's end within the budget (where a log's error is), saying how much was cut before it."""
    limit = budget_tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    note = "[... the first {} characters cut here]\n"
    keep = max(0, limit - len(note) - 8)
    return note.format(len(text) - keep) + text[len(text) - keep:]


# --------------------------------------------------------------------------------------------
# Gathering


def _failing_trial(validation: Validation) -> Trial | None:
    trials = list(validation.trials.order_by("id"))
    return (next((t for t in trials if t.failure and t.failure == validation.failure), None)
            or next((t for t in trials if not t.passed), None))


def _failed_step(validation: Validation, trial: Trial | None) -> str:
    if validation.failure == "build_failed":
        return "build"
    if trial is None:
        return "checks"
    if trial.failure in ("solution_failed", "solution_timeout"):
        return "solution"
    return "verifier"


def _tests(trial: Trial) -> dict:
    rows = list(trial.tests.values("name", "outcome", "message"))
    failed = [r for r in rows if r["outcome"] in ("failed", "error")]
    if trial.kind == "oracle":
        at_fault, label = failed, "failed after the reference solution"
    elif trial.failure in ("verifier_no_reward", "verifier_timeout"):
        at_fault, label = failed, "failed or errored"
    else:  # a nop or partial trial the tests accepted: the tests that passed are the weak ones
        at_fault, label = [r for r in rows if r["outcome"] == "passed"], "passed without the work being done"
    shown, used = [], 0
    for row in at_fault[:MAX_TESTS]:
        message = keep_head(row["message"] or "", BUDGET["test_message"])
        cost = tokens(row["name"]) + tokens(message) + 4
        if shown and used + cost > BUDGET["tests"]:
            break
        shown.append({"name": row["name"], "outcome": row["outcome"], "message": message})
        used += cost
    return {"trial": trial.name, "label": label, "total": len(rows), "failed": len(failed),
            "shown": shown, "more": [r["name"] for r in at_fault[len(shown):]][:50]}


def _output(text: str, budget: int, trial: Trial | None = None) -> dict | None:
    text = (text or "").rstrip()
    if not text:
        return None
    kept = keep_tail(text, budget)
    return {"trial": trial.name if trial else "", "text": kept, "chars": len(text)}


def _partial_script(trial: Trial) -> str:
    path = Path(trial.logs_path) / "solve.sh" if trial.logs_path else None
    try:
        text = path.read_text(encoding="utf-8", errors="replace") if path and path.is_file() else ""
    except OSError:
        text = ""
    return keep_head(text, BUDGET["partial_script"])


def _trials(validation: Validation) -> tuple[list[dict], list[dict]]:
    lines, partials = [], []
    for t in validation.trials.order_by("id"):
        row = {"name": t.name, "kind": t.kind, "reward": t.reward, "passed": t.passed, "failure": t.failure,
               "solution_exit_code": t.solution_exit_code}
        lines.append(row)
        if t.kind == "partial":
            partials.append({**row, "script": _partial_script(t) if t.failure == "partial_unexpected_pass" else ""})
    return lines, partials


def findings(validation: Validation) -> list[str]:
    """The static findings (errors first) and flaky verdicts, one line each with where and what."""
    ordered = sorted(validation.static_findings or [], key=lambda f: f.get("severity") != "error")
    lines = []
    for f in ordered[:MAX_FINDINGS]:
        where = f.get("file") or ""
        if where and f.get("line"):
            where += f":{f['line']}"
        line = f"[{f.get('severity')}] {f.get('check')}{f' at {where}' if where else ''}: {f.get('message')}"
        if f.get("evidence"):
            line += "\n  " + keep_head(str(f["evidence"]), 150).replace("\n", "\n  ")
        lines.append(line)
    for verdict in (validation.settings or {}).get("flaky") or []:
        lines.append(f"[error] flaky {verdict.get('kind')} runs: {verdict.get('reason')}")
    used, kept = 0, []
    for line in lines:
        used += tokens(line)
        if kept and used > BUDGET["findings"]:
            kept.append(f"({len(lines) - len(kept)} more findings not shown)")
            break
        kept.append(line)
    return kept


def round_diff(old: dict, new: dict) -> str:
    """A unified diff of what one repair round changed (task.toml, derived, left out)."""
    chunks = []
    for path in sorted(set(old) | set(new)):
        if path in NOT_DIFFED or old.get(path) == new.get(path):
            continue
        chunks.extend(difflib.unified_diff(
            (old.get(path) or "").splitlines(keepends=True), (new.get(path) or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if path in old else "/dev/null", tofile=f"b/{path}" if path in new else "/dev/null"))
    text = "".join(line if line.endswith("\n") else line + "\n" for line in chunks)
    return text or "(no file changed)"


def _outcome_of(version_id: int | None) -> dict:
    row = (Validation.objects.filter(version_id=version_id, recheck__isnull=True,
                                     status__in=[ValidationStatus.DONE, ValidationStatus.ERROR])
           .order_by("accepted", "-id").values("accepted", "failure", "reason").first()) if version_id else None
    if row is None:
        return {"outcome": "not validated yet"}
    if row["accepted"] and not row["failure"]:
        return {"outcome": "validated"}
    return {"outcome": "still failing", "failure": row["failure"], "reason": keep_head(row["reason"] or "", 120)}


def _previous_rounds(task: Task) -> list[dict]:
    rounds = list(RepairRound.objects.filter(task=task).select_related("from_version", "to_version")
                  .order_by("number"))
    out = []
    for r in rounds:
        diff = round_diff(r.from_version.files if r.from_version else {}, r.to_version.files if r.to_version else {})
        out.append({"number": r.number, "artifact": r.artifact, "routed_by": r.routed_by,
                    "router_reason": keep_head(r.router_reason or "", 100), "failure": r.failure,
                    "diagnosis": keep_head((r.evidence or {}).get("diagnosis", ""), 150),
                    "diff": keep_head(diff, BUDGET["round_diff"]), **_outcome_of(r.to_version_id)})
    # Over the budget, the oldest rounds lose their diffs first (their one-line summary stays).
    for r in out:
        if sum(tokens(x["diff"]) + 60 for x in out) <= BUDGET["previous_rounds"]:
            break
        r["diff"] = "(diff left out: over the budget)"
    return out


def gather(validation: Validation, *, task: Task) -> dict:
    """What the validation saw, as the repair's prompts and the timeline read it (JSON, capped)."""
    trial = _failing_trial(validation)
    step = _failed_step(validation, trial)
    trials, partials = _trials(validation)
    evidence = {
        "validation": validation.pk, "failure": validation.failure, "reason": validation.reason,
        "failed_step": step, "trial": trial.name if trial else "",
        "solution_exit_code": trial.solution_exit_code if trial else None,
        "tests": _tests(trial) if trial and step == "verifier" else None,
        "solution_output": _output(trial.solution_output, BUDGET["solution_output"], trial) if trial else None,
        "verifier_output": _output(trial.verifier_output, BUDGET["verifier_output"], trial) if trial else None,
        "build_log": _output(validation.build_log, BUDGET["build_log"]) if step == "build" else None,
        "trials": trials, "partials": partials,
        "findings": findings(validation),
        "previous_rounds": _previous_rounds(task),
    }
    if trial is not None and step == "solution":
        # which tests the broken run still passed tells the router how far solve.sh got
        evidence["tests"] = _tests(trial) if trial.tests.exists() else None
    return evidence


# --------------------------------------------------------------------------------------------
# Rendering


def _fmt_reward(value) -> str:
    return "none" if value is None else f"{value:g}"


STEP_WORDS = {"build": "the image build", "solution": "solve.sh (the reference solution)",
              "verifier": "the verifier (tests/test.sh)", "checks": "the static checks of the task's files"}


def render(evidence: dict) -> str:
    """The evidence as the repair and router prompts quote it: most telling first."""
    out = [f"Failure type: {evidence['failure']}", f"Reason: {evidence['reason']}",
           f"Failed step: {STEP_WORDS.get(evidence['failed_step'], evidence['failed_step'])}"
           + (f", in the {evidence['trial']} trial" if evidence.get("trial") else "")
           + (f"; solve.sh exit code {evidence['solution_exit_code']}"
              if evidence.get("solution_exit_code") is not None else "")]
    tests = evidence.get("tests")
    if tests:
        out += ["", f"### Tests that {tests['label']} ({tests['trial']} trial; {tests['failed']} of "
                    f"{tests['total']} tests failed; from the verifier's test report)"]
        for t in tests["shown"]:
            out.append(f"- {t['name']} [{t['outcome']}]")
            if t["message"]:
                out.append("  " + t["message"].replace("\n", "\n  "))
        if tests["more"]:
            out.append(f"- and {len(tests['more'])} more: {', '.join(tests['more'])}")
    for key, what in (("solution_output", "solve.sh"), ("verifier_output", "test.sh")):
        block = evidence.get(key)
        if block:
            out += ["", f"### Output of {what} in the {block['trial']} trial (stdout and stderr interleaved; "
                        f"the last part of {block['chars']} characters)", "```", block["text"], "```"]
    if evidence.get("build_log"):
        block = evidence["build_log"]
        out += ["", f"### Build log (the last part of {block['chars']} characters)", "```", block["text"], "```"]
    if evidence.get("trials"):
        out += ["", "### Trials (nop: no solution, expected reward 0; oracle: solve.sh, expected 1; "
                    "partial: solve.sh cut short, expected below 1)"]
        for t in evidence["trials"]:
            code = f", solve.sh exit {t['solution_exit_code']}" if t.get("solution_exit_code") not in (None, 0) else ""
            out.append(f"- {t['name']}: reward {_fmt_reward(t['reward'])}{code} — "
                       + ("as expected" if t["passed"] else f"FAILED ({t['failure']})"))
    for p in evidence.get("partials") or []:
        if p.get("script"):
            out += ["", f"### {p['name']}: a partial solution the tests accepted (reward {_fmt_reward(p['reward'])})",
                    "```bash", p["script"], "```"]
    if evidence.get("findings"):
        out += ["", "### Static findings and flaky runs (check, where, matching content)"]
        out += [f"- {line}" for line in evidence["findings"]]
    rounds = evidence.get("previous_rounds") or []
    if rounds:
        out += ["", "### Earlier repair rounds of this task (do not repeat a change that did not work)"]
        for r in rounds:
            result = r["outcome"] + (f": {r['failure']} — {r['reason']}" if r.get("failure") else "")
            out.append(f"Round {r['number']}: regenerated the {r['artifact']} after {r['failure']} "
                       f"(routed by {r['routed_by']}{': ' + r['router_reason'] if r.get('router_reason') else ''}). "
                       f"Outcome: {result}.")
            if r.get("diagnosis"):
                out.append(f"  Diagnosis given: {r['diagnosis']}")
            out += ["```diff", r["diff"].rstrip("\n"), "```"]
    return "\n".join(out)


def artifact_values(files: dict[str, str]) -> dict[str, str]:
    """The task's own files as the repair and router prompts quote them, each within its budget."""
    return {
        "instruction": keep_head(files.get("instruction.md", ""), BUDGET["instruction"]),
        "dockerfile": keep_head(files.get("environment/Dockerfile", ""), BUDGET["dockerfile"]),
        "solve_sh": keep_head(files.get("solution/solve.sh", ""), BUDGET["solve_sh"]),
        "test_sh": keep_head(files.get("tests/test.sh", ""), BUDGET["test_sh"]),
        "test_py": keep_head(files.get("tests/test_outputs.py", ""), BUDGET["test_py"]),
    }


# Values `fit` may shorten, and which end each keeps.
TRIMMABLE = {**{name: keep_head for name in ("evidence", "e0_inventory", "e0_previews", "tools", "scenario_json",
                                             "instruction", "solve_sh", "test_py", "test_sh", "dockerfile",
                                             "files_json", "manifest_json")},
             "log": keep_tail}


def fit(prompt: Prompt, values: dict, budget: int = PROMPT_TOKENS) -> tuple[dict, int]:
    """The values, shortened where needed so the rendered prompt stays within `budget` tokens
    (the largest part loses a quarter at a time), and the prompt's size in tokens."""
    values = dict(values)
    size = prompt_tokens(prompt.messages(**values))
    while size > budget:
        name = max((k for k in TRIMMABLE if isinstance(values.get(k), str)), key=lambda k: len(values[k]),
                   default=None)
        if name is None or tokens(values[name]) < 50:
            break
        values[name] = TRIMMABLE[name](values[name], tokens(values[name]) * 3 // 4)
        size = prompt_tokens(prompt.messages(**values))
    return values, size
