"""Tasks the way construction leaves them (validated, reviewed, with rollouts), export archives
read back, and Harbor 1.0/1.1 and Terminal-Bench 1 task directories to import: shared by the
dataset tests."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

from demo import scripted_llm as scripted
from scenarios.run_config import construction_config
from tasks import exports, summary, versions
from tasks.models import (
    Decision,
    RolloutBatch,
    Step,
    Task,
    TaskStatus,
    TestResult,
    Trajectory,
    TrajectoryStatus,
    Trial,
    Turn,
    Validation,
    ValidationStatus,
    ReviewVerdict,
)
from tests.lib.harbor_samples import make_task


GOOD_TEST_SH = b"""#!/bin/bash
if grep -qx ok /app/out.txt 2>/dev/null; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


# --- building tasks the way construction leaves them ------------------------------------------


def _generated(scenario, run, *, name: str, reviewer=None, verdict: str | None = ReviewVerdict.APPROVE,
               rollouts: tuple = ()) -> Task:
    """A validated task of the run's scenario, with its trials, a review decision and rollouts."""
    task = Task.objects.create(scenario=scenario, run=run, strategy=run.strategy, name=name,
                               status=TaskStatus.VALIDATED, step=Step.DONE)
    files = versions.make_files(
        task, environment={"Dockerfile": "FROM facet-base:bookworm\nWORKDIR /app\nCOPY data/ /app/data/\n"
                                         "COPY init.sh /usr/local/bin/facet-init.sh\n"
                                         "RUN bash /usr/local/bin/facet-init.sh\n",
                           "data/orders.csv": scripted.ORDERS_CSV, "data/customers.csv": scripted.CUSTOMERS_CSV,
                           "init.sh": "#!/bin/bash\nset -e\nmkdir -p /app/out\n"},
        instruction=f"{name}: total the **paid** orders of `/app/data/orders.csv` per customer into "
                    "`/app/out/report.csv` (header `name,total`), then write `done` to `/app/out/status.txt`.\n",
        solve_sh=scripted.GOOD_SOLVE, test_sh=scripted.GOOD_TEST_SH, test_py=scripted.GOOD_TEST_PY,
        run_cfg=construction_config(run))
    version = versions.create_version(task, files)
    Task.objects.filter(pk=task.pk).update(current_version=version)
    validation = Validation.objects.create(version=version, status=ValidationStatus.DONE, accepted=True)
    Trial.objects.create(validation=validation, version=version, kind="nop", reward=0.0, passed=True)
    oracle = Trial.objects.create(validation=validation, version=version, kind="oracle", reward=1.0, passed=True)
    TestResult.objects.bulk_create([TestResult(trial=oracle, name=f"test_{i}", outcome="passed") for i in range(3)])
    if verdict:
        Decision.objects.create(task=task, version=version, content_hash=version.content_hash, verdict=verdict,
                                reason="" if verdict == ReviewVerdict.APPROVE else "other", author=reviewer,
                                comment="looks right" if verdict == ReviewVerdict.APPROVE else "no")
    for model, passed in rollouts:
        _rollout(task, version, model=model, passed=passed)
    task.refresh_from_db()
    summary.set_labels(task)
    return summary.refresh_summary(task)


def _rollout(task, version, *, model: str, passed: bool) -> Trajectory:
    batch, _ = RolloutBatch.objects.get_or_create(name=f"batch {model}", model=model,
                                                  defaults={"max_turns": 20, "timeout_s": 600})
    attempt = Trajectory.objects.filter(batch=batch, task=task).count()
    traj = Trajectory.objects.create(batch=batch, task=task, version=version, attempt=attempt, model=model,
                                     agent="terminus-2", status=TrajectoryStatus.DONE, reward=1.0 if passed else 0.0,
                                     passed=passed, n_turns=2)
    # as tasks.rollouts stores them: the command with what running it gave
    Turn.objects.create(trajectory=traj, index=1, analysis="Look at the data first.", plan="List /app/data.",
                        commands=[{"command": "ls /app/data", "program": "ls", "kind": "observation",
                                   "exit_code": 0, "seconds": 0.01, "timeout_s": 30.0, "timed_out": False}],
                        output="$ ls /app/data\ncustomers.csv\norders.csv\n[exit code 0, 0.0 s]")
    Turn.objects.create(trajectory=traj, index=2, analysis="Write the report.", plan="Run python.",
                        commands=[{"command": "python3 solve.py", "program": "python3", "kind": "action",
                                   "exit_code": 0, "seconds": 0.2, "timeout_s": 30.0}], task_complete=True)
    return traj


def _export(tmp_path, query: str = "", parts=None, name: str = "out.tar.gz") -> tuple[Path, dict]:
    result = exports.write_archive(tmp_path / name, query=query, parts=parts)
    return result.path, result.summary


def _members(archive: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive) as tf:
        return {m.name: m for m in tf.getmembers()}


def _read(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tf:
        return tf.extractfile(f"facet-dataset/{name}").read()


def _unpack(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tf:
        tf.extractall(dest, filter="data")
    return dest / "facet-dataset"


def _manifest(archive: Path) -> list[dict]:
    return [json.loads(line) for line in _read(archive, "manifest.jsonl").decode().splitlines()]


def _task_dir(root: Path, name: str, toml: str, *, instruction: str | None = "Write ok to /app/out.txt.\n",
              files: dict | None = None) -> Path:
    """A Harbor task directory `root/name` that writes ok to /app/out.txt (harbor_samples.make_task
    with this file's environment, solution and verifier)."""
    return make_task(root / name, toml, instruction=instruction, files=files if files is not None else {
        "environment/Dockerfile": b"FROM facet-base:bookworm\nWORKDIR /app\n",
        "solution/solve.sh": b"#!/bin/bash\necho ok > /app/out.txt\n",
        "tests/test.sh": GOOD_TEST_SH,
    })


TB20 = """version = "1.0"

[metadata]
author_name = "someone"
difficulty = "easy"
category = "file-operations"
tags = ["files", "shell"]

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 120.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory = "2G"
storage = "10G"
"""
TB21 = """schema_version = "1.1"
artifacts = []

[task]
name = "terminal-bench/fix-file"
description = "Write a file."
keywords = ["files"]

[metadata]
difficulty = "medium"
category = "software-engineering"
tags = ["coding"]

[verifier]
timeout_sec = 900.0

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 2048
storage_mb = 10240
allow_internet = true
mcp_servers = []

[verifier.env]

[solution.env]
"""


def _tb1_dir(root: Path, name: str) -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "task.yaml").write_text("instruction: |\n  Write ok to /app/out.txt.\nauthor_name: tb1\ndifficulty: easy\n"
                                 "category: file-operations\ntags: [legacy]\nmax_agent_timeout_sec: 300\n"
                                 "max_test_timeout_sec: 60\nparser_name: pytest\n")
    (d / "Dockerfile").write_text("FROM facet-base:bookworm\nWORKDIR /app\n")
    (d / "docker-compose.yaml").write_text(
        "services:\n  client:\n    build:\n      context: .\n    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n"
        "    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}\n    command: [sh, -c, sleep infinity]\n"
        "    environment:\n      - TEST_DIR=${T_BENCH_TEST_DIR}\n")
    (d / "solution.sh").write_text("#!/bin/bash\necho ok > /app/out.txt\n")
    (d / "run-tests.sh").write_text("#!/bin/bash\ngrep -qx ok /app/out.txt\n")
    (d / "tests" / "test_outputs.py").write_text("def test_ok():\n    assert open('/app/out.txt').read() == 'ok\\n'\n")
    return d
