"""Real datasets in and out (issue 17): binary task files stored once and exported byte for byte,
faithful round trips (task.toml text, modes, empty directories), size limits naming every file,
import-time checks without Docker, Terminal-Bench 1 conversions that grade as TB1 did, nested
archives, the task page's binary downloads and previews, and exports that build elsewhere."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from django.core.management import call_command

from facet_site.lib import harbor
from tasks import exports, imports
from tasks.models import Task, TaskBlob, TaskImport, TaskVersion
from tests.tasks import dataset_fixtures as fx


def _export_members(tmp_path: Path, query: str = "origin=imported") -> dict[str, tuple[tarfile.TarInfo, bytes | None]]:
    target = tmp_path / "out.tar.gz"
    exports.write_archive(target, query=query, parts=["harbor", "manifest"])
    out = {}
    with tarfile.open(target) as tar:
        for m in tar.getmembers():
            out[m.name] = (m, tar.extractfile(m).read() if m.isfile() else None)
    return out


def _tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every file and directory below root: (mode, bytes or None for a directory)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = (os.stat(path).st_mode & 0o777, None if path.is_dir() else path.read_bytes())
    return out


# --- binary files and faithful round trips ---------------------------------------------------------


def test_a_multimedia_task_comes_back_byte_for_byte_with_its_modes_toml_and_empty_directories(db, tmp_path):
    source = fx.multimedia_task(tmp_path / "ds" / "audio-task", solution=False)
    imp = imports.import_path(tmp_path / "ds")
    assert (imp.status, imp.imported, imp.problems) == ("done", 1, [])
    version = Task.objects.get().current_version
    assert set(version.binary_files) == {"environment/in.wav", "environment/cover.png",
                                         "environment/data/table.parquet", "environment/docs/spec.pdf",
                                         "tests/oracle.enc"}
    assert version.files["task.toml"] == fx.ODD_TOML  # comments, order, 600 and memory_mb as written

    members = _export_members(tmp_path)
    [prefix] = {name.split("/")[2] for name in members if name.startswith("facet-dataset/tasks/")}
    exported = {name.removeprefix(f"facet-dataset/tasks/{prefix}/"): (m.mode, data)
                for name, (m, data) in members.items() if name.startswith(f"facet-dataset/tasks/{prefix}/")}
    # the same files, bytes and modes, the same empty directory, and no solution/ that was not there
    assert exported == _tree(source)
    assert "solution" not in exported


def test_binary_files_are_stored_once_in_the_content_hash_and_large_ones_on_disk(db, tmp_path, settings):
    settings.FACET_IMPORT_MAX_FILE_BYTES = 10_000_000
    settings.FACET_BLOB_INLINE_BYTES = 500
    fx.multimedia_task(tmp_path / "ds" / "a", n=1)
    fx.multimedia_task(tmp_path / "ds" / "b", n=2)  # same audio, image, Parquet and PDF; its own blob
    imp = imports.import_path(tmp_path / "ds")
    assert imp.imported == 2
    # 4 shared files + 2 different encrypted blobs, however many tasks hold them
    assert TaskBlob.objects.count() == 6
    wav = TaskBlob.objects.get(sha256=TaskVersion.objects.first().binary_files["environment/in.wav"])
    assert wav.media_type == "audio/wav" and wav.data is None  # over the inline limit: on disk
    assert (Path(settings.DATA_DIR) / "blobs" / wav.sha256[:2] / wav.sha256).read_bytes() == fx.wav_bytes()
    # one changed byte of a binary file is another version
    b = tmp_path / "ds" / "b" / "environment" / "cover.png"
    b.write_bytes(b.read_bytes()[:-1] + b"\x00")
    again = imports.import_path(tmp_path / "ds")
    assert (again.imported, again.skipped) == (1, 1)


def test_every_oversized_file_of_a_task_is_named_and_so_is_a_task_over_its_total(db, tmp_path, settings):
    settings.FACET_IMPORT_MAX_FILE_BYTES = 1000
    root = fx.multimedia_task(tmp_path / "ds" / "big")
    (root / "environment" / "a.bin").write_bytes(b"\x00" * 5000)
    (root / "tests" / "b.bin").write_bytes(b"\x01" * 3000)
    imp = imports.import_path(tmp_path / "ds")
    [problem] = imp.problems
    assert problem["task"] == "big" and problem["error"].startswith("2 files are over the 1000-byte per-file limit")
    assert "environment/a.bin (5000 bytes)" in problem["error"] and "tests/b.bin (3000 bytes)" in problem["error"]

    settings.FACET_IMPORT_MAX_FILE_BYTES = 100_000
    settings.FACET_IMPORT_MAX_TASK_BYTES = 2000
    shutil.rmtree(tmp_path / "ds")
    fx.multimedia_task(tmp_path / "ds" / "total")
    [problem] = imports.import_path(tmp_path / "ds").problems
    assert "2000-byte total limit" in problem["error"] or "2000-byte per-task limit" in problem["error"]
    assert problem["task"] == "total" and problem["file"]


# --- import-time checks ------------------------------------------------------------------------------


def test_a_task_without_solve_sh_is_imported_with_a_visible_warning(db, tmp_path, client_as, capsys):
    fx.multimedia_task(tmp_path / "ds" / "no-solution", solution=False)
    call_command("import-tasks", str(tmp_path / "ds"), "--image-map", "python:3.11-slim=facet-base:bookworm")
    out = capsys.readouterr().out
    assert "no reference solution: oracle validation impossible" in out
    task = Task.objects.get()
    checks = {f["check"] for f in task.current_version.import_findings}
    assert "no_reference_solution" in checks
    assert TaskImport.objects.get().image_map == {"python:3.11-slim": "facet-base:bookworm"}
    page = client_as("viewer").get(f"/tasks/{task.pk}/").content.decode()
    assert "Found at import" in page and "no reference solution: oracle validation impossible" in page


def test_static_checks_run_at_import_without_docker(db, tmp_path):
    root = fx.multimedia_task(tmp_path / "ds" / "leaky")
    (root / "tests" / "test.sh").write_bytes(b"#!/bin/bash\nbash /solution/solve.sh\necho 1 > /logs/verifier/reward.txt\n")
    imports.import_path(tmp_path / "ds")
    version = TaskVersion.objects.get()
    assert not version.validations.exists()
    assert "tests_use_solution" in {f["check"] for f in version.import_findings}


# --- Terminal-Bench 1 ---------------------------------------------------------------------------------


def _grade(bundle: harbor.TaskBundle, tmp_path: Path, script_output: str) -> str:
    """Run the converted test.sh with run-tests.sh's body replaced by `script_output` (echo lines)
    ending in exit 0, as the adapters' scripts do; the reward it writes."""
    test_sh = bundle.files["tests/test.sh"].decode()
    head, rest = test_sh.split("\n(\n", 1)
    _body, tail = rest.split("\n) 2>&1 | tee", 1)
    body = "".join(f"echo '{line}'\n" for line in script_output.splitlines()) + "exit 0"
    logs = tmp_path / "logs"
    script = (head + "\n(\n" + body + "\n) 2>&1 | tee" + tail).replace("/logs/verifier", str(logs))
    (tmp_path / "t.sh").write_text(script)
    subprocess.run(["bash", str(tmp_path / "t.sh")], capture_output=True, timeout=20, check=True)
    return (logs / "reward.txt").read_text().strip()


@pytest.mark.parametrize("verdict,reward", [("PASSED", "1"), ("FAILED", "0")])
def test_a_swebench_task_grades_by_its_markers_not_by_the_exit_status(tmp_path, verdict, reward):
    bundle = harbor.read_task_dir(fx.swebench_task(tmp_path / "sweb"))
    out = f"collected 2 items\nSWEBench results starts here\n{verdict}\nSWEBench results ends here"
    assert _grade(bundle, tmp_path, out) == reward
    assert _grade(bundle, tmp_path, "the harness could not fetch the repository") == "0"


@pytest.mark.parametrize("summary,reward", [
    ("PASSED tests/test_outputs.py::test_ok", "1"),
    ("PASSED tests/test_outputs.py::test_ok\nFAILED tests/test_outputs.py::test_two - assert 1 == 2", "0"),
    ("XFAIL tests/test_outputs.py::test_known", "1"),
])
def test_a_pytest_task_grades_by_pytests_summary(tmp_path, summary, reward):
    bundle = harbor.read_task_dir(fx.tb1_task(tmp_path / "py", dockerfile="FROM ubuntu:24.04\n"))
    out = "=========================== short test summary info ============================\n" + summary
    assert _grade(bundle, tmp_path, out) == reward
    assert _grade(bundle, tmp_path, "ImportError while loading conftest") == "0"  # pytest never got going


def test_an_unknown_parser_is_a_warning_not_a_silent_conversion(db, tmp_path):
    fx.tb1_task(tmp_path / "ds" / "odd", parser="swelancer", dockerfile="FROM ubuntu:24.04\n")
    imports.import_path(tmp_path / "ds")
    [warning] = [f for f in TaskVersion.objects.get().import_findings if f["check"] == "tb1_conversion"]
    assert "swelancer" in warning["message"] and "exit status" in warning["message"]


def test_livecodebench_copies_of_moved_files_are_rewritten_so_the_image_builds(tmp_path):
    bundle = harbor.read_task_dir(fx.livecodebench_task(tmp_path / "lcb"))
    dockerfile = bundle.files["environment/Dockerfile"].decode()
    active = [line for line in dockerfile.splitlines() if not line.startswith("#")]
    assert "COPY problem.txt /app/problem.txt" in active
    assert not any(word in line for line in active for word in ("run-tests.sh", "solution.sh", "tests/"))
    # every COPY source left is in the build context
    for line in active:
        if line.startswith("COPY"):
            assert f"environment/{line.split()[1]}" in bundle.files


def test_every_missing_tb1_file_is_reported_at_once(tmp_path):
    root = fx.tb1_task(tmp_path / "bare")
    (root / "run-tests.sh").unlink()
    (root / "Dockerfile").write_text("")  # keep the task recognisable, then take the Dockerfile away too
    (root / "Dockerfile").unlink()
    (root / "solution.sh").unlink()
    with pytest.raises(harbor.TaskFormatError) as err:
        harbor.read_task_dir(root)
    assert "run-tests.sh" in str(err.value) and "docker-compose.yaml or Dockerfile" in str(err.value)


def test_a_task_yaml_alone_is_not_taken_for_a_tb1_task(db, tmp_path):
    (tmp_path / "ds" / "config").mkdir(parents=True)
    (tmp_path / "ds" / "config" / "task.yaml").write_text("instruction: not a task\n")
    fx.compose_task(tmp_path / "ds" / "with-compose")
    imp = imports.import_path(tmp_path / "ds")
    assert (imp.imported, imp.problems) == (1, [])
    version = Task.objects.get(name="with-compose").current_version
    assert "services:" in version.files["environment/docker-compose.yaml"]


def test_per_task_zips_inside_a_dataset_are_imported_and_bad_ones_named(db, tmp_path):
    scratch = tmp_path / "scratch"
    ds = tmp_path / "ds"
    ds.mkdir()
    for name, make in (("sweb", fx.swebench_task), ("lcb", fx.livecodebench_task), ("media", fx.multimedia_task)):
        task_dir = make(scratch / name)
        if name == "media":
            os.chmod(task_dir / "environment" / "run.sh", 0o750)
            os.chmod(task_dir / "tests" / "oracle.enc", 0o600)
        fx.zip_dir(task_dir, ds / f"{name}.zip")
    (ds / "notes.zip").write_bytes(fx.zip_dir(scratch / "sweb" / "tests", tmp_path / "n.zip").read_bytes())
    (ds / "broken.zip").write_bytes(b"PK\x03\x04 not really")
    imp = imports.import_path(ds)
    assert imp.imported == 3
    problems = {p["task"]: p["error"] for p in imp.problems}
    assert set(problems) == {"notes.zip", "broken.zip"}
    assert "holds no task" in problems["notes.zip"]
    # from an archive every file keeps its permission bits, as from a folder
    media = Task.objects.get(name="media").current_version
    source = {rel: mode for rel, (mode, data) in _tree(scratch / "media").items() if data is not None}
    assert {rel: media.file_modes.get(rel, harbor.task_files.default_mode(rel)) for rel in source} == source
    assert (media.file_modes["environment/run.sh"], media.file_modes["tests/oracle.enc"]) == (0o750, 0o600)


# --- the task page ----------------------------------------------------------------------------------


def test_binary_files_are_downloads_with_safe_previews_and_a_peek(db, tmp_path, client_as):
    root = fx.multimedia_task(tmp_path / "ds" / "media")
    (root / "environment" / "logo.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>')
    imports.import_path(tmp_path / "ds")
    task = Task.objects.get()
    c = client_as("viewer")
    page = c.get(f"/tasks/{task.pk}/?tab=verifier").content.decode()
    assert "tests/oracle.enc" in page and "application/octet-stream" in page
    assert "No preview" in page and "00000000" in page  # the hex peek
    base = f"/tasks/{task.pk}/versions/{task.current_version.number}/files/"

    png = c.get(base + "environment/cover.png?inline=1")
    assert png["Content-Type"] == "image/png" and png["Content-Disposition"].startswith("inline")
    assert png["X-Content-Type-Options"] == "nosniff" and "sandbox" in png["Content-Security-Policy"]
    assert png.content == fx.png_bytes()
    wav = c.get(base + "environment/in.wav?inline=1")
    assert wav["Content-Type"] == "audio/wav" and wav.content == fx.wav_bytes()
    # not previewable: an opaque download even when asked inline
    enc = c.get(base + "tests/oracle.enc?inline=1")
    assert enc["Content-Type"] == "application/octet-stream" and enc["Content-Disposition"].startswith("attachment")
    assert enc.content == fx.encrypted_blob(0)
    # SVG (text that can carry script) is never rendered: a plain-text download
    svg = c.get(base + "environment/logo.svg?inline=1")
    assert svg["Content-Type"].startswith("text/plain") and svg["Content-Disposition"].startswith("attachment")

    env = c.get(f"/tasks/{task.pk}/?tab=environment&file=cover.png").content.decode()
    assert '<img class="binary-preview"' in env and "image/png" in env
    assert c.get(base + "environment/nothing.bin").status_code == 404


def test_a_large_one_line_file_is_collapsed_by_size(db, tmp_path, client_as):
    root = fx.multimedia_task(tmp_path / "ds" / "json")
    (root / "tests" / "expected.json").write_text('{"rows": [' + ",".join(f'{{"id": {i}}}' for i in range(15000)) + "]}")
    assert 190_000 < (root / "tests" / "expected.json").stat().st_size < 200_000
    imports.import_path(tmp_path / "ds")
    task = Task.objects.get()
    page = client_as("viewer").get(f"/tasks/{task.pk}/?tab=verifier").content.decode()
    assert '"id": 14999' not in page and len(page) < 250_000  # the 195 KB line is not rendered whole
    assert "The first part only" in page and "Show all 1 line" in page


# --- exports that build elsewhere ------------------------------------------------------------------


def test_a_generated_task_is_exported_from_a_pinned_public_base_and_the_manifest_says_so(db, tmp_path, settings):
    _task, version = fx.facet_made_task()
    members = _export_members(tmp_path, query="status=validated")
    [dockerfile] = [data for name, (_, data) in members.items() if name.endswith("environment/Dockerfile")]
    text = dockerfile.decode()
    assert "FROM debian:bookworm-20250113-slim" in text and "facet-base:bookworm\nWORKDIR" not in text
    assert "snapshot.debian.org/archive/debian/20250113T000000Z" in text and "python3-pytest" in text
    import json

    [row] = [json.loads(line) for line in members["facet-dataset/manifest.jsonl"][1].decode().splitlines()]
    assert row["base_image"] == "debian:bookworm-20250113-slim"
    assert row["content_hash"] == version.content_hash != row["exported_content_hash"]
    assert row["artifact_hash"] is None or row["artifact_hash"].startswith("sha256:")


def test_an_upload_carries_its_own_image_map_and_a_malformed_one_is_refused(db, client, token_for, tmp_path):
    src = fx.multimedia_task(tmp_path / "src" / "media")
    archive = tmp_path / "media.zip"
    fx.zip_dir(src, archive)
    reviewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('reviewer')}"}

    def upload():
        f = io.BytesIO(archive.read_bytes())
        f.name = "media.zip"
        return f

    made = client.post("/api/imports", {"archive": upload(), "image_map": "python:3.11-slim=facet-base:bookworm"},
                       **reviewer)
    assert made.status_code == 202 and made.json()["image_map"] == {"python:3.11-slim": "facet-base:bookworm"}
    bad = client.post("/api/imports", {"archive": upload(), "image_map": "python:3.11-slim"}, **reviewer)
    assert bad.status_code == 422 and "expected IMAGE=LOCAL" in bad.json()["detail"]
