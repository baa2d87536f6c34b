"""Harbor task lint (lint_task): a good task and a converted TB1 task are clean, a bad task trips
every rule, missing files and the optional rules, the paths to writing the reward, and a bad typed
config reported instead of raised."""
from __future__ import annotations

import pytest

from facet_site.lib.harbor import TaskBundle, lint_task, read_task_dir
from tests.lib.harbor_samples import good_bundle, make_tb1


# ---- lint ------------------------------------------------------------------------------------------


def test_lint_good_task_is_clean():
    assert lint_task(good_bundle()) == []


def test_lint_round_tripped_tb1_has_no_reward_findings(tmp_path):
    rules = {f.rule for f in lint_task(read_task_dir(make_tb1(tmp_path / "t")))}
    assert "reward-always-written" not in rules and "script-shebang" not in rules


def bad_bundle() -> TaskBundle:
    b = good_bundle()
    b.config.cpus = None
    b.config.difficulty = "impossible"
    b.config.docker_image = "ubuntu"
    b.config.extra.update({
        "surprise": 1,
        "artifacts": ["/app/out", "/app/out/sub", "/logs/agent"],
        "environment": {"network_mode": "no-network"},
    })
    b.instruction = ("Run `python3 -m venv /opt/venv && /opt/venv/bin/pip install requests==2.32.3` then "
                     "save the result in /srv/report.txt.\n")
    b.files.update({
        "environment/Dockerfile": b"FROM ubuntu\nCOPY tests/ /tests/\nRUN pip install numpy\n",
        "environment/docker-compose.yaml": (b"services:\n  main:\n    privileged: true\n    cap_add: [SYS_ADMIN]\n"
                                            b"    volumes:\n      - /var/run/docker.sock:/var/run/docker.sock\n"),
        "environment/copy_of_test.py": b"def test_hidden():\n    assert secret() == 42\n",
        "tests/test_hidden.py": b"def test_hidden():\n    assert secret() == 42\n",
        "tests/test.sh": (b"set -e\napt-get update && apt-get install -y curl\n"
                          b"curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh\n"
                          b"bash /solution/solve.sh\npytest $TEST_DIR/test_state.py\n"
                          b"echo 1 > /logs/verifier/reward.txt\n"),
        "solution/solve.sh": b"python3 -m venv /opt/venv && /opt/venv/bin/pip install requests==2.32.3\n",
    })
    return b


EXPECTED_BAD_RULES = {
    "invalid-task-config", "unknown-config-field", "schema-version-feature", "resources-unset",
    "overlapping-artifacts", "artifact-log-overlap", "compose-privileged", "compose-additional-capabilities",
    "compose-writable-bind-mount", "compose-external-bind-mount", "unpinned-image", "unpinned-python-dependency",
    "verifier-runtime-install", "verifier-network-download", "agent-image-test-leak", "reward-always-written",
    "tests-run-solution", "script-shebang", "test-dir-env", "instruction-leaks-solution", "instruction-path-unknown",
}


def test_lint_finds_every_rule_on_a_bad_task():
    findings = lint_task(bad_bundle())
    rules = {f.rule for f in findings}
    assert EXPECTED_BAD_RULES <= rules, EXPECTED_BAD_RULES - rules
    by_rule = {f.rule: f for f in findings}
    assert by_rule["verifier-runtime-install"].path == "tests/test.sh" and by_rule["verifier-runtime-install"].line == 2
    assert by_rule["agent-image-test-leak"].severity == "error"
    assert any(f.rule == "agent-image-test-leak" and f.path == "environment/copy_of_test.py" for f in findings)
    assert any(f.rule == "instruction-path-unknown" and "/srv/report.txt" in f.message for f in findings)
    assert "set -e" in by_rule["reward-always-written"].message


def test_lint_missing_files_and_optional_rules():
    b = good_bundle()
    del b.files["solution/solve.sh"], b.files["environment/Dockerfile"], b.files["tests/test.sh"]
    b.instruction = "  \n"
    rules = {(f.rule, f.path) for f in lint_task(b)}
    assert {("missing-solution", "solution/solve.sh"), ("invalid-task-files", "tests/test.sh"),
            ("invalid-task-files", "instruction.md"), ("invalid-task-files", "environment/")} <= rules
    assert {f.rule for f in lint_task(good_bundle(), include_optional=True)} == {"root-agent", "shared-verifier"}


@pytest.mark.parametrize("script,fragment", [
    (b"#!/bin/bash\npytest /tests\n", "never writes"),
    (b"#!/bin/bash\nif [ \"$PWD\" = / ]; then exit 1; fi\npytest /tests && echo 1 > /logs/verifier/reward.txt\n"
     b"[ -f /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt\n", "exits before"),
    (b"#!/bin/bash -e\npytest /tests\necho 1 > /logs/verifier/reward.txt\n", "set -e"),
    (b"#!/bin/bash\nif pytest /tests; then\n  echo 1 > /logs/verifier/reward.txt\nfi\n", "only ever writes reward 1"),
])
def test_lint_reward_paths(script, fragment):
    b = good_bundle()
    b.files["tests/test.sh"] = script
    found = [f for f in lint_task(b) if f.rule == "reward-always-written"]
    assert len(found) == 1 and fragment in found[0].message


def test_lint_accepts_trap_and_computed_reward():
    b = good_bundle()
    b.files["tests/test.sh"] = (b"#!/bin/bash\nset -e\nw() { echo $? > /tmp/s; [ $(cat /tmp/s) = 0 ] && echo 1 > "
                                b"/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt; }\n"
                                b"trap w EXIT\npytest /tests/test_state.py\n")
    assert lint_task(b) == []
    b.files["tests/test.sh"] = (b"#!/bin/bash\npytest /tests/test_state.py\nr=$(( $? == 0 ))\n"
                                b"echo $r > /logs/verifier/reward.txt\n")
    assert lint_task(b) == []


def test_lint_reports_bad_typed_config_instead_of_raising():
    b = good_bundle()
    b.config.verifier_timeout_sec = "soon"
    assert [f.rule for f in lint_task(b)] == ["invalid-task-config"]
