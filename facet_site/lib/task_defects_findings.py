"""The finding shape, check ids and repair routing shared by the task-defect detectors.

A finding is the dict static_checks already records ({check, severity, message}) with three more
keys a reviewer needs to see the defect without opening the task: `file` (task-relative path, or
an image path for a leaked answer), `line` (1-based, or None) and `evidence` (the matching
content, capped). Severity "error" rejects the task; "warning" is shown but accepts it.
"""
from __future__ import annotations

# Check ids. Each doubles as the failure type the validator records when the check rejects a task.
LEAKED_ANSWER = "leaked_answer"  # an oracle output already exists in the built image
LEAKED_ANSWER_EMBEDDED = "leaked_answer_embedded"  # ... inside a larger file (warning)
ANSWER_FILE_IN_ENVIRONMENT = "answer_file_in_environment"  # environment/ ships solution/tests
INSTRUCTION_REVEALS_SOLUTION = "instruction_reveals_solution"
GRADE_TIME_NETWORK = "grade_time_network"  # a tests/ file installs or downloads
VERIFIER_NETWORK_ATTEMPT = "verifier_network_attempt"  # a verifier run tried the network
FLAKY = "flaky"  # repeated nop or oracle trials disagree
NO_PARTIAL_SOLUTION = "no_partial_solution"  # the weak-verifier check could not run
EXISTENCE_ONLY_TESTS = "existence_only_tests"

# Which artifact a repair should touch for each check (the repair router's vocabulary).
# A leaked answer is fixed in the environment (remove the file) unless the instruction names the
# leaking path as an input, in which case the instruction is what is wrong; the environment is
# the default because that is where the file lives.
REPAIR_TARGET = {
    LEAKED_ANSWER: "environment",
    LEAKED_ANSWER_EMBEDDED: "environment",
    ANSWER_FILE_IN_ENVIRONMENT: "environment",
    INSTRUCTION_REVEALS_SOLUTION: "instruction",
    GRADE_TIME_NETWORK: "verifier",
    VERIFIER_NETWORK_ATTEMPT: "verifier",
    FLAKY: "verifier",
    NO_PARTIAL_SOLUTION: "verifier",
    EXISTENCE_ONLY_TESTS: "verifier",
}

EVIDENCE_CHARS = 400


def cap_evidence(text: str, limit: int = EVIDENCE_CHARS) -> str:
    text = text.strip("\n")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def finding(check: str, severity: str, message: str, *, file: str | None = None,
            line: int | None = None, evidence: str = "") -> dict:
    return {"check": check, "severity": severity, "message": message, "file": file,
            "line": line, "evidence": cap_evidence(evidence)}


def is_remote_host(host: str) -> bool:
    """Whether a host name is outside the task's own container or compose project.

    Verifiers legitimately talk to localhost or a sidecar (`http://api:8000`); a dotted public
    name or a public address is the internet, which a grader must not need.
    """
    host = host.strip("[]").lower().rstrip(".")
    if not host or host in ("localhost", "0.0.0.0", "::1", "host.docker.internal"):
        return False
    if host.endswith((".localhost", ".local", ".internal")):
        return False
    parts = host.split(".")
    if len(parts) == 4 and all(p.isdigit() for p in parts):
        a, b = int(parts[0]), int(parts[1])
        private = (a in (10, 127) or (a == 172 and 16 <= b <= 31) or (a == 192 and b == 168)
                   or (a == 169 and b == 254))
        return not private
    return "." in host
