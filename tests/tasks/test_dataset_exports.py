"""Dataset exports: the selection, archive layout, manifests (JSONL and Parquet), the Hugging Face
layout and card, SFT records, reproducibility, progress and the export command."""
from __future__ import annotations

import hashlib
import io
import json
import os
import tomllib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.core.management import call_command

from facet_site.lib import harbor
from demo import scripted_llm as scripted
from tasks import export_records, exports, summary
from tasks.models import (
    Decision,
    Export,
    ExportStatus,
    RolloutBatch,
    Task,
    Trajectory,
    TrajectoryStatus,
    Turn,
    ReviewVerdict,
)
from tests.tasks.dataset_records import _export, _manifest, _members, _read, _unpack


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
