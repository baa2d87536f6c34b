"""Planted-defect tasks on the real Docker Engine (issue 13): one small Harbor task per defect
class, each beside a clean twin. Every defect must be caught by a single validation, with its
failure type or finding and the evidence a reviewer reads; every twin must be accepted.

The tasks share one tiny pattern (an input file in /app, three outputs, a pytest verifier) on
facet's base image, so the images build in a second and the pairs run in one module.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from facet_site.lib import docker_engine as de
from facet_site.lib import validation as v
from tests.conftest import docker_engine_with_base_image
from tests.lib.test_validation import GOOD_TEST_SH as TEST_SH

pytestmark = pytest.mark.docker

OWNER = f"pytest-defects:{socket.gethostname()}:{os.getpid()}"
SMALL = de.SandboxLimits(cpus=1.0, memory_bytes=512 * de.MiB, pids=256, disk_bytes=256 * de.MiB,
                         tmp_bytes=64 * de.MiB, output_bytes=256 * de.KiB, disk_poll_s=0.5)
QUICK = v.ValidationTimeouts(build_s=180, solution_s=30, verifier_s=60)

INPUT = "alpha bravo charlie\ndelta echo foxtrot\ngolf hotel india\n"
UPPER = INPUT.upper()
SOLVE = """#!/bin/bash
set -euo pipefail
cd /app
tr a-z A-Z < input.txt > upper.txt
wc -l < input.txt | tr -d ' ' > count.txt
echo done > status.txt
"""
TESTS = """from pathlib import Path


def test_upper():
    assert Path("/app/upper.txt").read_text() == Path("/app/input.txt").read_text().upper()


def test_count():
    assert Path("/app/count.txt").read_text().strip() == "3"


def test_status():
    assert Path("/app/status.txt").read_text().strip() == "done"
"""
DOCKERFILE = "FROM facet-base:bookworm\nWORKDIR /app\nCOPY input.txt /app/input.txt\n"
INSTRUCTION = ("In /app, write upper.txt (input.txt in upper case), count.txt (its number of lines) "
               "and status.txt containing `done`.\n")


def make_task(root: Path, **override: str) -> Path:
    files = {"instruction.md": INSTRUCTION,
             "task.toml": 'version = "1.0"\n[verifier]\ntimeout_sec = 120.0\n[agent]\ntimeout_sec = 120.0\n',
             "environment/Dockerfile": DOCKERFILE, "environment/input.txt": INPUT,
             "solution/solve.sh": SOLVE, "tests/test.sh": TEST_SH, "tests/test_outputs.py": TESTS}
    files.update({k.replace("__", "/").replace("_DOT_", "."): val for k, val in override.items()})
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture(scope="module")
def engine():
    client = docker_engine_with_base_image()
    yield client
    de.cleanup_leftovers(client, owner_prefix=OWNER)
    client.close()


@pytest.fixture
def validate(engine, tmp_path):
    def run(name: str, **files: str) -> v.ValidationReport:
        # the default number of runs (2 nop, 2 oracle): a defect must show in one validation
        return v.validate_task(engine, make_task(tmp_path / name, **files), base_image=de.BASE_IMAGE_TAG,
                               owner=f"{OWNER}:{name}", limits=SMALL, timeouts=QUICK)
    return run


def findings(report: v.ValidationReport, check: str) -> list[dict]:
    return [f for f in report.static_findings if f["check"] == check]


def accepted(report: v.ValidationReport) -> None:
    assert report.accepted, (report.failure, report.reason, report.static_findings)
    assert [f for f in report.static_findings if f["severity"] == "error"] == []


# ------------------------------------------------------------------ answer leaked into the image

def test_an_answer_copied_into_the_image_is_leaked_answer_and_its_twin_passes(validate):
    hidden = DOCKERFILE + "COPY .cache/.answer /opt/.cache/.answer\n"
    report = validate("leak", environment__Dockerfile=hidden, **{"environment__.cache__.answer": UPPER})
    assert not report.accepted and report.failure == "leaked_answer"
    leak = findings(report, "leaked_answer")[0]
    assert leak["severity"] == "error" and leak["file"] == "/opt/.cache/.answer"
    assert "/app/upper.txt" in leak["message"] and "ALPHA BRAVO CHARLIE" in leak["evidence"]
    assert report.trial("oracle").passed  # every trial passes: only the leak check catches it

    accepted(validate("leak-twin"))


def test_a_reordered_json_answer_still_counts_as_leaked(validate):
    solve = SOLVE.replace("echo done", "printf '{\"words\": 9, \"lines\": 3, \"name\": \"facet-report\"}\\n' "
                          "> report.json\necho done")
    planted = '{"name": "facet-report",\n  "lines": 3, "words": 9}\n'
    dockerfile = DOCKERFILE + "COPY seed.json /srv/seed.json\n"
    report = validate("leak-json", solution__solve_DOT_sh=solve, environment__Dockerfile=dockerfile,
                      environment__seed_DOT_json=planted)
    assert report.failure == "leaked_answer"
    assert "as JSON" in findings(report, "leaked_answer")[0]["message"]


def test_an_answer_a_run_step_hides_outside_the_workdir_is_leaked_answer_and_its_twin_passes(validate):
    # written by RUN, not COPY: neither the workdir nor a COPY destination, found by the image scan
    def hiding(content: str) -> str:
        quoted = content.replace("\n", "\\n")
        return DOCKERFILE + f"RUN mkdir -p /var/cache/.facet && printf '{quoted}' > /var/cache/.facet/expected\n"

    report = validate("leak-run", environment__Dockerfile=hiding(UPPER))
    assert not report.accepted and report.failure == "leaked_answer", (report.failure, report.reason)
    leak = findings(report, "leaked_answer")[0]
    assert leak["severity"] == "error" and leak["file"] == "/var/cache/.facet/expected"
    assert "/app/upper.txt" in leak["message"] and "byte for byte" in leak["message"]
    assert "ALPHA BRAVO CHARLIE" in leak["evidence"]
    scan = report.initial_state["image_scan"]
    assert scan["complete"] and 1 <= scan["files"] < 20, scan  # the task's own files only

    # the twin's RUN step writes a file outside the workdir too, just not an answer
    twin = validate("leak-run-twin", environment__Dockerfile=hiding(INPUT))
    accepted(twin)
    assert twin.initial_state["image_scan"]["files"] >= 1


# ------------------------------------------------------------ instruction reveals the solution

def test_an_instruction_that_gives_the_solution_is_rejected_and_its_twin_passes(validate):
    revealing = INSTRUCTION + "\nRun exactly:\n\n```\n" + SOLVE.split("cd /app\n", 1)[1] + "```\n"
    report = validate("reveal", instruction_DOT_md=revealing)
    assert report.failure == "instruction_reveals_solution"
    found = findings(report, "instruction_reveals_solution")[0]
    assert found["file"] == "solution/solve.sh" and "tr a-z A-Z < input.txt > upper.txt" in found["evidence"]

    accepted(validate("reveal-twin"))


# ------------------------------------------------------------------ grade-time network, installs

def test_a_helper_script_that_downloads_at_grade_time_fails_and_its_twin_passes(validate):
    test_sh = TEST_SH.replace("cd /app\n", "cd /app\nbash /tests/setup.sh\n")
    helper = ("#!/bin/bash\npython3 -c \"import urllib.request; "
              "urllib.request.urlopen('https://pypi.org/simple/')\" || true\n")
    report = validate("network", tests__test_DOT_sh=test_sh, tests__setup_DOT_sh=helper)
    assert not report.accepted
    assert report.failure in ("verifier_network_attempt", "grade_time_network")
    static = findings(report, "grade_time_network")[0]
    assert static["severity"] == "error" and static["file"] == "tests/setup.sh" and static["line"] == 2
    runtime = findings(report, "verifier_network_attempt")[0]
    assert "name resolution" in runtime["evidence"] or "resolve" in runtime["evidence"].lower()

    quiet = "#!/bin/bash\nwc -l /app/input.txt\n"  # a helper that stays local
    accepted(validate("network-twin", tests__test_DOT_sh=test_sh, tests__setup_DOT_sh=quiet))


# -------------------------------------------------------------------------------- flaky verifier

FLAKY_TESTS = TESTS + "".join(f"""

def test_lucky_{n}():
    import random
    assert random.random() < 0.5
""" for n in range(6))


def test_a_flaky_verifier_is_flaky_naming_the_tests_that_varied(validate):
    # six independent coin flips per run: two runs of the nop or the oracle agree on all of them
    # once in 64, so one validation catches it (the twin is the clean task of the other pairs)
    report = validate("flaky", tests__test_outputs_DOT_py=FLAKY_TESTS)
    assert report.failure == "flaky", (report.failure, report.reason)
    assert "tests that varied" in report.reason and "test_lucky_" in report.reason
    assert report.flaky and all(k in ("nop", "oracle") for k in (f["kind"] for f in report.flaky))
    assert [t.name for t in report.trials][:4] == ["nop", "nop_2", "oracle", "oracle_2"]
    assert not any(t.kind == "partial" for t in report.trials)  # partials prove nothing here


# ------------------------------------------------------------------------------- weak verifier

HEREDOC_SOLVE = """#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'PY'
from pathlib import Path
text = Path("input.txt").read_text()
Path("upper.txt").write_text(text.upper())
Path("count.txt").write_text(str(len(text.splitlines())) + "\\n")
Path("status.txt").write_text("done\\n")
PY
"""
UPPER_ONLY_TESTS = TESTS.split("\n\ndef test_count")[0] + "\n"


def test_a_weak_verifier_behind_a_one_heredoc_solution_is_caught_and_its_twin_passes(validate):
    report = validate("weak", solution__solve_DOT_sh=HEREDOC_SOLVE, tests__test_outputs_DOT_py=UPPER_ONLY_TESTS)
    assert report.failure == "partial_unexpected_pass"
    assert report.settings["partials_grain"] == "statements"
    assert any(t.kind == "partial" and t.reward == 1 for t in report.trials)

    twin = validate("weak-twin", solution__solve_DOT_sh=HEREDOC_SOLVE)
    accepted(twin)
    assert twin.settings["partials_grain"] == "statements" and any(t.kind == "partial" for t in twin.trials)


def test_a_solution_with_no_partial_is_recorded_as_a_finding(validate):
    one_step = "#!/bin/bash\ncd /app && tr a-z A-Z < input.txt > upper.txt && wc -l < input.txt | tr -d ' ' > count.txt && echo done > status.txt\n"
    report = validate("no-partial", solution__solve_DOT_sh=one_step)
    accepted(report)
    missing = findings(report, "no_partial_solution")[0]
    assert missing["severity"] == "warning" and "rejects half the work" in missing["message"]


# ---------------------------------------------------------------- verifier that checks existence

EXISTS_TESTS = """from pathlib import Path


def test_outputs_exist():
    assert Path("/app/upper.txt").exists()
    assert Path("/app/count.txt").is_file()


def test_status_not_empty():
    assert Path("/app/status.txt").stat().st_size > 0
"""


def test_existence_only_tests_are_a_warning_naming_them_and_the_twin_has_none(validate):
    report = validate("exists", tests__test_outputs_DOT_py=EXISTS_TESTS)
    warning = findings(report, "existence_only_tests")
    assert warning and warning[0]["severity"] == "warning"
    assert "test_outputs_exist" in warning[0]["message"] + warning[0]["evidence"]

    twin = validate("exists-twin")
    accepted(twin)
    assert findings(twin, "existence_only_tests") == []
