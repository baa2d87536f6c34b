"""What validation reports: the failure types (the repair stage's vocabulary), the timeouts a
validation runs with, one trial's outcome and the whole validation's report. Django-free.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from facet_site.lib import docker_engine as de
from facet_site.lib import task_defects as td

# Failure types, in the vocabulary the repair stage maps to fixes (pipeline-notes.md).
BUILD_FAILED = "build_failed"
INVALID_TASK = "invalid_task"  # a required file is missing or task.toml does not parse
NOP_UNEXPECTED_PASS = "nop_unexpected_pass"
ORACLE_FAILED = "oracle_failed"
SOLUTION_FAILED = "solution_failed"
SOLUTION_TIMEOUT = "solution_timeout"
VERIFIER_NO_REWARD = "verifier_no_reward"
VERIFIER_TIMEOUT = "verifier_timeout"
PARTIAL_UNEXPECTED_PASS = "partial_unexpected_pass"
STATIC_CHECK_FAILED = "static_check_failed"
INFRA_ERROR = "infra_error"
# The defect classes of task_defects (issue 13) that reject a task name its failure, so the
# repair loop and the task list see "flaky" or "leaked_answer", not a generic static check.
FLAKY = td.FLAKY
VERIFIER_NETWORK_ATTEMPT = td.VERIFIER_NETWORK_ATTEMPT
GRADE_TIME_NETWORK = td.GRADE_TIME_NETWORK
LEAKED_ANSWER = td.LEAKED_ANSWER
ANSWER_FILE_IN_ENVIRONMENT = td.ANSWER_FILE_IN_ENVIRONMENT
INSTRUCTION_REVEALS_SOLUTION = td.INSTRUCTION_REVEALS_SOLUTION
# In this order they explain a failed trial better than the trial itself does: a flaky verifier
# or one that needs the network fails the oracle for that reason, not because the solution is
# wrong. The answer-leak classes come after the trials (those pass when the answer is in place).
DEFECTS_BEFORE_TRIALS = (FLAKY, VERIFIER_NETWORK_ATTEMPT, GRADE_TIME_NETWORK)
DEFECTS_AFTER_TRIALS = (LEAKED_ANSWER, ANSWER_FILE_IN_ENVIRONMENT, INSTRUCTION_REVEALS_SOLUTION)

FAILURE_TYPES = (BUILD_FAILED, INVALID_TASK, NOP_UNEXPECTED_PASS, ORACLE_FAILED, SOLUTION_FAILED,
                 SOLUTION_TIMEOUT, VERIFIER_NO_REWARD, VERIFIER_TIMEOUT, PARTIAL_UNEXPECTED_PASS,
                 STATIC_CHECK_FAILED, INFRA_ERROR, *DEFECTS_BEFORE_TRIALS, *DEFECTS_AFTER_TRIALS)

@dataclass(frozen=True)
class ValidationTimeouts:
    """Explicit values win; otherwise task.toml's, capped by the max_* values."""

    build_s: float | None = None
    solution_s: float | None = None
    verifier_s: float | None = None
    max_build_s: float = 900.0
    max_solution_s: float = 600.0
    max_verifier_s: float = 600.0


@dataclass
class TrialOutcome:
    kind: str  # "nop" | "oracle" | "partial"
    reward: float | None  # None when the verifier wrote no (readable) reward
    passed: bool  # the expectation for this kind was met
    test_results: list[dict] = field(default_factory=list)  # {name, outcome, message, seconds}
    solution_exit_code: int | None = None
    verifier_exit_code: int | None = None  # informational: Harbor ignores it
    solution_output: str = ""  # capped (report_output_bytes, head and tail)
    verifier_output: str = ""
    fs_diff: dict | None = None  # against e0, after the solution ran (oracle/partial)
    solution_seconds: float | None = None
    verifier_seconds: float = 0.0
    total_seconds: float = 0.0
    peak_memory_bytes: int | None = None
    failure: str | None = None  # one of FAILURE_TYPES
    reason: str | None = None
    index: int = 0  # which partial solution (0 for nop/oracle)
    repeat: int = 0  # which run of a repeated nop or oracle trial (0 = the first)
    rewards: dict = field(default_factory=dict)  # every numeric metric of reward.json
    test_results_source: str | None = None  # the results file parsed, e.g. "junit.xml"

    @property
    def name(self) -> str:
        if self.kind == "partial":
            return f"partial_{self.index}"
        return f"{self.kind}_{self.repeat + 1}" if self.repeat else self.kind

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ValidationReport:
    task_dir: str
    image_tag: str | None
    build: de.BuildResult | None
    build_seconds: float
    trials: list[TrialOutcome]
    static_findings: list[dict]  # {check, severity: "error"|"warning", message, file, line, evidence}
    accepted: bool
    failure: str | None  # the first failure type, in trial order
    reason: str | None
    initial_state: dict | None = None  # e0, see capture_initial_state
    build_log: str = ""  # capped; the build's log on success and on failure
    settings: dict = field(default_factory=dict)  # timeouts, limits, workdir actually used
    total_seconds: float = 0.0
    flaky: list[dict] = field(default_factory=list)  # FlakyVerdict.to_dict() per trial kind

    def trial(self, name: str) -> TrialOutcome | None:
        return next((t for t in self.trials if t.name == name), None)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["build"] = asdict(self.build) if self.build else None
        if data["build"]:
            data["build"]["log"] = cap_text(data["build"]["log"], 16 * de.KiB)
        return data

# --------------------------------------------------------------------------------------------
# Helpers


def cap_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return (text[:half] + f"\n[facet: {len(text) - 2 * half} characters dropped here]\n"
            + text[-half:])
