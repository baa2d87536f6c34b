"""Validation of a generated Harbor task in Docker: the FACET acceptance rule, made stricter.

A task is accepted when

* its environment builds (the Dockerfile passes docker_engine's lint first),
* the verifier gives reward 0 on the untouched environment (the *nop* trial),
* the verifier gives reward 1 after solution/solve.sh ran (the *oracle* trial), and solve.sh
  exits 0 (Harbor only looks at the reward; we also want a clean reference solution),
* the verifier stays below reward 1 after each *partial* solution (truncations of solve.sh at
  command boundaries), so a verifier that accepts half the work is caught, and
* no static check of the files found an error (tests that run the solution, a test.sh that never
  writes a reward, a solution that writes the reward itself, answers baked into the image ...).

Every trial runs in a fresh docker_engine.Sandbox (no network, CPU/memory/pids/disk/time limits)
made from the environment image, the way Harbor runs it (harbor-format.md §3): tests/ is uploaded
to /tests only at grade time, solution/ to /solution only for the oracle and partial trials,
/logs/verifier is created writable, `bash /tests/test.sh` runs in the task's working directory
with [verifier].env and as [verifier].user, and only /logs/verifier/reward.json or reward.txt
counts, never test.sh's exit code.

Django-free. Engine trouble (daemon restarting, connection reset) is raised as
docker_engine.TransientEngineError for the job layer to retry; whatever a task does wrong is
recorded in the ValidationReport instead. No container outlives validate_task: every sandbox of
one validation carries its own owner label and is removed by that label in a `finally`.

The package, by concern: report.py (failure types, TrialOutcome, ValidationReport),
task_checks.py (TaskFiles, limits, static checks), partials.py (partial solutions), trials.py
(running and judging one trial, e0), acceptance.py (validate_task). What the verifier writes is
read by facet_site.lib.verifier_output. This module re-exports the public names callers use.
"""
from __future__ import annotations

from facet_site.lib.validation.acceptance import decide_failure, time_plain_cli_validation, validate_task
from facet_site.lib.validation.partials import (PARTIALS_DIR, derive_partial_solutions, partial_solution_files,
                                                partials_stored_in, solution_steps, written_partials)
from facet_site.lib.validation.report import (ANSWER_FILE_IN_ENVIRONMENT, BUILD_FAILED, DEFECTS_AFTER_TRIALS,
                                              DEFECTS_BEFORE_TRIALS, FAILURE_TYPES, FLAKY,
                                              GRADE_TIME_NETWORK, INFRA_ERROR, INSTRUCTION_REVEALS_SOLUTION,
                                              INVALID_TASK, LEAKED_ANSWER, NOP_UNEXPECTED_PASS, ORACLE_FAILED,
                                              PARTIAL_UNEXPECTED_PASS, VERIFIER_NETWORK_ATTEMPT,
                                              SOLUTION_FAILED, SOLUTION_TIMEOUT, STATIC_CHECK_FAILED,
                                              VERIFIER_NO_REWARD, VERIFIER_TIMEOUT, TrialOutcome,
                                              ValidationReport, ValidationTimeouts, cap_text)
from facet_site.lib.validation.task_checks import (DEFAULT_LIMITS, DEFAULT_WORKDIR, HARBOR_DEFAULT_TIMEOUT_S,
                                                   LOG_DIRS, VERIFIER_LOGS, TaskFiles, instruction_paths,
                                                   leak_search_roots, static_checks, task_limits)
from facet_site.lib.validation.trials import capture_initial_state, image_workdir_of, read_verifier_logs

__all__ = [
    "ANSWER_FILE_IN_ENVIRONMENT", "DEFECTS_AFTER_TRIALS", "DEFECTS_BEFORE_TRIALS", "FLAKY", "GRADE_TIME_NETWORK", "INSTRUCTION_REVEALS_SOLUTION",
    "LEAKED_ANSWER", "VERIFIER_NETWORK_ATTEMPT", "decide_failure", "instruction_paths", "leak_search_roots",
    "BUILD_FAILED", "DEFAULT_LIMITS", "DEFAULT_WORKDIR", "FAILURE_TYPES", "HARBOR_DEFAULT_TIMEOUT_S",
    "INFRA_ERROR", "INVALID_TASK", "LOG_DIRS", "NOP_UNEXPECTED_PASS", "ORACLE_FAILED",
    "PARTIAL_UNEXPECTED_PASS", "SOLUTION_FAILED", "SOLUTION_TIMEOUT", "STATIC_CHECK_FAILED",
    "TaskFiles", "TrialOutcome", "VERIFIER_LOGS", "VERIFIER_NO_REWARD", "VERIFIER_TIMEOUT",
    "ValidationReport", "ValidationTimeouts", "cap_text", "capture_initial_state",
    "PARTIALS_DIR", "partial_solution_files", "partials_stored_in", "written_partials",
    "derive_partial_solutions", "image_workdir_of", "read_verifier_logs", "solution_steps",
    "static_checks", "task_limits", "time_plain_cli_validation", "validate_task",
]

