"""Harbor task format: write/read round trips, hashing, task.toml versions and its canonical text,
errors naming file and field, and reading datasets. (TB1 conversion: test_harbor_tb1.py; lint:
test_harbor_lint.py; verifier output: test_verifier_output.py; job import: test_harbor_results.py.)"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from facet_site.lib.harbor import (
    TaskFormatError,
    canonical_task_toml,
    content_hash,
    read_dataset,
    read_task_dir,
    task_dir,
    write_task_dir,
)
from tests.lib.harbor_samples import GOOD_TEST_SH, good_bundle, make_task, make_tb1


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else b"", stat.S_IMODE(p.stat().st_mode))
            for p in sorted(root.rglob("*"))}


TB20_TOML = """version = "1.0"

[metadata]
author_name = "jvpoulos"
author_email = "poulos@berkeley.edu"
difficulty = "medium"
category = "scientific-computing"
tags = ["applied-statistics", "simulation"]
expert_time_estimate_min = 180.0

[verifier]
timeout_sec = 900.0

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
docker_image = "alexgshaw/adaptive-rejection-sampler:20251031"
cpus = 1
memory = "2G"
storage = "10G"
"""

SCHEMA11_TOML = """schema_version = "1.1"
artifacts = []

[task]
name = "terminal-bench/fix-git"
description = "Recover lost commits."
keywords = ["coding", "version-control"]
[[task.authors]]
name = "TheMikeMerrill"
email = "mchlmerrill@gmail.com"

[metadata]
author_name = "TheMikeMerrill"
difficulty = "easy"
category = "software-engineering"
tags = ["coding", "version-control"]
junior_time_estimate_min = 20.0

[verifier]
timeout_sec = 900.0

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
docker_image = "alexgshaw/fix-git:20260403"
cpus = 1
memory_mb = 2048
storage_mb = 10240
gpus = 0
allow_internet = true
mcp_servers = []

[verifier.env]

[environment.env]

[solution.env]
"""


# ---- write / read / hash -------------------------------------------------------------------------


def test_round_trip_identical_bundle_and_hash(tmp_path):
    bundle = good_bundle()
    dest = write_task_dir(bundle, tmp_path / bundle.name)
    back = read_task_dir(dest)
    assert back == bundle
    assert content_hash(back) == content_hash(bundle)
    assert back.source_format == "harbor-1.0"
    assert (dest / "task.toml").read_text() == canonical_task_toml(bundle)
    assert 'version = "1.0"' in (dest / "task.toml").read_text() and 'memory = "2G"' in (dest / "task.toml").read_text()


def test_writes_are_byte_identical_with_exec_bits(tmp_path):
    bundle = good_bundle()
    a = tree(write_task_dir(bundle, tmp_path / "a" / bundle.name))
    b = tree(write_task_dir(bundle, tmp_path / "b" / bundle.name))
    assert a == b
    assert a["tests/test.sh"][1] == 0o755 and a["solution/solve.sh"][1] == 0o755
    assert a["tests/test_state.py"][1] == 0o644 and a["environment"][1] == 0o755
    assert {"instruction.md", "task.toml", "environment/Dockerfile"} <= set(a)


def test_write_refuses_existing_and_overwrites_on_request(tmp_path):
    bundle = good_bundle()
    dest = write_task_dir(bundle, tmp_path / bundle.name)
    with pytest.raises(FileExistsError):
        write_task_dir(bundle, dest)
    bundle.files["tests/extra.txt"] = b"x"
    write_task_dir(bundle, dest, overwrite=True)
    assert read_task_dir(dest) == bundle
    assert [p.name for p in tmp_path.iterdir()] == [bundle.name]  # no temp or backup dirs left


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    calls = []
    real_chmod = os.chmod

    def failing_chmod(path, mode):
        calls.append(path)
        if len(calls) == 3:
            raise OSError("disk full")
        real_chmod(path, mode)

    monkeypatch.setattr(task_dir.os, "chmod", failing_chmod)
    with pytest.raises(OSError, match="disk full"):
        write_task_dir(good_bundle(), tmp_path / "t")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad_path", ["/etc/passwd", "../escape.sh", "tests/../../x", "tests\\x", "task.toml", ""])
def test_write_rejects_bad_paths_before_touching_disk(tmp_path, bad_path):
    bundle = good_bundle()
    bundle.files[bad_path] = b"x"
    with pytest.raises(TaskFormatError) as err:
        write_task_dir(bundle, tmp_path / "t")
    assert err.value.file == bad_path or bad_path == ""
    assert not (tmp_path / "t").exists() and list(tmp_path.iterdir()) == []


def test_write_requires_test_sh(tmp_path):
    bundle = good_bundle()
    del bundle.files["tests/test.sh"]
    with pytest.raises(TaskFormatError, match="tests/test.sh"):
        write_task_dir(bundle, tmp_path / "t")


def test_content_hash_golden_and_order_independent():
    bundle = good_bundle()
    # Golden value: a change here means every stored task version would change identity.
    assert content_hash(bundle) == "sha256:" + GOLDEN_HASH
    # ... and it is exactly the documented definition.
    entries = dict(bundle.files, **{"instruction.md": bundle.instruction.encode(),
                                    "task.toml": canonical_task_toml(bundle).encode()})
    manifest = "facet-task-sha256-v1\n" + "".join(
        f"{hashlib.sha256(entries[p]).hexdigest()}  {p}\n" for p in sorted(entries, key=str.encode))
    assert hashlib.sha256(manifest.encode()).hexdigest() == GOLDEN_HASH
    shuffled = good_bundle()
    shuffled.files = dict(reversed(list(shuffled.files.items())))
    shuffled.config.extra = {"metadata": {"expert_time_estimate_min": 1.0}}
    shuffled.config.extra["verifier"] = {"env": {"B": "2", "A": "1"}}
    bundle.config.extra["verifier"] = {"env": {"A": "1", "B": "2"}}
    assert content_hash(shuffled) == content_hash(bundle)
    shuffled.files["tests/test_state.py"] += b"\n"
    assert content_hash(shuffled) != content_hash(bundle)
    renamed = good_bundle("other-name")
    assert content_hash(renamed) == "sha256:" + GOLDEN_HASH  # identity is content, not the dir name


def test_content_hash_is_nfc_normalised():
    a, b = good_bundle(), good_bundle()
    a.files["tests/caf\u00e9.txt"] = b"x"
    b.files["tests/cafe\u0301.txt"] = b"x"
    assert content_hash(a) == content_hash(b)


GOLDEN_HASH = "d7c688db0438e45de31b4a627795c5409fc885d37c47741e566f517412d4f947"


def test_reads_version_1_0_toml(tmp_path):
    bundle = read_task_dir(make_task(tmp_path / "ars", TB20_TOML))
    cfg = bundle.config
    assert bundle.name == "ars" and cfg.schema_version == "1.0"
    assert (cfg.memory_mb, cfg.storage_mb, cfg.cpus) == (2048, 10240, 1)
    assert cfg.verifier_timeout_sec == 900.0 and cfg.docker_image.endswith(":20251031")
    assert cfg.tags == ["applied-statistics", "simulation"]
    assert cfg.extra == {"metadata": {"expert_time_estimate_min": 180.0}}
    again = read_task_dir(write_task_dir(bundle, tmp_path / "out" / "ars"))
    assert again == bundle


def test_reads_schema_1_x_toml_and_keeps_unmodelled_keys(tmp_path):
    bundle = read_task_dir(make_task(tmp_path / "fix-git", SCHEMA11_TOML))
    cfg = bundle.config
    assert bundle.name == "terminal-bench/fix-git" and bundle.source_format == "harbor-1.1"
    assert cfg.memory_mb == 2048 and cfg.agent_timeout_sec == 900.0 and cfg.build_timeout_sec == 600.0
    assert cfg.extra["environment"] == {"allow_internet": True, "env": {}, "gpus": 0, "mcp_servers": []}
    assert cfg.extra["task"]["authors"] == [{"email": "mchlmerrill@gmail.com", "name": "TheMikeMerrill"}]
    assert cfg.extra["solution"] == {"env": {}} and cfg.extra["artifacts"] == []
    text = canonical_task_toml(bundle)
    assert text.startswith('schema_version = "1.1"') and "memory_mb = 2048" in text and "memory =" not in text
    dest = write_task_dir(bundle, tmp_path / "out" / "fix-git")
    assert read_task_dir(dest) == bundle


def test_legacy_sizes_convert_and_the_text_is_what_is_hashed(tmp_path):
    # Issue 17: an imported task.toml comes back byte-identical, so its text (not its canonical form)
    # is what the content hash covers; the typed config still reads "2G" and "2048M" the same.
    a = read_task_dir(make_task(tmp_path / "a", TB20_TOML))
    b = read_task_dir(make_task(tmp_path / "b", TB20_TOML.replace('memory = "2G"', 'memory = "2048M"')))
    assert a.config == b.config and a.files == b.files
    assert canonical_task_toml(a) == canonical_task_toml(b)
    assert content_hash(a) != content_hash(b)
    assert content_hash(a) == content_hash(read_task_dir(write_task_dir(a, tmp_path / "out" / "a")))


def test_typed_fields_win_over_extra_duplicates(tmp_path):
    b = good_bundle()
    b.config.extra = {"schema_version": "1.3", "metadata": {"difficulty": "hard", "facet_scenario_id": "old"},
                      "verifier": {"timeout_sec": 5.0, "env": {"A": "1"}}}
    text = canonical_task_toml(b)
    assert "schema_version" not in text and 'difficulty = "easy"' in text and "timeout_sec = 600.0" in text
    assert 'facet_scenario_id = "sc-1"' in text and "[verifier.env]" in text
    back = read_task_dir(write_task_dir(b, tmp_path / b.name))
    assert back.config.difficulty == "easy" and back.config.extra["verifier"] == {"env": {"A": "1"}}


# ---- errors ----------------------------------------------------------------------------------------


TOML_ERRORS = [
    ('version = "1.0"\n[verifier]\ntimeout_sec = = 3\n', "task.toml", None, "line 3: invalid TOML"),
    ('version = "1.0"\n\n[verifier]\ntimeout_sec = "abc"\n', "task.toml", "verifier.timeout_sec",
     'line 4: [verifier] timeout_sec must be a number'),
    ('version = "1.0"\n[agent]\ntimeout_sec = true\n', "task.toml", "agent.timeout_sec", "[agent] timeout_sec must be"),
    ('version = "1.0"\n[environment]\nmemory = "2X"\n', "task.toml", "environment.memory", "[environment] memory must be"),
    ('version = "1.0"\n[environment]\nmemory = "2G"\nmemory_mb = 1024\n', "task.toml", "environment.memory",
     "disagrees with memory_mb"),
    ('version = "1.0"\n[environment]\ncpus = 0\n', "task.toml", "environment.cpus", "[environment] cpus must be at least 1"),
    ('schema_version = "2.0"\n', "task.toml", "schema_version", "not a supported task.toml schema"),
    ('version = "1.0"\nschema_version = "1.1"\n', "task.toml", "schema_version", "disagrees with version"),
    ('schema_version = "1.1"\n[task]\nname = "no-org"\n', "task.toml", "task.name", '[task] name must look like "org/name"'),
    ('version = "1.0"\nmetadata = 3\n', "task.toml", "metadata", "metadata must be a table"),
]


@pytest.mark.parametrize("toml,file,field,fragment", TOML_ERRORS)
def test_task_toml_errors_name_file_and_field(tmp_path, toml, file, field, fragment):
    with pytest.raises(TaskFormatError) as err:
        read_task_dir(make_task(tmp_path / "t", toml))
    assert err.value.file == file and err.value.field == field
    assert f"{file}: " in str(err.value) and fragment in str(err.value)


def test_missing_files_are_named(tmp_path):
    files = {"environment/Dockerfile": b"FROM ubuntu:24.04\n"}
    with pytest.raises(TaskFormatError, match="missing tests/test.sh") as err:
        read_task_dir(make_task(tmp_path / "a", TB20_TOML, files=files))
    assert err.value.file == "tests/test.sh"
    root = make_task(tmp_path / "b", TB20_TOML, instruction=None)
    with pytest.raises(TaskFormatError, match="instruction.md: missing instruction.md"):
        read_task_dir(root)
    root = make_task(tmp_path / "c", TB20_TOML)
    shutil.rmtree(root / "environment")
    with pytest.raises(TaskFormatError, match="missing environment/ directory"):
        read_task_dir(root)
    (tmp_path / "d").mkdir()
    with pytest.raises(TaskFormatError, match="task.toml: missing task.toml"):
        read_task_dir(tmp_path / "d")
    root = make_task(tmp_path / "e", TB20_TOML)
    (root / "instruction.md").write_bytes(b"\xff\xfe bad")
    with pytest.raises(TaskFormatError, match="instruction.md: not valid UTF-8"):
        read_task_dir(root)


def test_rejects_escaping_and_absolute_symlinks(tmp_path):
    (tmp_path / "secret.txt").write_text("s3cret")
    root = make_task(tmp_path / "t", TB20_TOML)
    (root / "tests" / "leak.txt").symlink_to("../../secret.txt")
    with pytest.raises(TaskFormatError, match="symlink points outside the task directory") as err:
        read_task_dir(root)
    assert err.value.file == "tests/leak.txt"
    (root / "tests" / "leak.txt").unlink()
    (root / "tests" / "abs.txt").symlink_to(tmp_path / "t" / "tests" / "test.sh")
    with pytest.raises(TaskFormatError, match="tests/abs.txt: symlink has an absolute target"):
        read_task_dir(root)
    (root / "tests" / "abs.txt").unlink()
    (root / "tests" / "inside.sh").symlink_to("test.sh")  # relative and inside: read as a copy
    assert read_task_dir(root).files["tests/inside.sh"] == GOOD_TEST_SH


def test_rejects_oversized_and_special_files(tmp_path):
    root = make_task(tmp_path / "t", TB20_TOML)
    (root / "environment" / "big.bin").write_bytes(b"x" * 2000)
    with pytest.raises(TaskFormatError, match="environment/big.bin: file is 2000 bytes, over the 1000-byte limit"):
        read_task_dir(root, max_file_bytes=1000)
    with pytest.raises(TaskFormatError, match="total limit"):
        read_task_dir(root, max_total_bytes=1500)
    (root / "environment" / "big.bin").unlink()
    os.mkfifo(root / "tests" / "pipe")
    with pytest.raises(TaskFormatError, match="tests/pipe: special file"):
        read_task_dir(root)


# ---- datasets --------------------------------------------------------------------------------------


def test_read_dataset_skips_bad_tasks(tmp_path):
    ds = tmp_path / "ds"
    write_task_dir(good_bundle(), ds / "good")
    make_task(ds / "bad", 'version = "1.0"\n[verifier]\ntimeout_sec = "x"\n')
    make_tb1(ds / "old")
    (ds / "notes").mkdir()
    (ds / ".hidden").mkdir()
    bundles, errors = read_dataset(ds)
    assert [b.name for b in bundles] == ["good", "old"]
    assert len(errors) == 1 and errors[0].task.endswith("bad") and errors[0].field == "verifier.timeout_sec"
    assert str(errors[0]).startswith(str(ds / "bad") + ": task.toml: line 3:")


def test_read_registry_json(tmp_path):
    write_task_dir(good_bundle(), tmp_path / "tasks" / "good")
    (tmp_path / "registry.json").write_text(json.dumps([{
        "name": "mine", "version": "1.0", "metrics": [],
        "tasks": [{"name": "hello", "path": "tasks/good"},
                  {"name": "remote", "git_url": "https://example.com/x.git", "git_commit_id": "abc", "path": "x"},
                  {"name": "escape", "path": "../elsewhere"},
                  {"name": "abs", "path": "/etc"}]}]))
    bundles, errors = read_dataset(tmp_path)
    assert [b.name for b in bundles] == ["hello"]
    messages = " | ".join(str(e) for e in errors)
    assert "git tasks" in messages and "leaves the registry directory" in messages and "is absolute" in messages
    assert all(e.file == "registry.json" for e in errors)
    assert read_dataset(tmp_path / "registry.json", dataset="other@1.0") == ([], [])
