"""Datasets in and out: exports (selection, archive layout, manifests, Hugging Face layout, SFT,
reproducibility), imports (Harbor 1.0 and 1.x, Terminal-Bench 1.x, datasets, archives, re-imports)
and every kind of bad input, the round trip between the two, Harbor's own linter and a Docker
validation of an exported task."""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.core.management import call_command

from facet_site.lib import harbor
from demo import scripted_llm as scripted
from scenarios.run_config import construction_config
from tasks import export_records, exports, imports, summary, versions
from tasks.models import (
    Decision,
    Export,
    ExportStatus,
    LabelKind,
    ReviewState,
    RolloutBatch,
    Step,
    Task,
    TaskLabel,
    TaskStatus,
    TaskVersion,
    TestResult,
    Trajectory,
    TrajectoryStatus,
    Trial,
    Turn,
    Validation,
    ValidationStatus,
    ReviewVerdict,
)
from tests.conftest import REPO

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


@pytest.fixture
def world(make_run, users):
    """Three generated tasks (approved with rollouts, rejected, unreviewed) of one run."""
    run = make_run("", "b", "c")
    scenarios = list(run.scenarios.order_by("id"))
    approved = _generated(scenarios[0], run, name="Paid orders per customer", reviewer=users["reviewer"],
                          rollouts=(("model-a", True), ("model-a", False), ("model-a", True), ("model-b", False)))
    rejected = _generated(scenarios[1], run, name="Rejected one", reviewer=users["admin"], verdict=ReviewVerdict.REJECT)
    unreviewed = _generated(scenarios[2], run, name="Not reviewed yet", verdict=None)
    return {"run": run, "approved": approved, "rejected": rejected, "unreviewed": unreviewed}


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


# --- export: selection and layout ----------------------------------------------------------------


def test_by_default_only_approved_tasks_are_exported_with_the_approved_version(world, tmp_path):
    archive, s = _export(tmp_path)
    [row] = _manifest(archive)
    task = world["approved"]
    assert row["task_id"] == task.pk and row["content_hash"] == task.current_version.content_hash
    assert s["filter"] == "review=approved" and s["tasks"] == 1
    dirs = {n.split("/")[2] for n in _members(archive) if n.startswith("facet-dataset/tasks/") and n.count("/") >= 2}
    assert dirs == {row["directory"].split("/")[1]}
    assert row["directory"] == f"tasks/paid-orders-per-customer-{task.current_version.content_hash[7:15]}"


def test_the_filter_is_honoured_exactly(world, tmp_path):
    rows = _manifest(_export(tmp_path, "review=rejected&review=unreviewed")[0])
    assert [r["task_id"] for r in rows] == sorted([world["rejected"].pk, world["unreviewed"].pk])
    rows = _manifest(_export(tmp_path, f"ids={world['unreviewed'].pk}", name="b.tar.gz")[0])
    assert [r["name"] for r in rows] == ["Not reviewed yet"]
    # sort and columns alone select nothing in particular: still the approved tasks
    rows = _manifest(_export(tmp_path, "sort=-name&cols=name", name="c.tar.gz")[0])
    assert [r["task_id"] for r in rows] == [world["approved"].pk]


def test_a_filter_with_a_mistake_is_refused_rather_than_widened(world):
    with pytest.raises(exports.ExportError, match="review: unknown value 'aproved'"):
        exports.create_export(query="review=aproved")
    with pytest.raises(exports.ExportError, match="unknown part 'pdf'"):
        exports.create_export(parts=["harbor", "pdf"])
    assert not Export.objects.exists()


def test_the_manifest_carries_the_provenance_of_each_task(world, tmp_path, users):
    archive, _ = _export(tmp_path)
    [row] = _manifest(archive)
    task = world["approved"]
    skills = task.scenario.pair.ordered_skills()
    assert [s["key"] for s in row["skills"]] == [s.key for s in skills]
    assert row["scenario_id"] == task.scenario_id and row["scenario_title"] == task.scenario.title
    assert row["run_id"] == world["run"].pk and row["run_name"] == world["run"].name
    assert row["strategy"] == "forward" and row["origin"] == "generated"
    assert set(row["categories"]) == {s.category.slug for s in skills if s.category_id}
    assert row["tags"] and row["domains"]
    assert row["validation"]["accepted"] is True
    assert [(t["kind"], t["reward"]) for t in row["validation"]["trials"]] == [("nop", 0.0), ("oracle", 1.0)]
    assert row["validation"]["trials"][1]["n_tests"] == 3 and row["n_tests"] == 3
    [decision] = row["decisions"]
    assert decision["verdict"] == "approve" and decision["reviewer"] == users["reviewer"].get_username()
    assert row["standing_verdict"] == "approve" and row["review_state"] == "approved"
    # model-a: 2 of 3 passed; model-b: 0 of 1; pooled 2 of 4
    by_model = {r["model"]: r for r in row["rollouts"]}
    assert by_model["model-a"]["pass_at_1"] == pytest.approx(2 / 3) and by_model["model-a"]["pass_at_3"] == 1.0
    assert by_model["model-b"]["pass_at_1"] == 0.0 and by_model["model-b"]["pass_at_3"] is None
    assert row["n_rollouts"] == 4 and row["n_rollouts_passed"] == 2
    assert row["pass_at_1"] == pytest.approx(0.5) and row["pass_at_3"] == pytest.approx(1 - 0 / 4)


def test_a_withdrawn_decision_is_marked_and_not_the_standing_one(world, tmp_path, users):
    task = world["approved"]
    first = task.decisions.get()
    Decision.objects.create(task=task, version=task.current_version, content_hash=first.content_hash,
                            verdict=first.verdict, author=users["admin"], withdraws=first)
    summary.refresh_summary(task)
    rows = _manifest(_export(tmp_path, f"ids={task.pk}")[0])
    assert [(d["id"], d["withdrawn"]) for d in rows[0]["decisions"]] == [(first.pk, True)]
    assert rows[0]["standing_verdict"] is None and rows[0]["review_state"] == "unreviewed"


def test_every_exported_task_reads_back_with_its_version_hash_and_lints_clean(world, tmp_path):
    archive, _ = _export(tmp_path, "status=validated")
    root = _unpack(archive, tmp_path / "x")
    for row in _manifest(archive):
        bundle = harbor.read_task_dir(root / row["directory"])
        assert harbor.content_hash(bundle) == row["exported_content_hash"]
        assert [f for f in harbor.lint_task(bundle) if f.severity == "error"] == []
        assert os.access(root / row["directory"] / "tests" / "test.sh", os.X_OK)
        assert os.access(root / row["directory"] / "solution" / "solve.sh", os.X_OK)


def test_directory_names_are_unique_and_readable_when_names_collide():
    names = exports._Names()
    a = names("Same name!", "sha256:" + "ab" * 32)
    b = names("Same name!", "sha256:" + "ab" * 4 + "cd" * 28)  # same first 8 hex digits
    c = names("Same name!", "sha256:" + "ab" * 32)  # the very same hash again
    assert a == "same-name-abababab"
    assert b == "same-name-ababababcdcd"
    assert c.startswith("same-name-") and len({a, b, c}) == 3
    assert names("", "sha256:" + "0" * 64) == "task-00000000"


def test_two_tasks_with_the_same_name_get_two_directories(world, tmp_path):
    Task.objects.filter(pk=world["rejected"].pk).update(name=world["unreviewed"].name)
    rows = _manifest(_export(tmp_path, "review=rejected&review=unreviewed")[0])
    assert len({r["directory"] for r in rows}) == 2
    assert all(r["directory"].startswith("tasks/not-reviewed-yet-") for r in rows)


def test_the_same_selection_exported_twice_is_byte_identical(world, tmp_path, settings):
    first = exports.create_export(query="", queue=False)
    second = exports.create_export(query="review=approved", queue=False)
    a, b = exports.run_export(first.pk), exports.run_export(second.pk)
    assert a.status == b.status == ExportStatus.DONE
    assert a.archive_sha256 == b.archive_sha256
    assert Path(a.archive_path).read_bytes() == Path(b.archive_path).read_bytes()
    assert hashlib.sha256(Path(a.archive_path).read_bytes()).hexdigest() == a.archive_sha256
    for info in _members(Path(a.archive_path)).values():
        assert (info.mtime, info.uid, info.gid, info.uname, info.gname) == (exports.FIXED_MTIME, 0, 0, "", "")
    assert Path(a.archive_path).read_bytes()[4:8] == b"\0\0\0\0"  # gzip MTIME


def test_a_change_in_the_selection_changes_the_archive(world, tmp_path):
    before, _ = _export(tmp_path, name="a.tar.gz")
    Decision.objects.create(task=world["rejected"], version=world["rejected"].current_version,
                            content_hash=world["rejected"].current_version.content_hash, verdict=ReviewVerdict.APPROVE)
    summary.refresh_summary(world["rejected"])
    after, _ = _export(tmp_path, name="b.tar.gz")
    assert before.read_bytes() != after.read_bytes()
    assert len(_manifest(after)) == 2


def test_parquet_manifest_loads_with_pyarrow_and_equals_the_jsonl(world, tmp_path):
    archive, _ = _export(tmp_path, "status=validated")
    table = pq.read_table(io.BytesIO(_read(archive, "manifest.parquet")))
    assert table.num_rows == 3 and table.schema.equals(export_records.MANIFEST_SCHEMA)
    assert table.to_pylist() == _manifest(archive)
    tasks = pq.read_table(io.BytesIO(_read(archive, "data/tasks.parquet"))).to_pylist()
    row = next(r for r in tasks if r["task_id"] == world["approved"].pk)
    files = {f["path"]: f["content"] for f in row["files"]}
    assert files["tests/test_outputs.py"] == scripted.GOOD_TEST_PY
    assert row["instruction"].startswith("Paid orders per customer:")
    assert tomllib.loads(row["task_toml"])["metadata"]["facet_skills"]


def test_the_hugging_face_layout_loads_with_datasets(world, tmp_path, monkeypatch):
    # local files only: nothing may be asked of the Hub (read when `datasets` is first imported)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    load_dataset = pytest.importorskip(
        "datasets", reason="the `datasets` package is not installed (pip install -e '.[test]')").load_dataset
    root = _unpack(_export(tmp_path, "status=validated")[0], tmp_path / "x")
    tasks = load_dataset("parquet", data_files=str(root / "data" / "tasks.parquet"), split="train",
                         cache_dir=str(tmp_path / "hf-cache"))
    assert tasks.num_rows == 3 and "instruction" in tasks.column_names
    assert sorted(tasks["task_id"]) == sorted(t.pk for t in Task.objects.all())
    sft = load_dataset("parquet", data_files=str(root / "data" / "sft.parquet"), split="train",
                       cache_dir=str(tmp_path / "hf-cache"))
    assert sft.num_rows == 2 and sft[0]["messages"][0]["role"] == "system"
    # the dataset card's configs point at the same files
    via_card = load_dataset(str(root), "tasks", split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert via_card.num_rows == 3


def test_the_dataset_card_has_the_counts_categories_and_filter(world, tmp_path):
    archive, s = _export(tmp_path, "status=validated")
    card = _read(archive, "README.md").decode()
    header = card.split("---\n")[1]
    assert "configs:" in header and "path: data/tasks.parquet" in header and "- n<1K" in header
    assert "**Selection:** `status=validated`" in card and "| Tasks | 3 |" in card
    assert "| Approved by a reviewer | 1 |" in card and "| Successful trajectories (SFT) | 2 |" in card
    for domain, n in s["domains"].items():
        assert f"| {domain} | {n} |" in card


def test_sft_holds_the_successful_rollouts_as_the_model_saw_them(world, tmp_path):
    archive, _ = _export(tmp_path)
    lines = [json.loads(x) for x in _read(archive, "sft.jsonl").decode().splitlines()]
    task = world["approved"]
    passed = list(Trajectory.objects.filter(task=task, passed=True).order_by("id"))
    assert [x["trajectory_id"] for x in lines] == [t.pk for t in passed]
    line = lines[0]
    assert line["task_id"] == task.pk and line["model"] == "model-a" and line["reward"] == 1.0
    assert line["task"] == _manifest(archive)[0]["directory"].split("/")[1]
    roles = [m["role"] for m in line["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    system, first, answer, seen, last = (m["content"] for m in line["messages"])
    assert "You are an AI agent solving a task in a Linux terminal" in system
    assert task.current_version.files["instruction.md"].strip() in first and "working directory is /app" in first
    # the answer as the model wrote it: not the exit code, timing or kind recorded when it ran
    assert json.loads(answer) == {"analysis": "Look at the data first.", "plan": "List /app/data.",
                                  "commands": [{"command": "ls /app/data", "timeout_s": 30.0}],
                                  "task_complete": False}
    assert seen.startswith("$ ls /app/data\ncustomers.csv")
    assert json.loads(last)["task_complete"] is True


def test_sft_of_an_imported_harbor_trajectory_starts_with_the_instruction(world, tmp_path):
    task = world["approved"]
    batch = RolloutBatch.objects.create(name="harbor job", source="harbor", model="other", agent="claude-code")
    traj = Trajectory.objects.create(batch=batch, task=task, version=task.current_version, model="other",
                                     agent="claude-code", status=TrajectoryStatus.DONE, reward=1.0, passed=True)
    Turn.objects.create(trajectory=traj, index=1, analysis="", plan="",
                        commands=[{"keystrokes": "ls\n", "duration": 0.5}], task_complete=True)
    lines = [json.loads(x) for x in _read(_export(tmp_path)[0], "sft.jsonl").decode().splitlines()]
    line = next(x for x in lines if x["trajectory_id"] == traj.pk)
    assert [m["role"] for m in line["messages"]] == ["user", "assistant"] and line["agent"] == "claude-code"
    assert line["messages"][0]["content"] == task.current_version.files["instruction.md"].strip()
    assert json.loads(line["messages"][1]["content"])["commands"] == [{"keystrokes": "ls\n", "duration": 0.5}]


def test_parts_that_were_not_asked_for_are_left_out(world, tmp_path):
    archive, s = _export(tmp_path, parts=["manifest"])
    names = set(_members(archive))
    assert "facet-dataset/manifest.jsonl" in names and "facet-dataset/README.md" in names
    assert not any(n.startswith(("facet-dataset/tasks/", "facet-dataset/data/")) for n in names)
    assert "facet-dataset/sft.jsonl" not in names and s["parts"] == ["manifest"]


def test_an_export_records_progress_and_a_failure(world, monkeypatch):
    export = exports.create_export(queue=False)
    done = exports.run_export(export.pk)
    assert (done.status, done.done, done.total, done.summary["tasks"]) == (ExportStatus.DONE, 1, 1, 1)
    assert exports.run_export(export.pk) is None  # a redelivered job does nothing

    def broken(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(exports, "write_archive", broken)
    failed = exports.run_export(exports.create_export(queue=False).pk)
    assert failed.status == ExportStatus.FAILED and "No space left on device" in failed.error


def test_the_export_command_writes_the_archive_where_asked(world, tmp_path, capsys):
    call_command("export", "--query", "review=approved", "--out", str(tmp_path))
    out = capsys.readouterr().out
    [archive] = tmp_path.glob("facet-export-*.tar.gz")
    assert str(archive) in out and "1 tasks" in out
    assert hashlib.sha256(archive.read_bytes()).hexdigest() in out


# --- import ----------------------------------------------------------------------------------


def _task_dir(root: Path, name: str, toml: str, *, instruction: str | None = "Write ok to /app/out.txt.\n",
              files: dict | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "task.toml").write_text(toml)
    if instruction is not None:
        (d / "instruction.md").write_text(instruction)
    (d / "environment").mkdir()
    for rel, data in (files if files is not None else {
        "environment/Dockerfile": b"FROM facet-base:bookworm\nWORKDIR /app\n",
        "solution/solve.sh": b"#!/bin/bash\necho ok > /app/out.txt\n",
        "tests/test.sh": GOOD_TEST_SH,
    }).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    return d


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


def test_harbor_1_0_1_1_and_terminal_bench_1_tasks_are_imported_for_review(db, tmp_path):
    _task_dir(tmp_path / "ds", "tb20-task", TB20)
    _task_dir(tmp_path / "ds", "tb21-task", TB21)
    _tb1_dir(tmp_path / "ds", "tb1-task")
    imp = imports.import_path(tmp_path / "ds")
    assert (imp.status, imp.imported, imp.skipped, imp.problems) == ("done", 3, 0, [])
    tasks = {t.name: t for t in Task.objects.all()}
    assert set(tasks) == {"tb20-task", "terminal-bench/fix-file", "tb1-task"}
    for task in tasks.values():
        assert task.imported and task.status == TaskStatus.VALIDATING and task.review_state == ReviewState.UNREVIEWED
        assert task.source.startswith(str((tmp_path / "ds").resolve()) + "#")
        assert task.current_version.number == 1 and set(imp.tasks.all()) == set(tasks.values())
    labels = set(TaskLabel.objects.filter(task=tasks["tb20-task"]).values_list("kind", "value"))
    assert {(LabelKind.TAG, "files"), (LabelKind.TAG, "shell")} <= labels
    assert "[task]" in tasks["terminal-bench/fix-file"].current_version.files["task.toml"]
    tb1 = tasks["tb1-task"]
    assert "Converted from Terminal-Bench 1.x" in tb1.message
    assert "/logs/verifier/reward.txt" in tb1.current_version.files["tests/test.sh"]
    assert tb1.current_version.files["solution/solve.sh"].startswith("#!/bin/bash")
    # importable tasks are re-validatable: the version writes back as a Harbor task
    versions.write_harbor_task(tb1.current_version, tmp_path / "back")
    assert harbor.content_hash(harbor.read_task_dir(tmp_path / "back")) == tb1.current_version.content_hash


def test_importing_the_same_content_again_is_skipped_and_counted(db, tmp_path):
    _task_dir(tmp_path / "ds", "a", TB20)
    _task_dir(tmp_path / "ds", "b", TB20, instruction="Something else.\n")
    first = imports.import_path(tmp_path / "ds")
    again = imports.import_path(tmp_path / "ds")
    assert (first.imported, first.skipped) == (2, 0)
    assert (again.imported, again.skipped, again.problems) == (0, 2, [])
    assert Task.objects.count() == 2


def test_export_then_import_gives_the_same_artifacts(world, tmp_path):
    archive, _ = _export(tmp_path, "status=validated")
    before = {t.name: (t.current_version.content_hash, t.current_version.files) for t in Task.objects.all()}
    Task.objects.all().delete()
    imp = imports.import_path(archive)
    assert (imp.status, imp.imported, imp.problems) == ("done", 3, [])
    after = {t.name: (t.current_version.content_hash, t.current_version.files) for t in Task.objects.all()}
    assert after == before  # same names (from the manifest), same content hashes, same files
    for task in Task.objects.all():
        assert task.imported and task.source.startswith(f"{archive.resolve()}#facet-dataset/tasks/")
    tags = set(TaskLabel.objects.filter(kind=LabelKind.TAG).values_list("value", flat=True))
    assert tags  # labels from task.toml's metadata


def test_a_zip_archive_and_a_single_task_directory_are_imported(db, tmp_path):
    task = _task_dir(tmp_path / "src", "zipped", TB20)
    archive = tmp_path / "tasks.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in sorted(task.rglob("*")):
            zf.write(p, p.relative_to(tmp_path / "src").as_posix())
    assert imports.import_path(archive).imported == 1
    single = _task_dir(tmp_path / "one", "single-task", TB21.replace("fix-file", "other"))
    imp = imports.import_path(single)
    assert imp.imported == 1 and Task.objects.filter(name="terminal-bench/other").exists()


# --- bad input --------------------------------------------------------------------------------


def test_bad_tasks_are_reported_by_file_and_field_and_the_rest_imported(db, tmp_path):
    ds = tmp_path / "ds"
    _task_dir(ds, "good", TB20)
    _task_dir(ds, "toml-syntax", 'version = "1.0"\n[verifier\ntimeout_sec = 1\n')
    _task_dir(ds, "wrong-type", TB20.replace("timeout_sec = 120.0\n\n[agent]", 'timeout_sec = "soon"\n\n[agent]'))
    _task_dir(ds, "no-instruction", TB20, instruction=None)
    _task_dir(ds, "no-tests", TB20, files={"environment/Dockerfile": b"FROM x:1\n",
                                           "solution/solve.sh": b"#!/bin/bash\n"})
    _task_dir(ds, "bad-schema", TB20.replace('version = "1.0"', 'version = "2.0"'))
    _task_dir(ds, "binary", TB20, files={"environment/Dockerfile": b"FROM x:1\n", "tests/test.sh": GOOD_TEST_SH,
                                         "tests/data.bin": b"\x89PNG\r\n\x1a\n\xff\x00"})
    imp = imports.import_path(ds)
    # Issue 17: a task with a binary file is imported (its bytes kept as a blob), not refused.
    assert (imp.status, imp.imported) == ("done", 2)
    problems = {p["task"]: p for p in imp.problems}
    assert set(problems) == {"toml-syntax", "wrong-type", "no-instruction", "no-tests", "bad-schema"}
    assert problems["toml-syntax"]["file"] == "task.toml" and problems["toml-syntax"]["line"] == 2
    assert "invalid TOML" in problems["toml-syntax"]["error"]
    assert (problems["wrong-type"]["file"], problems["wrong-type"]["field"]) == ("task.toml", "verifier.timeout_sec")
    assert problems["wrong-type"]["line"] == 10 and "must be a number" in problems["wrong-type"]["error"]
    assert problems["no-instruction"]["file"] == "instruction.md"
    assert problems["no-tests"]["file"] == "tests/test.sh"
    assert problems["bad-schema"]["field"] == "version" and "'2.0'" in problems["bad-schema"]["error"]
    assert sorted(Task.objects.values_list("name", flat=True)) == ["binary", "good"]
    assert TaskVersion.objects.get(task__name="binary").binary_files.keys() == {"tests/data.bin"}


def test_a_failure_while_storing_a_task_leaves_nothing_of_it_and_the_rest_is_imported(db, tmp_path, monkeypatch):
    _task_dir(tmp_path / "ds", "a-first", TB20)
    _task_dir(tmp_path / "ds", "b-second", TB20, instruction="Other.\n")
    real = summary.set_labels

    def flaky(task):
        if task.name == "a-first":
            raise RuntimeError("database went away")
        return real(task)

    monkeypatch.setattr(summary, "set_labels", flaky)
    imp = imports.import_path(tmp_path / "ds")
    assert (imp.status, imp.imported) == ("done", 1)
    [p] = imp.problems
    assert p["task"] == "a-first" and "RuntimeError: database went away" in p["error"]
    assert list(Task.objects.values_list("name", flat=True)) == ["b-second"]
    assert TaskVersion.objects.count() == 1 and list(imp.tasks.values_list("name", flat=True)) == ["b-second"]


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                tf.addfile(info)
    return path


def _files_of(task: Path, prefix: str) -> list[tuple[tarfile.TarInfo, bytes]]:
    out = []
    for p in sorted(task.rglob("*")):
        if p.is_file():
            info = tarfile.TarInfo(f"{prefix}/{p.relative_to(task).as_posix()}")
            info.mode = 0o755 if p.suffix == ".sh" else 0o644
            out.append((info, p.read_bytes()))
    return out


def _member(name: str, kind=tarfile.REGTYPE, **attrs) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for k, v in attrs.items():
        setattr(info, k, v)
    return info


@pytest.mark.parametrize("bad, error", [
    (lambda: (_member("ds/evil/../../escaped.txt"), b"x"), "'..' path component"),
    (lambda: (_member("/etc/facet-absolute.txt"), b"x"), "absolute path"),
    (lambda: (_member("ds/victim/tests/link", tarfile.SYMTYPE, linkname="/etc/passwd"), None), "symlink"),
    (lambda: (_member("ds/victim/tests/hard", tarfile.LNKTYPE, linkname="ds/good/task.toml"), None), "hardlink"),
    (lambda: (_member("ds/victim/environment/dev", tarfile.CHRTYPE, devmajor=1, devminor=3), None), "device"),
    (lambda: (_member("ds/victim/environment/fifo", tarfile.FIFOTYPE), None), "fifo"),
])
def test_archive_members_that_could_escape_or_are_special_are_refused(db, tmp_path, bad, error):
    good = _task_dir(tmp_path / "src", "good", TB20)
    victim = _task_dir(tmp_path / "src", "victim", TB20, instruction="Victim.\n")
    info, data = bad()
    archive = _tar(tmp_path / "bad.tar.gz", _files_of(good, "ds/good") + _files_of(victim, "ds/victim") + [(info, data)])
    imp = imports.import_path(archive)
    assert imp.status == "done" and imp.imported >= 1
    assert Task.objects.filter(name="good").exists()
    assert any(error in p["error"] for p in imp.problems), imp.problems
    if info.name.startswith("ds/victim/"):  # a member of that task was not extracted: the task is refused whole
        assert not Task.objects.filter(name="victim").exists()
        [p] = [p for p in imp.problems if p["task"] == "ds/victim"]
        assert p["file"] == info.name.removeprefix("ds/victim/") and p["field"] == "archive"
    assert not (tmp_path / "escaped.txt").exists() and not Path("/etc/facet-absolute.txt").exists()


def test_a_size_bomb_stops_extraction_and_nothing_is_imported(db, tmp_path, settings):
    settings.FACET_IMPORT_MAX_ARCHIVE_BYTES = 2_000_000
    good = _task_dir(tmp_path / "src", "good", TB20)
    bomb = (_member("ds/zeros/environment/zeros.bin"), b"\0" * 5_000_000)  # compresses to a few KB
    archive = _tar(tmp_path / "bomb.tar.gz", _files_of(good, "ds/good") + [bomb])
    assert archive.stat().st_size < 100_000
    imp = imports.import_path(archive)
    assert imp.status == "failed" and imp.imported == 0 and not Task.objects.exists()
    assert any("expands beyond 2000000 bytes" in p["error"] for p in imp.problems)
    assert any("nothing was imported" in p["error"] for p in imp.problems)
    assert not imports.import_area(imp).exists()


def test_one_oversized_member_refuses_only_its_task(db, tmp_path, settings):
    settings.FACET_IMPORT_MAX_FILE_BYTES = 1_000_000
    good = _task_dir(tmp_path / "src", "good", TB20)
    big = _task_dir(tmp_path / "src", "big", TB20, instruction="Big.\n")
    members = _files_of(good, "ds/good") + _files_of(big, "ds/big")
    members.append((_member("ds/big/environment/big.txt"), b"a" * 1_500_000))
    imp = imports.import_path(_tar(tmp_path / "big.tar.gz", members))
    assert imp.imported == 1 and list(Task.objects.values_list("name", flat=True)) == ["good"]
    [p] = imp.problems
    assert p["task"] == "ds/big" and p["file"] == "environment/big.txt" and "per-entry limit" in p["error"]


def test_a_symlink_in_a_task_directory_on_disk_is_refused(db, tmp_path):
    ds = tmp_path / "ds"
    _task_dir(ds, "good", TB20)
    linked = _task_dir(ds, "linked", TB20, instruction="Linked.\n")
    (linked / "tests" / "secret").symlink_to("/etc/passwd")
    imp = imports.import_path(ds)
    [p] = imp.problems
    assert p["task"] == "linked" and p["file"] == "tests/secret" and "absolute target" in p["error"]
    assert list(Task.objects.values_list("name", flat=True)) == ["good"]


def test_a_source_with_no_task_says_so(db, tmp_path):
    (tmp_path / "empty" / "docs").mkdir(parents=True)
    imp = imports.import_path(tmp_path / "empty")
    assert imp.imported == 0 and "no task found" in imp.problems[0]["error"]


def test_the_import_command_lists_problems_and_fails(db, tmp_path, capsys):
    _task_dir(tmp_path / "ds", "good", TB20)
    _task_dir(tmp_path / "ds", "broken", 'version = "1.0"\n[verifier\n')
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as exc:
        call_command("import-tasks", str(tmp_path / "ds"))
    assert exc.value.returncode == 1
    out = capsys.readouterr().out
    assert "broken/task.toml [line 2]: invalid TOML" in out and "1 imported, 0 skipped" in out
    call_command("import_tasks", str(tmp_path / "ds" / "good"))
    assert "0 imported, 1 skipped" in capsys.readouterr().out


def test_imported_tasks_can_be_queued_for_validation(db, tmp_path, django_capture_on_commit_callbacks, monkeypatch):
    from tasks import jobs

    queued = []
    monkeypatch.setattr(jobs.docker_validate, "delay", lambda pk: queued.append(pk))
    _task_dir(tmp_path / "ds", "a", TB20)
    with django_capture_on_commit_callbacks(execute=True):
        imp = imports.import_path(tmp_path / "ds", validate=True)
    validation = Validation.objects.get(version__task__in=imp.tasks.all())
    assert validation.status == ValidationStatus.QUEUED and queued == [validation.pk]


# --- Harbor's own linter, and a real validation of an exported task --------------------------

HARBOR_VENV = REPO / "var" / "harbor-venv"
HARBOR_VERSION = "0.25.0"


def _unavailable(reason: str):
    # CI must run this test: there a missing Python 3.12 or PyPI is a failure, not a skip.
    if os.environ.get("CI") == "true" or os.environ.get("FACET_REQUIRE_HARBOR") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def _python312() -> str | None:
    roots = [Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")), Path("/opt/pyenv")]
    for root in roots:
        found = sorted(root.glob("versions/3.12*/bin/python3.12"))
        if found:
            return str(found[-1])
    return shutil.which("python3.12")


def _harbor_venv() -> Path:
    """var/harbor-venv with `harbor` from PyPI (it needs Python 3.12), created when missing
    (about 40 s on this machine)."""
    if (HARBOR_VENV / "bin" / "harbor").exists():
        return HARBOR_VENV
    python = _python312()
    if python is None:
        _unavailable("Python 3.12 is not on this machine (pyenv install 3.12); the harbor package needs it")
    try:
        subprocess.run([python, "-m", "venv", str(HARBOR_VENV)], check=True, capture_output=True, timeout=120)
        subprocess.run([str(HARBOR_VENV / "bin" / "pip"), "install", "-q", f"harbor=={HARBOR_VERSION}"], check=True,
                       capture_output=True, timeout=900)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(HARBOR_VENV, ignore_errors=True)
        _unavailable(f"could not install harbor=={HARBOR_VERSION} from PyPI into {HARBOR_VENV}: {exc}")
    return HARBOR_VENV


@pytest.mark.harbor
def test_exported_and_imported_tasks_pass_harbor_lint_and_load_in_harbor(world, db, tmp_path):
    venv = _harbor_venv()
    _task_dir(tmp_path / "in", "tb21-task", TB21)
    _tb1_dir(tmp_path / "in", "tb1-task")
    assert imports.import_path(tmp_path / "in").imported == 2
    archive, _ = _export(tmp_path, "status=validated&status=validating")
    root = _unpack(archive, tmp_path / "x")
    dirs = sorted((root / "tasks").iterdir())
    assert len(dirs) == 5
    lint = subprocess.run([str(venv / "bin" / "harbor"), "lint", "--ignore", "shared-verifier", *map(str, dirs)],
                          capture_output=True, text=True, timeout=300)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    # Without the exception, the one finding per task is shared-verifier (state-based verifiers grade
    # the agent's own container, as Terminal-Bench 2 does).
    everything = subprocess.run([str(venv / "bin" / "harbor"), "lint", "--json", *map(str, dirs)],
                                capture_output=True, text=True, timeout=300)
    assert {f["rule"] for f in json.loads(everything.stdout)} == {"shared-verifier"}
    load = subprocess.run([str(venv / "bin" / "python"), "-c", (
        "import sys; from pathlib import Path; from harbor.models.task.task import Task\n"
        "for d in sys.argv[1:]:\n"
        "    assert Task.is_valid_dir(Path(d)), d\n"
        "    t = Task(Path(d)); print(t.name)\n"), *map(str, dirs)], capture_output=True, text=True, timeout=300)
    assert load.returncode == 0, load.stderr
    assert "terminal-bench/fix-file" in load.stdout.split()


@pytest.mark.docker
def test_an_exported_task_validates_in_docker_oracle_1_nop_0(world, tmp_path, engine):
    from facet_site.lib import validation as val
    from tasks.apps import base_image

    from django.conf import settings

    archive, _ = _export(tmp_path)
    root = _unpack(archive, tmp_path / "x")
    [row] = _manifest(archive)
    # Issue 17: the export starts FROM a pinned public Debian image (row["base_image"]); here a
    # local copy of it is facet's base image under that name.
    public = settings.FACET_EXPORT_BASE_IMAGE
    assert row["base_image"] == public
    tagged = not any(public in image.tags for image in engine.images.list())
    if tagged:
        engine.images.get(base_image()).tag(public)
    try:
        report = val.validate_task(engine, root / row["directory"], base_image=public, max_partials=1,
                                   owner=f"{os.uname().nodename}:{os.getpid()}:tasks")
    finally:
        if tagged:
            engine.images.remove(public, noprune=True)
    assert report.accepted, (report.failure, report.reason)
    assert report.trial("oracle").reward == 1.0 and report.trial("nop").reward == 0.0
