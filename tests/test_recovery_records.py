"""Bounded trial records (docs/operations.md): whatever a task's solution or verifier does, what a
trial stores stays small. A fork-bomb-like solution's thousands of processes become one command
with its count; every list and text task code can inflate is capped, with totals kept."""
from __future__ import annotations

import json

import pytest

from facet_site.lib import docker_engine as de
from facet_site.lib import validation as v
from facet_site.lib.validation import trial_bounds
from facet_site.lib.validation.report import TrialOutcome


def test_a_trial_outcome_is_counted_deduplicated_and_capped():
    diff = {"added": [f"/app/f{i}-" + "x" * 900 for i in range(5000)], "removed": ["/app/gone"],
            "modified": {f"/app/m{i}": ["content"] for i in range(1000)},
            "processes_started": ["sleep 1"] * 3000 + [f"worker --id {i}" for i in range(100)] + ["y" * 10_000],
            "processes_ended": [], "files": {}, "truncated": False}
    outcome = TrialOutcome(kind="oracle", reward=0.0, passed=False, fs_diff=diff, reason="r" * 100_000,
                           test_results=[{"name": "t" * 5000, "outcome": "failed", "message": "m" * 100_000}] * 3000,
                           rewards={f"metric-{i}" + "k" * 500: 1.0 for i in range(1000)})
    trial_bounds.bound_outcome(outcome)
    started = outcome.fs_diff["processes_started"]
    assert started[0] == {"args": "sleep 1", "count": 3000}
    assert len(started) == trial_bounds.MAX_PROCESSES
    assert outcome.fs_diff["processes_started_total"] == 3101
    assert outcome.fs_diff["processes_started_omitted"] == 3101 - sum(p["count"] for p in started)
    assert len(outcome.fs_diff["added"]) == trial_bounds.MAX_PATHS and outcome.fs_diff["added_total"] == 5000
    assert all(len(p) <= trial_bounds.MAX_PATH_CHARS for p in outcome.fs_diff["added"])
    assert len(outcome.fs_diff["modified"]) == trial_bounds.MAX_PATHS and outcome.fs_diff["modified_total"] == 1000
    assert len(outcome.reason) < 2 * trial_bounds.MAX_REASON_CHARS
    assert len(outcome.test_results) == trial_bounds.MAX_TEST_RESULTS + 1
    assert "2500 more test results" in outcome.test_results[-1]["name"]
    assert max(len(t["name"]) for t in outcome.test_results) <= trial_bounds.MAX_TEST_NAME_CHARS
    assert max(len(t["message"]) for t in outcome.test_results) < 2 * trial_bounds.MAX_TEST_MESSAGE_CHARS
    assert len(outcome.rewards) == trial_bounds.MAX_REWARD_KEYS
    assert len(json.dumps(outcome.to_dict())) < 2_000_000  # was ~300 MB


FORK_SOLVE = """#!/bin/bash
cd /app
# 2000 short-lived copies of one command, under the sandbox's pids limit
for i in $(seq 2000); do sleep 90 >/dev/null 2>&1 & done
tr a-z A-Z < input.txt > upper.txt
wc -l < input.txt | tr -d ' ' > count.txt
echo done > status.txt
"""


@pytest.mark.docker
def test_a_solution_starting_thousands_of_processes_leaves_one_counted_line(tmp_path):
    from tests.conftest import docker_engine_with_base_image
    from tests.lib.test_validation import OWNER, QUICK, make_task

    client = docker_engine_with_base_image()
    limits = de.SandboxLimits(cpus=1.0, memory_bytes=1 * de.GiB, pids=2300, disk_bytes=256 * de.MiB,
                              tmp_bytes=64 * de.MiB, output_bytes=256 * de.KiB, disk_poll_s=0.5)
    try:
        report = v.validate_task(client, make_task(tmp_path / "task", solve=FORK_SOLVE), base_image=de.BASE_IMAGE_TAG,
                                 owner=OWNER, timeouts=QUICK, trial_runs=1, limits=limits, max_partials=0)
    finally:
        de.cleanup_leftovers(client, owner=OWNER)
        client.close()
    oracle = report.trial("oracle")
    assert oracle is not None and oracle.fs_diff is not None, report.reason
    started = oracle.fs_diff["processes_started"]
    sleeps = [p for p in started if p["args"] == "sleep 90"]
    assert len(sleeps) == 1 and sleeps[0]["count"] >= 1900, (started, oracle.failure, oracle.reason)
    assert oracle.fs_diff["processes_started_total"] >= 1900
    assert len(started) <= trial_bounds.MAX_PROCESSES
    assert len(json.dumps(oracle.fs_diff)) < 50_000
