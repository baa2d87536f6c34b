"""Harbor task samples for the lib/harbor tests and others: a good bundle, a task directory written
from task.toml text, and a Terminal-Bench 1.x task directory (whose client service
tests/tasks/dataset_fixtures.py builds on)."""
from __future__ import annotations

from pathlib import Path

from facet_site.lib.harbor import TaskBundle, TaskConfig


GOOD_TEST_SH = b"""#!/bin/bash
echo 0 > /logs/verifier/reward.txt
pytest --junitxml=/logs/verifier/junit.xml /tests/test_state.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; fi
"""


def good_bundle(name: str = "hello-file") -> TaskBundle:
    cfg = TaskConfig(author_name="facet", author_email="facet@example.com", difficulty="easy",
                     category="programming", tags=["trivial"], scenario_id="sc-1", version_hash="abc123",
                     skills=["shell", "files"])
    cfg.extra = {"metadata": {"expert_time_estimate_min": 1.0}}
    files = {
        "environment/Dockerfile": b"FROM python:3.12-slim\nRUN pip install --no-cache-dir pytest==8.4.1\nWORKDIR /app\n",
        "solution/solve.sh": b"#!/bin/bash\necho 'Hello, world!' > /app/hello.txt\n",
        "tests/test.sh": GOOD_TEST_SH,
        "tests/test_state.py": (b"from pathlib import Path\n\n\ndef test_hello():\n"
                                b"    assert Path('/app/hello.txt').read_text().strip() == 'Hello, world!'\n"),
        "environment/data/seed.bin": bytes(range(256)),
    }
    return TaskBundle(name=name, instruction='Create the file /app/hello.txt containing "Hello, world!".\n',
                      config=cfg, files=files)


def make_task(root: Path, toml: str, *, instruction: str | None = "Do it.\n", files: dict[str, bytes] | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "task.toml").write_text(toml)
    if instruction is not None:
        (root / "instruction.md").write_text(instruction)
    (root / "environment").mkdir()
    for rel, data in (files if files is not None else {
        "environment/Dockerfile": b"FROM ubuntu:24.04\nWORKDIR /app\n",
        "solution/solve.sh": b"#!/bin/bash\ntrue\n",
        "tests/test.sh": GOOD_TEST_SH,
    }).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


TB1_YAML = """instruction: |
  Write the word hello to /app/out.txt.
author_name: alice
author_email: alice@example.com
difficulty: easy
category: file-operations
tags: [files]
parser_name: pytest
max_agent_timeout_sec: 180
max_test_timeout_sec: 30
run_tests_in_same_shell: false
"""

TB1_COMPOSE = """services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
      - GREETING=hi there
    working_dir: /app
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
"""

TB1_RUN_TESTS = b"""#!/bin/bash
if [ "$EARLY" = 1 ]; then exit 3; fi
source $TEST_DIR/helper.sh
test -f "${TEST_DIR}/test_outputs.py"
echo "=========================== short test summary info ============================"
echo "PASSED tests/test_outputs.py::test_x"
"""


def make_tb1(root: Path, *, compose: str | None = TB1_COMPOSE, extra: dict[str, bytes] | None = None) -> Path:
    files = {"task.yaml": TB1_YAML.encode(), "Dockerfile": b"FROM ubuntu:24.04\n", "solution.sh": b"echo hello > /app/out.txt\n",
             "run-tests.sh": TB1_RUN_TESTS, "tests/test_outputs.py": b"def test_x():\n    pass\n",
             "tests/helper.sh": b"true\n", "setup.sh": b"#!/bin/sh\n"}
    if compose is not None:
        files["docker-compose.yaml"] = compose.encode()
    files.update(extra or {})
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root
