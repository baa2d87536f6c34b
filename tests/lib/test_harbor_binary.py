"""lib/harbor for real datasets (issue 17), Django-free: binary files in a bundle and its hash,
modes and empty directories read and written back, task.toml text kept, the content-addressed
blob store, media types and peeks, and the portable base of an export and its inverse."""
from __future__ import annotations

import os
import random
import stat
from pathlib import Path

import pytest

from facet_site.lib.docker_engine.base_image import BASE_PACKAGES
from facet_site.lib.harbor import content_hash, read_task_dir, task_dir_entries, write_task_dir
from facet_site.lib.harbor.binary import BlobStore, hex_peek, is_text, media_type, preview_kind, strings_peek
from facet_site.lib.harbor.portable import first_from, portable_dockerfile, restore_local
from facet_site.lib.harbor.tb1 import is_tb1_dir

TOML = '# kept\nversion = "1.0"\n\n[verifier]\ntimeout_sec = 600   # an int\n\n[environment]\nmemory_mb = 2048\n'


def _task(root: Path) -> Path:
    files = {"instruction.md": b"Do it.\n", "task.toml": TOML.encode(),
             "environment/Dockerfile": b"FROM x:1\n", "environment/blob.bin": random.Random(1).randbytes(300),
             "tests/test.sh": b"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
             "tests/helper.sh": b"#!/bin/sh\ntrue\n", "tests/run.py": b"print(1)\n"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    os.chmod(root / "tests/test.sh", 0o755)
    os.chmod(root / "tests/helper.sh", 0o644)
    os.chmod(root / "tests/run.py", 0o755)
    (root / "environment" / "empty").mkdir()
    return root


def test_a_task_is_written_back_as_it_was_read(tmp_path):
    bundle = read_task_dir(_task(tmp_path / "t"))
    assert bundle.modes == {"tests/helper.sh": 0o644, "tests/run.py": 0o755}
    assert bundle.empty_dirs == ["environment/empty"] and bundle.toml_text == TOML
    out = write_task_dir(bundle, tmp_path / "out" / "t")
    assert (out / "task.toml").read_text() == TOML
    assert stat.S_IMODE(os.stat(out / "tests/helper.sh").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(out / "tests/run.py").st_mode) == 0o755
    assert (out / "environment" / "empty").is_dir() and not (out / "solution").exists()
    assert (out / "environment/blob.bin").read_bytes() == random.Random(1).randbytes(300)
    assert content_hash(read_task_dir(out)) == content_hash(bundle)
    entries = {p: m for p, _d, m in task_dir_entries(bundle)}
    assert entries["tests/helper.sh"] == 0o644 and "environment/empty" in entries and "solution" not in entries


def test_the_hash_covers_binary_bytes_modes_and_empty_directories(tmp_path):
    bundle = read_task_dir(_task(tmp_path / "t"))
    before = content_hash(bundle)
    changed = read_task_dir(_task(tmp_path / "u"))
    changed.files["environment/blob.bin"] = changed.files["environment/blob.bin"][:-1] + b"\x00"
    assert content_hash(changed) != before
    changed = read_task_dir(_task(tmp_path / "v"))
    changed.modes["tests/helper.sh"] = 0o755  # the default for .sh: no longer recorded
    del changed.modes["tests/helper.sh"]
    assert content_hash(changed) != before
    changed = read_task_dir(_task(tmp_path / "w"))
    changed.empty_dirs = []
    assert content_hash(changed) != before


def test_binary_files_are_told_apart_and_typed_by_their_bytes():
    assert is_text("é\n".encode()) and not is_text(b"a\x00b") and not is_text(b"\xff\xfe")
    assert media_type("x.txt", b"\x89PNG\r\n\x1a\nrest") == "image/png"  # the name does not matter
    assert media_type("a", b"RIFF\x00\x00\x00\x00WAVEfmt ") == "audio/wav"
    assert media_type("a", b"PAR1....") == "application/vnd.apache.parquet"
    assert media_type("a.unknownext", b"\x01\x02") == "application/octet-stream"
    assert preview_kind("image/png") == "image" and preview_kind("image/svg+xml") is None
    assert hex_peek(b"AB\x00").startswith("00000000  41 42 00 ") and hex_peek(b"AB\x00").endswith("  AB.")
    assert strings_peek(b"\x00\x01hello world\x00xy") == ["hello world"]


def test_the_blob_store_keeps_each_content_once_and_checks_it(tmp_path):
    store = BlobStore(tmp_path / "blobs")
    digest = store.put(b"bytes")
    assert store.put(b"bytes") == digest and store.get(digest) == b"bytes"
    assert len(list((tmp_path / "blobs").rglob("*"))) == 2  # one folder, one file
    store.path(digest).write_bytes(b"other")
    with pytest.raises(OSError, match="damaged"):
        store.get(digest)
    with pytest.raises(ValueError):
        store.path("../../etc/passwd")


def test_the_portable_base_installs_the_same_packages_and_comes_back_exactly():
    original = "FROM facet-base:bookworm AS build\nWORKDIR /app\nRUN true\n"
    result = portable_dockerfile(original, local_base="facet-base:bookworm", packages=BASE_PACKAGES)
    assert result.rewritten and result.base_image == "debian:bookworm-20250113-slim"
    assert first_from(result.text) == "debian:bookworm-20250113-slim" and " AS build" in result.text
    assert all(p in result.text for p in BASE_PACKAGES)
    assert "snapshot.debian.org/archive/debian/20250113T000000Z" in result.text
    assert restore_local(result.text, local_base="facet-base:bookworm", packages=BASE_PACKAGES) == original
    # a hand-edited block is not facet's: left alone
    edited = result.text.replace("rm -rf /var/lib/apt/lists/*", "true")
    assert restore_local(edited, local_base="facet-base:bookworm", packages=BASE_PACKAGES) == edited
    other = "FROM python:3.11-slim\n"
    assert portable_dockerfile(other, local_base="facet-base:bookworm", packages=BASE_PACKAGES).text == other


def test_tb1_is_recognised_only_beside_its_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "task.yaml").write_text("instruction: x\n")
    assert not is_tb1_dir(tmp_path / "a")
    (tmp_path / "a" / "run-tests.sh").write_text("#!/bin/bash\n")
    assert is_tb1_dir(tmp_path / "a")
