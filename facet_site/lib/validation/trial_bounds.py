"""What a validation trial's record keeps of everything the task's code can inflate: process lists,
fs-diff paths, test results, reasons and reward keys, each capped (docs/operations.md), applied
once a trial ends and before anything stores or reports it. Django-free."""
from __future__ import annotations

from typing import Sequence

from facet_site.lib.validation.report import TrialOutcome, cap_text

# What a trial record keeps of everything task code can inflate (docs/operations.md): a fork
# bomb's thousands of identical processes become one line with a count, and no list or text the
# solution or verifier controls grows past these. Logs have their own cap (cap_text).
MAX_PROCESSES = 50  # distinct commands per list (processes started / ended), each with its count
MAX_COMMAND_CHARS = 300
MAX_PATHS = 200  # paths per fs-diff list (added, removed, modified); the totals stay
MAX_PATH_CHARS = 500
MAX_TEST_RESULTS = 500  # per trial, from the verifier's JUnit/CTRF report
MAX_TEST_NAME_CHARS = 500
MAX_TEST_MESSAGE_CHARS = 2000
MAX_REASON_CHARS = 4000
MAX_REWARD_KEYS = 50  # metrics kept from reward.json
MAX_REWARD_KEY_CHARS = 100


def count_commands(commands: Sequence[str], *, limit: int = MAX_PROCESSES) -> tuple[list[dict], int]:
    """Distinct commands (cut to MAX_COMMAND_CHARS) with how often each ran, most frequent first,
    at most `limit` of them; and how many runs the omitted commands account for."""
    counts: dict[str, int] = {}
    for command in commands:
        key = command[:MAX_COMMAND_CHARS]
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])  # stable: first seen first among equals
    kept = [{"args": args, "count": n} for args, n in ranked[:limit]]
    return kept, sum(n for _, n in ranked[limit:])


def bound_diff(diff: dict) -> dict:
    """The fs diff as stored: process lists counted and capped, path lists capped, with totals."""
    for key in ("processes_started", "processes_ended"):
        raw = diff.get(key) or []
        diff[f"{key}_total"] = len(raw)
        diff[key], diff[f"{key}_omitted"] = count_commands(raw)
    for key in ("added", "removed"):
        raw = diff.get(key) or []
        diff[f"{key}_total"] = len(raw)
        diff[key] = [p[:MAX_PATH_CHARS] for p in raw[:MAX_PATHS]]
    modified = diff.get("modified") or {}
    diff["modified_total"] = len(modified)
    diff["modified"] = {p[:MAX_PATH_CHARS]: what for p, what in list(modified.items())[:MAX_PATHS]}
    return diff


def bound_outcome(result: TrialOutcome) -> TrialOutcome:
    """Every field of a trial outcome that the task's code can inflate, within the caps above
    (called once a trial ends, before anything stores or reports it)."""
    if result.fs_diff is not None:
        bound_diff(result.fs_diff)
    if result.reason:
        result.reason = cap_text(result.reason, MAX_REASON_CHARS)
    tests = result.test_results
    if len(tests) > MAX_TEST_RESULTS:
        result.test_results = tests[:MAX_TEST_RESULTS] + [{
            "name": f"[facet: {len(tests) - MAX_TEST_RESULTS} more test results not kept]",
            "outcome": "skipped", "message": ""}]
    for t in result.test_results:
        t["name"] = str(t.get("name", ""))[:MAX_TEST_NAME_CHARS]
        t["message"] = cap_text(str(t.get("message") or ""), MAX_TEST_MESSAGE_CHARS)
    if len(result.rewards) > MAX_REWARD_KEYS or any(len(str(k)) > MAX_REWARD_KEY_CHARS for k in result.rewards):
        result.rewards = {str(k)[:MAX_REWARD_KEY_CHARS]: v for k, v in list(result.rewards.items())[:MAX_REWARD_KEYS]}
    return result
