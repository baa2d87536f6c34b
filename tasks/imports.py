"""Dataset import: Harbor or Terminal-Bench 1.x tasks made elsewhere, stored as imported tasks so
they enter review.

`create_import` / `import_path` record a TaskImport for a directory, a dataset or an archive
(.tar.gz/.zip, unpacked by lib.archives, which never writes links, devices or paths outside its
destination); `run_import` claims it with a conditional UPDATE (TaskImport.claim). Each task
directory found (task.toml or task.yaml) is read by lib.harbor and stored in its own transaction
as an imported Task with one TaskVersion: a task that fails to read is reported in
TaskImport.problems with the file, field and line and leaves nothing behind; the others are
imported. Content already present (same content hash) is skipped and counted.
"""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from facet_site.lib import archives, harbor

from . import jobs, summary
from .models import AuditEvent, ExportStatus, Step, Task, TaskImport, TaskStatus, TaskVersion
from .validating import request_validation
from .versions import bundle_of, create_version, text_files
from .workspace import data_dir

log = logging.getLogger(__name__)


class ImportRefused(ValueError):
    """An import that cannot start (unreadable source, wrong kind of upload)."""


TASK_MARKERS = ("task.toml", "task.yaml", "instruction.md")
MAX_DEPTH = 4  # dataset/, facet-dataset/tasks/<task>, an archive's top folder: deep enough, never a crawl


def import_area(task_import: TaskImport) -> Path:
    return Path(settings.DATA_DIR) / "imports" / f"import-{task_import.pk}"


def create_import(*, path: str | Path | None = None, source: str = "", user=None, validate: bool = False,
                  queue: bool = True) -> TaskImport:
    """Record an import of a directory or archive on this machine and queue its job."""
    with transaction.atomic():
        task_import = TaskImport.objects.create(
            source=(source or str(path))[:500], upload_path=str(path or ""),
            created_by=user if getattr(user, "is_authenticated", False) else None)
        AuditEvent.objects.create(actor=task_import.created_by, action="import.create", object_type="import",
                                  object_id=str(task_import.pk), after={"source": task_import.source,
                                                                        "validate": validate})
        if queue:
            jobs.run_import.delay_on_commit(task_import.pk, validate)
    return task_import


def save_upload(*, uploaded, user, validate: bool = False) -> TaskImport:
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
    return create_import(path=target, source=f"upload:{name}", user=user, validate=validate)


def find_task_dirs(root: Path, *, max_depth: int = MAX_DEPTH) -> list[Path]:
    """Task directories below `root` (root itself when it is one): directories holding task.toml,
    task.yaml or instruction.md, not looked into further. Hidden directories and symlinks are
    not followed."""
    found: list[Path] = []

    def walk(d: Path, depth: int) -> None:
        if any((d / m).exists() or (d / m).is_symlink() for m in TASK_MARKERS):
            found.append(d)
            return
        if depth >= max_depth:
            return
        try:
            children = sorted(d.iterdir(), key=lambda p: p.name)
        except OSError:
            return
        for child in children:
            if child.name.startswith(".") or child.is_symlink() or not child.is_dir():
                continue
            walk(child, depth + 1)

    walk(root, 0)
    return found


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


def import_task(task_dir: Path, *, source: str, name: str | None = None, task_import: TaskImport | None = None,
                    validate: bool = False) -> Task | None:
    """One task directory as an imported task with one version, in one transaction; None when a
    version with the same content already exists. Raises harbor.TaskFormatError (file, field,
    line) when the directory is not a task facet can store; nothing is stored then."""
    bundle = harbor.read_task_dir(Path(task_dir))
    files = text_files(bundle)
    name = (name or bundle.name)[:200]
    digest = harbor.content_hash(bundle_of(name, files))
    if TaskVersion.objects.filter(content_hash=digest).exists():
        return None
    notes = ""
    if bundle.source_format == "terminal-bench-1":
        notes = "Converted from Terminal-Bench 1.x: " + "; ".join(bundle.notes)
    with transaction.atomic():
        task = Task.objects.create(name=name, imported=True, source=source[:300], status=TaskStatus.VALIDATING,
                                   step=Step.DONE, message=notes[:5000])
        version = create_version(task, files)
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
                 progress: Callable[[ImportOutcome], None] | None = None) -> ImportOutcome:
    """Every task directory below `root`; one bad task never stops the others. `refused` maps a
    task directory (relative to root) to problems found before reading it (archive members that
    were not extracted): such a task would be incomplete, so it is not imported."""
    outcome = ImportOutcome()
    root = Path(root)
    dirs = find_task_dirs(root)
    names = _facet_names(dirs, root)
    if not dirs:
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
        if progress:
            progress(outcome)
    return outcome


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
    task_import = TaskImport.objects.get(pk=import_id)
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


def import_path(path: str | Path, *, user=None, validate: bool = False, source: str = "") -> TaskImport:
    """`facet import-tasks PATH`: the import, run in this process."""
    path = Path(path).resolve()
    task_import = create_import(path=path, source=source or str(path), user=user, validate=validate, queue=False)
    return run_import(task_import.pk, validate=validate) or TaskImport.objects.get(pk=task_import.pk)
