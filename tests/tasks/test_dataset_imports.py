"""Dataset imports: Harbor 1.0 and 1.1, Terminal-Bench 1.x, archives, re-imports, the round trip from
an export, and every kind of bad input (named by file and field, the rest imported)."""
from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command

from facet_site.lib import harbor
from tasks import imports, summary, versions
from tasks.models import (
    LabelKind,
    ReviewState,
    Task,
    TaskLabel,
    TaskStatus,
    TaskVersion,
    Validation,
    ValidationStatus,
)
from tests.tasks.dataset_records import GOOD_TEST_SH, TB20, TB21, _export, _task_dir, _tb1_dir


# --- import ----------------------------------------------------------------------------------


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
