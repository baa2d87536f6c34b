"""Detectors for the task-defect classes public terminal datasets are known for (issue 13), as
pure functions over a task's texts and its trials' data; the validator wires them in.

Classes and where they live:

* answer leaked into the environment: find_leaked_answers (oracle outputs already in the image),
  find_answer_files_in_environment (environment/ files that COPY/ADD ship and that are solution
  or test content) -> task_defects_leaks
* instruction reveals the solution: instruction_reveals_solution -> task_defects_leaks
* grade-time network or installs: grade_time_network (tests/ files), network_attempts_in_output
  (a verifier run's output; verifier_network_finding below wraps it) -> task_defects_verifier
* flaky verifier: compare_repeated_trials -> task_defects_verifier
* weak verifier when solve.sh is one script: plan_partials (command cuts, partials the model
  wrote, then statement cuts of embedded scripts) / derive_fine_partials / no_partial_finding
  -> task_defects_partials
* verifier that only checks existence: existence_only_tests -> task_defects_verifier

Every detector returns findings (task_defects_findings.finding: check, severity, message, file,
line, evidence) or None; REPAIR_TARGET maps each check id to the artifact a repair should touch.
"""
from __future__ import annotations

from typing import Mapping

from facet_site.lib.task_defects_findings import (  # noqa: F401  (re-exported)
    ANSWER_FILE_IN_ENVIRONMENT, EXISTENCE_ONLY_TESTS, FLAKY, GRADE_TIME_NETWORK,
    INSTRUCTION_REVEALS_SOLUTION, LEAKED_ANSWER, LEAKED_ANSWER_EMBEDDED, NO_PARTIAL_SOLUTION,
    REPAIR_TARGET, VERIFIER_NETWORK_ATTEMPT, finding, is_remote_host)
from facet_site.lib.task_defects_leaks import (  # noqa: F401
    content_forms, find_answer_files_in_environment, find_leaked_answers,
    instruction_reveals_solution, is_trivial_content, solution_containment)
from facet_site.lib.task_defects_partials import (  # noqa: F401
    PartialPlan, derive_fine_partials, embedded_scripts, no_partial_finding, plan_partials)
from facet_site.lib.task_defects_verifier import (  # noqa: F401
    FlakyVerdict, compare_repeated_trials, existence_only_tests, grade_time_network,
    network_attempts_in_output)


def static_task_defects(*, instruction: str, solve_sh: str,
                        environment_files: Mapping[str, str | bytes],
                        solution_files: Mapping[str, str | bytes],
                        tests_files: Mapping[str, str]) -> list[dict]:
    """Every detector that needs only the task's files (no Docker), in one list.

    File mappings are keyed by task-relative path ("tests/test.sh"), as validation._text_files
    returns them. The weak-verifier finding is included because a solve.sh that yields no
    partial solution is known before any trial runs.
    """
    findings: list[dict] = []
    if revealed := instruction_reveals_solution(instruction, solve_sh):
        findings.append(revealed)
    findings += find_answer_files_in_environment(environment_files, solution_files, tests_files)
    findings += grade_time_network(tests_files)
    findings += existence_only_tests(tests_files)
    if missing := no_partial_finding(plan_partials(solve_sh)):
        findings.append(missing)
    return findings


def verifier_network_finding(output: str, trial: str) -> dict | None:
    """An error finding when a verifier run's output shows it tried the network."""
    lines = network_attempts_in_output(output)
    if not lines:
        return None
    return finding(VERIFIER_NETWORK_ATTEMPT, "error",
                   f"the verifier tried to reach the network during the {trial} trial; it must "
                   "run offline with what the image provides",
                   file="tests/test.sh", evidence="\n".join(lines))
