"""Dataset import: Harbor or Terminal-Bench 1.x tasks made elsewhere, stored as imported tasks so
they enter review.

`create_import` / `import_path` record a TaskImport for a directory, a dataset or an archive
(.tar.gz/.zip, unpacked by lib.archives, which never writes links, devices or paths outside its
destination); `run_import` claims it with a conditional UPDATE (TaskImport.claim). Each task
directory found (task.toml, or TB1's task.yaml beside its files) is read by lib.harbor and stored
in its own transaction as an imported Task with one TaskVersion (text files, binary files as
blobs, the modes and empty directories it came with), with the findings of the checks that need
no Docker: a task that fails to read is reported in TaskImport.problems with the file, field and
line and leaves nothing behind; the others are imported. Archives inside a dataset folder
(per-task zips) are imported in turn or reported by name. Content already present (same content
hash) is skipped and counted.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from facet_site import leases
from facet_site.lib import archives, harbor
from facet_site.lib.docker_engine.base_image import BASE_PACKAGES
from facet_site.lib.harbor.portable import restore_local
from facet_site.lib.harbor.tb1 import NO_SOLUTION
from facet_site.lib.validation import static_checks

from . import jobs, summary
from .models import AuditEvent, ExportStatus, Step, Task, TaskImport, TaskStatus, TaskVersion
from .validating import request_validation
from .versions import create_version, split_files
from .workspace import data_dir

log = logging.getLogger(__name__)


class ImportRefused(ValueError):
    """An import that cannot start (unreadable source, wrong kind of upload)."""


PROGRESS_EVERY_S = 1.0
MAX_DEPTH = 4  # dataset/, facet-dataset/tasks/<task>, an archive's top folder: deep enough, never a crawl


def import_area(task_import: TaskImport) -> Path:
    return Path(settings.DATA_DIR) / "imports" / f"import-{task_import.pk}"


def create_import(*, path: str | Path | None = None, source: str = "", user=None, validate: bool = False,
                  queue: bool = True, image_map: dict[str, str] | None = None) -> TaskImport:
    """Record an import of a directory or archive on this machine and queue its job."""
    with transaction.atomic():
        task_import = TaskImport.objects.create(
            source=(source or str(path))[:500], upload_path=str(path or ""), validate=validate,
            image_map=dict(image_map or {}),
            created_by=user if getattr(user, "is_authenticated", False) else None)
        AuditEvent.objects.create(actor=task_import.created_by, action="import.create", object_type="import",
                                  object_id=str(task_import.pk), after={"source": task_import.source,
                                                                        "validate": validate})
        if queue:
            jobs.run_import.delay_on_commit(task_import.pk, validate)
    return task_import


def parse_image_map(pairs) -> dict[str, str]:
    """`IMAGE=LOCAL` pairs (a list, or text with one per line or comma-separated) as a mapping
    from a task's base image to a local image; ImportRefused names a malformed pair."""
    if isinstance(pairs, str):
        pairs = [p for p in re.split(r"[,\n]", pairs) if p.strip()]
    mapping = {}
    for pair in pairs:
        wanted, eq, local = pair.partition("=")
        if not eq or not wanted.strip() or not local.strip() or any(c.isspace() for c in (wanted + local).strip()):
            raise ImportRefused(f"image map {pair.strip()!r}: expected IMAGE=LOCAL, e.g. "
                                "python:3.11-slim=facet-base:bookworm")
        mapping[wanted.strip()] = local.strip()
    return mapping


def save_upload(*, uploaded, user, validate: bool = False, image_map: dict[str, str] | None = None) -> TaskImport:
    """Store an uploaded archive under DATA_DIR/imports/ and queue its import."""
    name = Path(uploaded.name or "").name
    if not archives.is_archive(Path(name)):
        raise ImportRefused(f"{name or 'file'}: upload a .tar.gz, .tgz, .tar or .zip archive of Harbor or "
                            "Terminal-Bench tasks")
    limit = settings.FACET_IMPORT_MAX_UPLOAD_BYTES
    if uploaded.size > limit:
        raise ImportRefused(f"{name}: {uploaded.size:,} bytes is over the upload limit of {limit:,} bytes")
    folder = data_dir("imports", "uploads", hashlib.sha256(
        f"{timezone.now().isoformat()}{name}{user.pk}".encode()).hexdigest()[:16])
    target = folder / name
    with open(target, "wb") as out:
        for piece in uploaded.chunks():
            out.write(piece)
    return create_import(path=target, source=f"upload:{name}", user=user, validate=validate, image_map=image_map)


def scan(root: Path, *, max_depth: int = MAX_DEPTH) -> tuple[list[Path], list[Path]]:
    """Task directories below `root` (root itself when it is one) and the archives found outside
    them (per-task zips in a dataset folder). A task directory holds task.toml or instruction.md,
    or task.yaml beside TB1's files (harbor.looks_like_task), and is not looked into further: an
    archive inside a task is one of its files. Hidden entries and symlinks are not followed."""
    found: list[Path] = []
    packed: list[Path] = []

    def walk(d: Path, depth: int) -> None:
        if harbor.looks_like_task(d) or (d / "task.toml").is_symlink():
            found.append(d)
            return
        try:
            children = sorted(d.iterdir(), key=lambda p: p.name)
        except OSError:
            return
        for child in children:
            if child.name.startswith(".") or child.is_symlink():
                continue
            if child.is_file() and archives.is_archive(child):
                packed.append(child)
            elif child.is_dir() and depth < max_depth:
                walk(child, depth + 1)

    if root.is_dir():
        walk(root, 0)
    return found, packed


def find_task_dirs(root: Path, *, max_depth: int = MAX_DEPTH) -> list[Path]:
    return scan(root, max_depth=max_depth)[0]


def _facet_names(task_dirs: list[Path], root: Path) -> dict[Path, str]:
    """Task names from a facet export's manifest.jsonl (its directory names carry a hash suffix;
    the manifest has the names the tasks had)."""
    names: dict[Path, str] = {}
    manifests = {d.parent.parent / "manifest.jsonl" for d in task_dirs if d.parent.name == "tasks"}
    for manifest in sorted(manifests):
        if manifest.is_symlink() or not manifest.is_file() or manifest.stat().st_size > 200_000_000:
            continue
        try:
            for line in manifest.read_text(encoding="utf-8").splitlines():
                row = json.loads(line) if line.strip() else None
                if isinstance(row, dict) and isinstance(row.get("directory"), str) and isinstance(row.get("name"), str):
                    names[(manifest.parent / row["directory"]).resolve()] = row["name"]
        except (OSError, ValueError):
            continue
    return names


def _problem(task: str | None, error: str, *, file: str | None = None, field: str | None = None,
             line: int | None = None) -> dict:
    return {"task": task, "file": file, "field": field, "line": line, "error": error}


@dataclass
class ImportOutcome:
    imported: list[Task] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)


def restore_local_base(bundle: harbor.TaskBundle) -> None:
    """A facet export coming back: the portable base its Dockerfile was given on export
    (tasks.exports.portable_bundle) becomes facet's local base again, so the version it came
    from is recognised by its content hash."""
    data = bundle.files.get("environment/Dockerfile")
    if data is None or b"# facet: " not in data:
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    restored = restore_local(text, local_base=settings.FACET_BASE_IMAGE, packages=BASE_PACKAGES,
                             public_base=settings.FACET_EXPORT_BASE_IMAGE,
                             apt_snapshot=settings.FACET_EXPORT_APT_SNAPSHOT)
    if restored != text:
        bundle.files["environment/Dockerfile"] = restored.encode("utf-8")


# Each task is written out once for the static checks and removed again: memory-backed when the
# machine has it, since thousands of small writes and deletes are most of that cost on disk.
_SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def import_findings(bundle: harbor.TaskBundle) -> list[dict]:
    """What facet can say about a task before any Docker run: the static checks of
    lib.validation (on the task written to a scratch directory), the Harbor lint rules, a missing
    reference solution, and the warnings of a Terminal-Bench 1 conversion."""
    found: list[dict] = []
    if "solution/solve.sh" not in bundle.files and "solution/solve.bat" not in bundle.files:
        found.append({"check": "no_reference_solution", "severity": "warning", "file": "solution/solve.sh",
                      "message": NO_SOLUTION})
    for note in bundle.notes:
        if note.startswith("WARNING: ") and NO_SOLUTION not in note:
            found.append({"check": "tb1_conversion", "severity": "warning",
                          "message": note.removeprefix("WARNING: ")})
    # the Harbor lint rules facet reimplements (lib/harbor/lint.py); a missing solution is said once, above
    found.extend({"check": f"harbor_lint:{f.rule}", "severity": f.severity, "file": f.path, "line": f.line,
                  "message": f.message} for f in harbor.lint_task(bundle) if f.rule != "missing-solution")
    with tempfile.TemporaryDirectory(prefix="facet-import-check-", dir=_SCRATCH) as tmp:
        try:
            found.extend(static_checks(harbor.write_task_dir(bundle, Path(tmp) / "task")))
        except (harbor.TaskFormatError, OSError, ValueError) as exc:
            found.append({"check": "static_checks", "severity": "warning", "message": f"not checked: {exc}"})
    return found


def import_task(task_dir: Path, *, source: str, name: str | None = None, task_import: TaskImport | None = None,
                    validate: bool = False) -> Task | None:
    """One task directory as an imported task with one version, in one transaction; None when a
    version with the same content already exists (the task itself when this import's own earlier
    attempt stored it, so a resumed import counts it as imported). Raises harbor.TaskFormatError (file, field,
    line) when the directory is not a task facet can store; nothing is stored then."""
    bundle = harbor.read_task_dir(Path(task_dir), max_file_bytes=settings.FACET_IMPORT_MAX_FILE_BYTES,
                                  max_total_bytes=settings.FACET_IMPORT_MAX_TASK_BYTES)
    restore_local_base(bundle)
    stored = split_files(bundle, max_task_bytes=settings.FACET_IMPORT_MAX_TASK_BYTES)
    name = (name or bundle.name)[:200]
    digest = harbor.content_hash(bundle)
    if TaskVersion.objects.filter(content_hash=digest).exists():
        # This import's own earlier attempt (its worker died) stored it: imported, not skipped.
        earlier = task_import.tasks.filter(versions__content_hash=digest).first() if task_import else None
        return earlier
    notes = ""
    if bundle.source_format == "terminal-bench-1":
        notes = "Converted from Terminal-Bench 1.x: " + "; ".join(bundle.notes)
    findings = import_findings(bundle)
    with transaction.atomic():
        task = Task.objects.create(name=name, imported=True, source=source[:300], status=TaskStatus.VALIDATING,
                                   step=Step.DONE, message=notes[:5000])
        version = create_version(task, stored.files, binary=stored.binary, modes=stored.modes,
                                 empty_dirs=stored.empty_dirs)
        TaskVersion.objects.filter(pk=version.pk).update(import_findings=findings)
        version.import_findings = findings
        Task.objects.filter(pk=task.pk).update(current_version=version)
        task.current_version = version
        summary.set_labels(task)
        if task_import is not None:
            task_import.tasks.add(task)
        if validate:
            request_validation(version, user=task_import.created_by if task_import else None)
        summary.refresh_summary(task)
    return task


def import_tasks(root: Path, *, source: str, task_import: TaskImport | None = None, validate: bool = False,
                 refused: dict[str, list[dict]] | None = None,
                 progress: Callable[[ImportOutcome], None] | None = None, nested: bool = True) -> ImportOutcome:
    """Every task directory below `root`; one bad task never stops the others. `refused` maps a
    task directory (relative to root) to problems found before reading it (archive members that
    were not extracted): such a task would be incomplete, so it is not imported."""
    outcome = ImportOutcome()
    root = Path(root)
    dirs, archives_inside = scan(root)
    names = _facet_names(dirs, root)
    reported = time.monotonic()
    if not nested:  # an archive within a nested archive: named, never unpacked
        outcome.problems.extend(_problem(a.relative_to(root).as_posix(), "archive inside a nested archive: "
                                         "skipped (unpack it and import the folder)", field="archive")
                                for a in archives_inside)
        archives_inside = []
    if not dirs and not archives_inside and nested:
        outcome.problems.append(_problem(None, "no task found: expected task directories (task.toml or "
                                               "Terminal-Bench task.yaml), a dataset of them, or an archive of either"))
    for d in dirs:
        rel = d.relative_to(root).as_posix() if d != root else d.name
        label = rel if d != root else d.name
        early = (refused or {}).get(rel if d != root else "")
        if early:
            outcome.problems.extend({**p, "task": label} for p in early)
            continue
        where = f"{source}#{rel}" if d != root else source
        try:
            task = import_task(d, source=where, name=names.get(d.resolve()), task_import=task_import,
                               validate=validate)
        except harbor.TaskFormatError as exc:
            outcome.problems.append(_problem(label, exc.message, file=exc.file, field=exc.field, line=exc.line))
        except Exception as exc:  # unreadable files, a content clash, a database error: this task only
            log.warning("import of %s failed", d, exc_info=True)
            outcome.problems.append(_problem(label, f"{type(exc).__name__}: {exc}"))
        else:
            if task is None:
                outcome.skipped.append(label)
            else:
                outcome.imported.append(task)
        # progress is one UPDATE of the import row: about once a second, not once a task
        if progress and time.monotonic() - reported >= PROGRESS_EVERY_S:
            progress(outcome)
            reported = time.monotonic()
    for archive in archives_inside:
        _import_nested(archive, root, source=source, task_import=task_import, validate=validate, outcome=outcome)
        if progress:
            progress(outcome)
    return outcome


def _import_nested(archive: Path, root: Path, *, source: str, task_import: TaskImport | None, validate: bool,
                   outcome: ImportOutcome) -> None:
    """One archive found in a dataset: unpacked to a scratch folder and imported like the dataset
    (archives inside it are reported, not unpacked: one level, never a crawl)."""
    rel = archive.relative_to(root).as_posix()
    scratch = Path(tempfile.mkdtemp(prefix="nested-", dir=data_dir("imports")))
    try:
        found = archives.unpack(archive, scratch, max_total_bytes=settings.FACET_IMPORT_MAX_ARCHIVE_BYTES,
                                max_member_bytes=settings.FACET_IMPORT_MAX_FILE_BYTES,
                                max_entries=settings.FACET_IMPORT_MAX_ENTRIES)
        if any("extraction stopped" in p.message for p in found):
            outcome.problems.append(_problem(rel, "nested archive not imported: " + "; ".join(
                p.message for p in found), file=rel, field="archive"))
            return
        dirs = find_task_dirs(scratch)
        if not dirs:
            outcome.problems.append(_problem(rel, "nested archive holds no task (task.toml, or task.yaml beside "
                                                  "run-tests.sh/Dockerfile); skipped", file=rel, field="archive"))
            return
        rels = ["" if d == scratch else d.relative_to(scratch).as_posix() for d in dirs]
        refused, general = _refused_by_archive(found, rels)
        outcome.problems.extend({**p, "task": rel} for p in general)
        inner = import_tasks(scratch, source=f"{source}#{rel}", task_import=task_import, validate=validate,
                             refused=refused, nested=False)
        outcome.imported.extend(inner.imported)
        outcome.skipped.extend(f"{rel}/{label}" for label in inner.skipped)
        outcome.problems.extend({**p, "task": f"{rel}/{p['task']}" if p.get("task") else rel}
                                for p in inner.problems)
    except (OSError, ValueError) as exc:
        outcome.problems.append(_problem(rel, f"nested archive not imported: {exc}", file=rel, field="archive"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _refused_by_archive(problems: list, task_dirs: list[str]) -> tuple[dict[str, list[dict]], list[dict]]:
    """Archive members that were not extracted, per task directory they belong to; the rest."""
    per_task: dict[str, list[dict]] = defaultdict(list)
    general: list[dict] = []
    for p in problems:
        member = p.path.replace("\\", "/").lstrip("/")
        owner = next((t for t in sorted(task_dirs, key=len, reverse=True)
                      if t == "" or member == t or member.startswith(t + "/")), None)
        inner = member[len(owner) + 1:] if owner else member  # owner "" (the root is the task): whole name
        entry = _problem(None, p.message, file=inner or member, field="archive")
        if owner is None:
            general.append(entry)
        else:
            per_task[owner].append(entry)
    return per_task, general


def run_import(import_id: int, *, validate: bool = False) -> TaskImport | None:
    """Claim the import, unpack it when it is an archive, and import every task in it."""
    if not TaskImport.claim(import_id):
        return None
    with leases.heartbeat(TaskImport, import_id, running=ExportStatus.RUNNING):
        return _run_claimed(import_id, validate=validate)


def retry_import(task_import: TaskImport) -> bool:
    """A failed import, or one whose worker died, is queued again (Retry / Resume on its page);
    tasks it already stored are skipped by content hash."""
    if not TaskImport.retry(task_import.pk):
        return False
    jobs.run_import.delay_on_commit(task_import.pk, task_import.validate)
    return True


def resume_stalled() -> list[int]:
    """Imports whose worker died, or whose message was lost, go back to the queue (beat)."""
    ids = leases.requeue_stalled(TaskImport, queued=ExportStatus.QUEUED, running=ExportStatus.RUNNING)
    for pk, validate in TaskImport.objects.filter(pk__in=ids).values_list("pk", "validate"):
        jobs.run_import.delay_on_commit(pk, validate)
    return ids


def _run_claimed(import_id: int, *, validate: bool) -> TaskImport:
    task_import = TaskImport.objects.get(pk=import_id)
    validate = validate or task_import.validate
    problems: list[dict] = []

    def save(outcome: ImportOutcome | None = None, **extra) -> None:
        fields = {"problems": problems + (outcome.problems if outcome else [])}
        if outcome is not None:
            fields.update(imported=len(outcome.imported), skipped=len(outcome.skipped))
        TaskImport.objects.filter(pk=import_id).update(**fields, **extra)

    try:
        source = Path(task_import.upload_path)
        refused: dict[str, list[dict]] = {}
        if source.is_file():
            if not archives.is_archive(source):
                raise ImportRefused(f"{source.name}: not a directory or a .tar.gz, .tgz, .tar or .zip archive")
            area = import_area(task_import)
            if area.exists():
                shutil.rmtree(area)  # a retried job starts from a clean area
            found = archives.unpack(source, area,
                                    max_total_bytes=settings.FACET_IMPORT_MAX_ARCHIVE_BYTES,
                                    max_member_bytes=settings.FACET_IMPORT_MAX_FILE_BYTES,
                                    max_entries=settings.FACET_IMPORT_MAX_ENTRIES)
            if any("extraction stopped" in p.message for p in found):
                # Which tasks the archive held in full is unknowable once extraction stopped.
                problems.extend(_problem(None, p.message, file=p.path, field="archive") for p in found)
                problems.append(_problem(None, "the archive was not fully extracted; nothing was imported from it"))
                shutil.rmtree(area, ignore_errors=True)
                save(status=ExportStatus.FAILED, finished_at=timezone.now())
                return TaskImport.objects.get(pk=import_id)
            root = area
            rels = ["" if d == root else d.relative_to(root).as_posix() for d in find_task_dirs(root)]
            refused, general = _refused_by_archive(found, rels)
            problems.extend(general)
        elif source.is_dir():
            root = source
        else:
            raise ImportRefused(f"{task_import.upload_path}: no such file or directory")
        outcome = import_tasks(root, source=task_import.source, task_import=task_import, validate=validate,
                               refused=refused, progress=save)
        save(outcome, status=ExportStatus.DONE, finished_at=timezone.now())
        if source.is_file():
            shutil.rmtree(import_area(task_import), ignore_errors=True)
    except Exception as exc:
        log.exception("import %s failed", import_id)
        problems.append(_problem(None, f"{type(exc).__name__}: {exc}"))
        save(status=ExportStatus.FAILED, finished_at=timezone.now())
    return TaskImport.objects.get(pk=import_id)


def import_path(path: str | Path, *, user=None, validate: bool = False, source: str = "",
                image_map: dict[str, str] | None = None) -> TaskImport:
    """`facet import-tasks PATH`: the import, run in this process."""
    path = Path(path).resolve()
    task_import = create_import(path=path, source=source or str(path), user=user, validate=validate, queue=False,
                                image_map=image_map)
    return run_import(task_import.pk, validate=validate) or TaskImport.objects.get(pk=task_import.pk)
