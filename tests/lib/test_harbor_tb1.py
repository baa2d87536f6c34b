"""Terminal-Bench 1.x tasks read as Harbor tasks: the conversion, the converted test.sh writing a
reward on every path, docker-compose kept as Harbor's or replaced by the Dockerfile, and errors
naming file and field."""
from __future__ import annotations

import os
import subprocess

import pytest

from facet_site.lib.harbor import TaskFormatError, read_task_dir, write_task_dir
from tests.lib.harbor_samples import TB1_COMPOSE, TB1_YAML, make_tb1


# ---- Terminal-Bench 1.x ----------------------------------------------------------------------------


def test_tb1_task_converts(tmp_path):
    bundle = read_task_dir(make_tb1(tmp_path / "hello-tb1"))
    assert bundle.source_format == "terminal-bench-1" and bundle.name == "hello-tb1"
    assert bundle.instruction == "Write the word hello to /app/out.txt.\n"
    cfg = bundle.config
    assert (cfg.author_name, cfg.difficulty, cfg.category, cfg.tags) == ("alice", "easy", "file-operations", ["files"])
    assert cfg.agent_timeout_sec == 180.0 and cfg.verifier_timeout_sec == 30.0 and cfg.memory_mb == 2048
    assert sorted(bundle.files) == ["environment/Dockerfile", "environment/setup.sh", "solution/solve.sh",
                                    "tests/helper.sh", "tests/test.sh", "tests/test_outputs.py"]
    assert bundle.files["solution/solve.sh"].startswith(b"#!/bin/bash\n")
    test_sh = bundle.files["tests/test.sh"].decode()
    assert "$TEST_DIR" not in test_sh.split("trap __facet_write_reward EXIT", 1)[1] and "source /tests/helper.sh" in test_sh
    assert "trap __facet_write_reward EXIT" in test_sh
    dockerfile = bundle.files["environment/Dockerfile"].decode()
    assert 'ENV GREETING="hi there"' in dockerfile and "WORKDIR /app" in dockerfile and "TEST_DIR" not in dockerfile
    assert any("dropped" in n for n in bundle.notes)
    # The converted task is a valid Harbor task: it survives a write/read round trip.
    assert read_task_dir(write_task_dir(bundle, tmp_path / "out" / "hello-tb1")) == bundle


@pytest.mark.parametrize("early,expected", [("0", "1"), ("1", "0")])
def test_tb1_converted_test_sh_writes_reward_on_every_path(tmp_path, early, expected):
    bundle = read_task_dir(make_tb1(tmp_path / "t"))
    logs = tmp_path / "logs"
    tests = tmp_path / "tests_dir"
    tests.mkdir()
    (tests / "helper.sh").write_text("true\n")
    (tests / "test_outputs.py").write_text("")
    script = bundle.files["tests/test.sh"].decode().replace("/logs/verifier", str(logs)).replace("/tests", str(tests))
    (tmp_path / "test.sh").write_text(script)
    proc = subprocess.run(["bash", str(tmp_path / "test.sh")], env={"EARLY": early, "PATH": os.environ["PATH"]},
                          capture_output=True, timeout=20)
    assert (logs / "reward.txt").read_text().strip() == expected
    assert proc.returncode == (3 if early == "1" else 0)


def test_tb1_compose_with_sidecar_is_kept_as_harbor_compose(tmp_path):
    compose = TB1_COMPOSE + "  db:\n    image: postgres:16\n"
    bundle = read_task_dir(make_tb1(tmp_path / "t", compose=compose))
    import yaml
    data = yaml.safe_load(bundle.files["environment/docker-compose.yaml"])
    assert set(data["services"]) == {"main", "db"}
    assert "build" not in data["services"]["main"] and "container_name" not in data["services"]["main"]
    assert data["services"]["main"]["environment"] == {"GREETING": "hi there"}


def test_tb1_without_compose_uses_dockerfile(tmp_path):
    bundle = read_task_dir(make_tb1(tmp_path / "t", compose=None))
    assert bundle.files["environment/Dockerfile"] == b"FROM ubuntu:24.04\n"


@pytest.mark.parametrize("change,file,field,fragment", [
    ({"task.yaml": b"author_name: x\n"}, "task.yaml", "instruction", "instruction must be a non-empty string"),
    ({"task.yaml": b"instruction: [unclosed\n"}, "task.yaml", None, "invalid YAML"),
    ({"task.yaml": TB1_YAML.replace("max_test_timeout_sec: 30", "max_test_timeout_sec: soon").encode()},
     "task.yaml", "max_test_timeout_sec", "line 10: max_test_timeout_sec must be a positive number"),
    ({"solution.sh": None, "solution.yaml": b"- echo hi\n"}, "solution.yaml", None, "command-list solutions"),
    ({"run-tests.sh": None}, "run-tests.sh", None, "missing run-tests.sh"),
    ({"docker-compose.yaml": b"services:\n  client:\n    build:\n      context: sub\n"}, "docker-compose.yaml",
     "services.client.build.context", "not supported"),
])
def test_tb1_errors_name_file_and_field(tmp_path, change, file, field, fragment):
    root = make_tb1(tmp_path / "t")
    for rel, data in change.items():
        if data is None:
            (root / rel).unlink()
        else:
            (root / rel).write_bytes(data)
    with pytest.raises(TaskFormatError) as err:
        read_task_dir(root)
    assert err.value.file == file and err.value.field == field and fragment in str(err.value)
