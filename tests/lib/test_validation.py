"""Task validation against a real engine: nop, oracle and partial trials of tiny Harbor tasks.

Without an engine these tests skip, unless FACET_REQUIRE_DOCKER=1 (CI), where they fail. Most
tasks here share one environment/ (so one cached image); each trial is a fresh sandbox.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from facet_site.lib import docker_engine as de
from facet_site.lib import validation as v
from facet_site.lib.validation import partials, trials

pytestmark = pytest.mark.docker

OWNER = f"pytest-validation:{socket.gethostname()}:{os.getpid()}"
SMALL = de.SandboxLimits(cpus=1.0, memory_bytes=512 * de.MiB, pids=256, disk_bytes=256 * de.MiB,
                         tmp_bytes=64 * de.MiB, output_bytes=256 * de.KiB, disk_poll_s=0.5)
QUICK = v.ValidationTimeouts(build_s=180, solution_s=30, verifier_s=60)


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", autouse=True)
def _remove_leftovers():
    """Whatever this module's sandboxes left behind goes, even after a failed test."""
    yield
    try:
        engine = de.connect(os.environ.get("DOCKER_HOST"))
    except de.EngineUnavailable:
        return
    de.cleanup_leftovers(engine, owner=OWNER)
    engine.close()


def _sandboxes_left(client, owner_prefix: str = OWNER) -> list[str]:
    rows = client.api.containers(all=True, filters={"label": [f"{de.LABEL_SANDBOX}=1"]})
    return [r["Id"] for r in rows
            if (r.get("Labels") or {}).get(de.LABEL_OWNER, "").startswith(owner_prefix)]


@pytest.fixture
def no_leftovers(client):
    yield
    assert _sandboxes_left(client) == []


GOOD_SOLVE = """#!/bin/bash
set -euo pipefail
cd /app
tr a-z A-Z < input.txt > upper.txt
wc -l < input.txt | tr -d ' ' > count.txt
echo done > status.txt
"""

GOOD_TESTS = """from pathlib import Path

def test_upper():
    assert Path("/app/upper.txt").read_text() == "ALPHA\\nBETA\\nGAMMA\\n"

def test_count():
    assert Path("/app/count.txt").read_text().strip() == "3"

def test_status():
    assert Path("/app/status.txt").read_text().strip() == "done"
"""

GOOD_TEST_SH = """#!/bin/bash
cd /app
python3 -m pytest -q -p no:cacheprovider --junitxml=/logs/verifier/junit.xml /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""

DOCKERFILE = "FROM facet-base:bookworm\nWORKDIR /app\nCOPY input.txt /app/input.txt\n"

INSTRUCTION = ("Write /app/upper.txt (input.txt in upper case), /app/count.txt (its line count) "
               "and /app/status.txt containing `done`.\n")


def make_task(root: Path, *, solve: str = GOOD_SOLVE, tests: str = GOOD_TESTS,
              test_sh: str = GOOD_TEST_SH, dockerfile: str = DOCKERFILE,
              task_toml: str = "version = \"1.0\"\n[verifier]\ntimeout_sec = 120.0\n"
                               "[agent]\ntimeout_sec = 120.0\n") -> Path:
    files = {
        "instruction.md": INSTRUCTION,
        "task.toml": task_toml,
        "environment/Dockerfile": dockerfile,
        "environment/input.txt": "alpha\nbeta\ngamma\n",
        "solution/solve.sh": solve,
        "tests/test.sh": test_sh,
        "tests/test_outputs.py": tests,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def validate(client, task_dir: Path, **kwargs) -> v.ValidationReport:
    kwargs.setdefault("timeouts", QUICK)
    # one run of each trial: these tests are about what one trial sees; repeated runs (the
    # default, 2) are tested with the good task and in tests/tasks/test_validation_defects.py
    kwargs.setdefault("trial_runs", 1)
    kwargs.setdefault("limits", SMALL)
    return v.validate_task(client, task_dir, base_image=de.BASE_IMAGE_TAG, owner=OWNER, **kwargs)


# ---------------------------------------------------------------------------- the good task


def test_a_good_task_is_accepted_with_all_trials(client, base_image, tmp_path, no_leftovers):
    task = make_task(tmp_path / "task")
    logs = tmp_path / "logs"
    report = validate(client, task, keep_logs_dir=logs, trial_runs=2)

    assert report.accepted, (report.failure, report.reason)
    assert report.failure is None and report.image_tag.startswith("facet-env:")
    # the nop and the oracle run twice each by default (a flaky verifier would disagree with itself)
    assert [t.name for t in report.trials] == ["nop", "nop_2", "oracle", "oracle_2", "partial_1", "partial_2"]
    nop, _nop2, oracle, _oracle2, *partials = report.trials
    assert report.flaky == [] and report.settings["trial_runs"] == 2
    assert nop.reward == 0 and nop.passed and nop.fs_diff is None
    assert oracle.reward == 1 and oracle.passed and oracle.solution_exit_code == 0
    assert all(p.reward is not None and p.reward < 1 and p.passed for p in partials)

    assert oracle.test_results_source == "junit.xml"
    assert {t["name"].split("::")[-1]: t["outcome"] for t in oracle.test_results} == {
        "test_upper": "passed", "test_count": "passed", "test_status": "passed"}
    failed = {t["name"].split("::")[-1] for t in nop.test_results if t["outcome"] == "failed"}
    assert failed == {"test_upper", "test_count", "test_status"}
    assert "FileNotFoundError" in next(t["message"] for t in nop.test_results)

    diff = oracle.fs_diff
    assert set(diff["added"]) == {"/app/upper.txt", "/app/count.txt", "/app/status.txt"}
    assert diff["files"]["/app/upper.txt"]["text_head"] == "ALPHA\nBETA\nGAMMA\n"
    assert diff["removed"] == [] and diff["modified"] == {}
    assert "/app/status.txt" not in partials[0].fs_diff["added"]

    e0 = report.initial_state
    assert e0["roots"] == ["/app"]
    assert e0["snapshot"]["files"]["/app/input.txt"]["text_head"] == "alpha\nbeta\ngamma\n"
    assert e0["services"] == []
    assert oracle.peak_memory_bytes and oracle.peak_memory_bytes > 1 * de.MiB
    assert oracle.solution_seconds is not None and oracle.verifier_seconds > 0
    assert report.static_findings == []
    assert report.settings["solution_timeout_s"] == 30 and report.settings["workdir"] == "/app"

    assert (logs / "report.json").is_file() and (logs / "build.log").exists()
    assert "testcase" in (logs / "trial_oracle" / "junit.xml").read_text()
    assert (logs / "trial_oracle" / "reward.txt").read_text().strip() == "1"
    assert (logs / "trial_nop" / "verifier.log").read_text()
    assert "partial solution" in (logs / "trial_partial_1" / "solve.sh").read_text()
    saved = json.loads((logs / "report.json").read_text())
    assert saved["accepted"] is True and len(saved["trials"]) == 6
    print(f"\nvalidation of the tiny task: build {report.build_seconds:.2f} s, "
          + ", ".join(f"{t.name} {t.total_seconds:.2f} s" for t in report.trials)
          + f", total {report.total_seconds:.2f} s")



def test_the_initial_state_never_lists_the_image_scan_as_a_service(client, base_image, tmp_path,
                                                                    monkeypatch, no_leftovers):
    # The image scan (find | sha256sum over the root filesystem) runs while e0's files are read.
    # On a big image, or a busy engine, it is still running when the read ends; a slow scan and
    # a slow read stand in for that here. e0's services are the environment's own processes,
    # and the scan is ours.
    real_command, real_snapshot = trials.image_scan_command, de.Sandbox.snapshot
    monkeypatch.setattr(trials, "image_scan_command",
                        lambda *a, **k: "sleep 4; " + real_command(*a, **k))

    def slow_snapshot(sandbox, *args, **kwargs):
        time.sleep(1.5)
        return real_snapshot(sandbox, *args, **kwargs)

    monkeypatch.setattr(de.Sandbox, "snapshot", slow_snapshot)
    report = validate(client, make_task(tmp_path / "task"))

    assert report.accepted, (report.failure, report.reason)
    assert report.initial_state["image_scan"]["seconds"] >= 4  # the scan ran, and ran long
    assert report.initial_state["services"] == []
    assert not any("sha256sum" in p["args"] or "sleep 4" in p["args"]
                   for p in report.initial_state["snapshot"]["processes"])


def test_task_toml_timeouts_are_capped_and_used(client, base_image, tmp_path, no_leftovers):
    task = make_task(tmp_path, task_toml="[verifier]\ntimeout_sec = 5000\n[agent]\n"
                                         "timeout_sec = 20\n[environment]\nmemory = \"256M\"\n")
    report = validate(client, task, partial_solutions=(),
                      timeouts=v.ValidationTimeouts(max_verifier_s=90))
    assert report.accepted, report.reason
    assert report.settings["verifier_timeout_s"] == 90
    assert report.settings["solution_timeout_s"] == 20
    assert report.settings["limits"]["memory_bytes"] == 256 * de.MiB


# ---------------------------------------------------------------------------- failures


def test_a_verifier_that_passes_without_the_solution_is_nop_unexpected_pass(
        client, base_image, tmp_path, no_leftovers):
    lenient = "from pathlib import Path\n\ndef test_input():\n" \
              "    assert Path('/app/input.txt').exists()\n"
    report = validate(client, make_task(tmp_path, tests=lenient))
    assert not report.accepted and report.failure == "nop_unexpected_pass"
    nop, oracle, *partials = report.trials  # the oracle passed, so partials ran too
    assert nop.reward == 1 and not nop.passed and "without any solution" in nop.reason
    assert oracle.passed
    assert partials and all(p.failure == "partial_unexpected_pass" for p in partials)
    assert "do not check enough" in partials[0].reason
    assert report.reason.startswith("nop: ")


@pytest.mark.parametrize("solve, failure", [
    ("#!/bin/bash\ncd /app\necho broken >&2\nexit 3\n", "solution_failed"),
    ("#!/bin/bash\ncd /app\necho wrong > upper.txt\necho 3 > count.txt\n"
     "echo done > status.txt\n", "oracle_failed"),
])
def test_a_broken_solution_fails_the_oracle(client, base_image, tmp_path, no_leftovers,
                                            solve, failure):
    report = validate(client, make_task(tmp_path, solve=solve))
    assert not report.accepted and report.failure == failure
    assert [t.kind for t in report.trials] == ["nop", "oracle"]  # no partials after a failure
    oracle = report.trial("oracle")
    assert oracle.reward == 0 and not oracle.passed
    if failure == "solution_failed":
        assert oracle.solution_exit_code == 3 and "broken" in oracle.solution_output
        assert "exited 3" in oracle.reason
    else:
        assert "test_upper" in oracle.reason


def test_a_verifier_that_writes_no_reward_is_verifier_no_reward(
        client, base_image, tmp_path, no_leftovers):
    silent = "#!/bin/bash\ncd /app\npython3 -m pytest -q -p no:cacheprovider /tests\n"
    report = validate(client, make_task(tmp_path, test_sh=silent))
    assert report.failure == "verifier_no_reward"
    nop, oracle = report.trials
    assert nop.reward is None and nop.failure == "verifier_no_reward"
    assert "neither /logs/verifier/reward.txt nor reward.json" in nop.reason
    assert oracle.failure == "verifier_no_reward" and oracle.verifier_exit_code == 0
    # the static check saw it coming as well
    assert any(f["check"] == "no_reward_written" for f in report.static_findings)


def test_an_endless_solution_is_solution_timeout(client, base_image, tmp_path, no_leftovers):
    solve = "#!/bin/bash\nwhile true; do :; done\n"
    started = time.monotonic()
    report = validate(client, make_task(tmp_path, solve=solve),
                      timeouts=v.ValidationTimeouts(solution_s=3, verifier_s=60))
    elapsed = time.monotonic() - started
    oracle = report.trial("oracle")
    assert report.failure == "solution_timeout" and oracle.failure == "solution_timeout"
    assert "within 3 s" in oracle.reason
    assert 3 <= oracle.solution_seconds < 8
    assert oracle.reward == 0  # the verifier still ran, as in Harbor
    assert elapsed < 40


def test_a_flooding_hanging_verifier_is_verifier_timeout(client, base_image, tmp_path,
                                                         no_leftovers):
    flood = "#!/bin/bash\nyes facet | head -c 30000000\nsleep 600\n"
    report = validate(client, make_task(tmp_path, test_sh=flood), partial_solutions=(),
                      timeouts=v.ValidationTimeouts(solution_s=30, verifier_s=4),
                      report_output_bytes=4 * de.KiB)
    nop = report.trial("nop")
    assert nop.failure == "verifier_timeout" and "within 4 s" in nop.reason
    assert len(nop.verifier_output) < 5 * de.KiB and "dropped" in nop.verifier_output
    assert nop.verifier_seconds < 15


def test_a_dockerfile_from_another_image_is_build_failed_by_lint(client, base_image, tmp_path,
                                                                 no_leftovers):
    report = validate(client, make_task(tmp_path, dockerfile="FROM ubuntu:24.04\nWORKDIR /app\n"))
    assert report.failure == "build_failed" and not report.accepted
    assert report.reason.startswith("Dockerfile lint: line 1: FROM ubuntu:24.04")
    assert report.trials == [] and report.build is None and report.image_tag is None


def test_a_failing_run_step_is_build_failed_with_the_log(client, base_image, tmp_path,
                                                         no_leftovers):
    dockerfile = DOCKERFILE + "RUN echo facet-step-output && exit 7\n"
    logs = tmp_path / "logs"
    report = validate(client, make_task(tmp_path / "task", dockerfile=dockerfile),
                      keep_logs_dir=logs)
    assert report.failure == "build_failed" and report.trials == []
    assert "returned a non-zero code: 7" in report.reason
    assert "facet-step-output" in report.build_log
    assert "facet-step-output" in (logs / "build.log").read_text()


def test_a_task_missing_files_is_invalid(client, tmp_path, no_leftovers):
    task = make_task(tmp_path)
    (task / "tests" / "test.sh").unlink()
    report = validate(client, task)
    assert report.failure == "invalid_task" and "tests/test.sh is missing" in report.reason


def test_static_errors_reject_an_otherwise_passing_task(client, base_image, tmp_path,
                                                        no_leftovers):
    # The oracle passes only because the test runs the reference solution itself.
    cheating = GOOD_TEST_SH.replace("cd /app\n", "cd /app\nbash /solution/solve.sh 2>/dev/null\n")
    report = validate(client, make_task(tmp_path, test_sh=cheating), partial_solutions=())
    assert report.trial("oracle").passed
    assert report.failure in ("static_check_failed", "nop_unexpected_pass")
    assert any(f["check"] == "tests_use_solution" and f["severity"] == "error"
               for f in report.static_findings)


def test_a_solution_writing_the_reward_is_flagged(client, base_image, tmp_path, no_leftovers):
    solve = GOOD_SOLVE + "echo 1 > /logs/verifier/reward.txt\n"
    report = validate(client, make_task(tmp_path, solve=solve), partial_solutions=())
    assert report.trial("oracle").passed  # the verifier overwrote it anyway
    assert report.failure == "static_check_failed"
    checks = [f["check"] for f in report.static_findings]
    assert checks.count("solution_writes_reward") == 2  # static, and seen in the sandbox


def test_an_engine_failure_mid_run_is_transient_and_leaves_no_container(
        client, base_image, tmp_path, monkeypatch, no_leftovers):
    real_exec = de.Sandbox.exec

    def failing_exec(self, cmd, **kwargs):
        if cmd == ["bash", "/tests/test.sh"] and self.labels.get(
                "facet.validation.trial") == "oracle":
            raise de.TransientEngineError("exec stream broke: connection reset by peer")
        return real_exec(self, cmd, **kwargs)

    monkeypatch.setattr(de.Sandbox, "exec", failing_exec)
    with pytest.raises(de.TransientEngineError):
        validate(client, make_task(tmp_path))


# ---------------------------------------------------------------------------- pieces


def test_capture_initial_state(client, base_image, tmp_path, no_leftovers):
    build = de.build_image(client, make_task(tmp_path) / "environment", timeout_s=180)
    e0 = v.capture_initial_state(client, build.image_tag, paths=["/app", "/nonexistent"],
                                 limits=SMALL, owner=OWNER)
    files = e0["snapshot"]["files"]
    assert files["/app/input.txt"]["size"] == len("alpha\nbeta\ngamma\n")
    assert len(files["/app/input.txt"]["sha256"]) == 64
    assert e0["snapshot"]["missing"] == ["/nonexistent"] and e0["services"] == []


LEAK_SCAN_DOCKERFILE = DOCKERFILE + (
    "RUN mkdir -p '/var/cache/.x/a b' /opt/tool/__pycache__ /srv/seed"
    " && printf 'ALPHA\\nBETA\\nGAMMA\\nand more than 23 bytes\\n' > '/var/cache/.x/a b/expected'"
    " && printf 'a pyc is never an answer, whatever it holds' > /opt/tool/__pycache__/m.cpython-311.pyc"
    " && printf tiny > /var/cache/.x/tiny"
    " && printf 'a file in /app is read whole by the e0 snapshot, not hashed' > /app/note.txt"
    " && printf 'under a root passed to the scan as read already' > /srv/seed/s.txt\n"
    # a new directory deep in the base's trees, and a base file overwritten in place
    "RUN mkdir -p /usr/lib/python3/dist-packages/newpkg"
    " && printf 'a new file in a new directory deep in the base' > /usr/lib/python3/dist-packages/newpkg/d.txt"
    " && printf 'a base file overwritten by the task, in place' > /usr/share/doc/bash/README\n")


def test_the_leak_image_scan_hashes_the_files_the_tasks_build_wrote(client, base_image, tmp_path, no_leftovers):
    """The image-wide part of the leaked-answer check: what the scan sees, and what it costs."""
    import hashlib

    from facet_site.lib.validation import acceptance

    build = de.build_image(client, make_task(tmp_path, dockerfile=LEAK_SCAN_DOCKERFILE) / "environment",
                           timeout_s=180)
    newer_than = acceptance.image_created_at(client, de.BASE_IMAGE_TAG)
    assert newer_than is not None
    expected = {hashlib.sha256(content).hexdigest(): [path] for path, content in [
        ("/var/cache/.x/a b/expected", b"ALPHA\nBETA\nGAMMA\nand more than 23 bytes\n"),
        ("/usr/lib/python3/dist-packages/newpkg/d.txt", b"a new file in a new directory deep in the base"),
        ("/usr/share/doc/bash/README", b"a base file overwritten by the task, in place")]}
    layered = acceptance.image_is_layered(client, build.image_tag)
    assert layered == (de.engine_info(client)["storage_driver"] in acceptance.LAYERED_DRIVERS)
    for skip_old_dirs in (False, True)[:1 + layered]:  # the whole walk, and the one overlayfs allows
        command = trials.image_scan_command(newer_than, ["/app", "/srv/seed"], skip_old_dirs=skip_old_dirs)
        with de.Sandbox(client, build.image_tag, owner=OWNER, limits=SMALL) as sb:
            run = sb.exec(command, timeout_s=trials.IMAGE_SCAN_TIMEOUT_S, user="0")
        found = trials.parse_sha256sum(run.output)
        assert found == expected, (skip_old_dirs, run.output)  # nothing else
        print(f"\nimage scan (skip_old_dirs={skip_old_dirs}): {run.seconds * 1000:.0f} ms, {len(found)} files")


def test_leak_serializations_match_an_answer_stored_another_way():
    import hashlib

    from facet_site.lib.task_defects_leaks import answer_serializations, find_leaked_answers, image_files_matching

    answer = '{"lines": 3, "name": "facet-report", "words": 9}'
    stored = json.dumps(json.loads(answer), sort_keys=True, indent=2) + "\n"  # a python dump of it
    crlf = "id,total\r\n1,30\r\n2,45\r\n3,12\r\n4,99\r\n"
    digests = {hashlib.sha256(stored.encode()).hexdigest(): ["/var/lib/.x/expected.json"],
               hashlib.sha256(crlf.encode()).hexdigest(): ["/etc/.y/totals.csv"]}
    outputs = {"/app/report.json": answer, "/app/totals.csv": crlf.replace("\r\n", "\n")}
    hits = image_files_matching(outputs, digests)
    assert hits == {"/var/lib/.x/expected.json": stored.encode(), "/etc/.y/totals.csv": crlf.encode()}
    assert all(d in answer_serializations(outputs["/app/report.json"]) for d in list(digests)[:1])
    leaks = find_leaked_answers(outputs, hits, v.instruction_paths("Write /app/report.json and /app/totals.csv."))
    assert {f["file"] for f in leaks} == {"/var/lib/.x/expected.json", "/etc/.y/totals.csv"}
    assert all(f["check"] == "leaked_answer" and f["severity"] == "error" for f in leaks)
    # an input the instruction names, wherever it is, is not a leak
    named = v.instruction_paths("Convert /etc/.y/totals.csv to LF line ends in /app/totals.csv.")
    assert [f["file"] for f in find_leaked_answers(outputs, hits, named)] == ["/var/lib/.x/expected.json"]


def test_derive_partial_solutions_cuts_at_command_boundaries():
    solve = ("#!/bin/bash\nset -e\ncd /app\ncat > a.conf <<'EOF'\nx = 1\n\nif\nEOF\n"
             "if [ -f a.conf ]; then\n  cp a.conf b.conf\nfi\necho 'two\nlines' > c.txt\n"
             "touch d.txt\n")
    cuts = v.derive_partial_solutions(solve)
    assert len(cuts) == 3
    for text in cuts:
        assert partials._is_complete_shell(text), text
        assert text.startswith("#!/bin/bash\nset -e\ncd /app\ncat > a.conf <<'EOF'\n")
        assert "touch d.txt" not in text
    assert cuts[0].endswith("lines' > c.txt\n# facet: partial solution, 3 of 4 commands\n")
    assert "if [" not in cuts[2] and "3 of 4" in cuts[0]
    assert v.derive_partial_solutions("#!/bin/bash\nset -e\necho only\n") == []


# ---------------------------------------------------------------------------- bench


def test_plain_cli_baseline_runs(client, base_image, tmp_path, no_leftovers):
    task = make_task(tmp_path)
    ours = validate(client, task, partial_solutions=())
    assert ours.accepted
    plain = v.time_plain_cli_validation(task, ours.image_tag)
    assert plain["nop_reward"] == 0 and plain["oracle_reward"] == 1
    assert plain["total_seconds"] > 0
    ours_trials = sum(t.total_seconds for t in ours.trials)
    print(f"\nnop+oracle: validate_task {ours_trials:.2f} s (whole call "
          f"{ours.total_seconds:.2f} s incl. cached build {ours.build_seconds:.2f} s), plain CLI "
          f"{plain['total_seconds']:.2f} s (nop {plain['nop_seconds']:.2f}, oracle "
          f"{plain['oracle_seconds']:.2f})")
    rows = client.api.containers(all=True, filters={"label": [f"{de.LABEL_SANDBOX}=1"]})
    assert not [r for r in rows if (r.get("Labels") or {}).get(de.LABEL_OWNER, "")
                .startswith("plain-cli:")]
