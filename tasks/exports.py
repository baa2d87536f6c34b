"""Dataset export: a task selection written as one reproducible archive (a Harbor dataset,
provenance manifests, a Hugging Face layout, SFT trajectories); what goes into each task's
records is in tasks/export_records.py.

`create_export` records an Export for a task-list query (tasks.filters; an empty query means
the approved tasks) and queues `run_export`, which claims it with a conditional UPDATE
(Export.claim) and writes one .tar.gz under DATA_DIR/exports/. Every task contributes its
current version: for an approved task that is the version its standing decision names (a
decision is bound to the current version's content hash, tasks.summary.standing_decision). The
archive holds, under `facet-dataset/`:

    tasks/<slug>-<hash8>/   one Harbor task per task (harbor.task_dir_entries)
    manifest.jsonl, manifest.parquet   provenance, one row per task (MANIFEST_SCHEMA)
    data/tasks.parquet, data/sft.parquet, README.md   the Hugging Face layout and dataset card
    sft.jsonl   successful rollouts of the exported versions as chat messages

The archive is a function of the selection: tasks in id order, fixed tar metadata (mtime,
owner, modes), gzip without a name or time stamp, Parquet written with fixed options, and no
export time, export id or user anywhere in it. The same selection exported twice gives the
same bytes (a test checks it).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import pyarrow as pa
import pyarrow.parquet as pq
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from facet_site import leases
from facet_site.lib import harbor
from facet_site.lib.docker_engine.base_image import BASE_PACKAGES
from facet_site.lib.harbor.portable import portable_dockerfile

from . import jobs
from .export_records import (MANIFEST_SCHEMA, SFT_SCHEMA, TASKS_SCHEMA, dataset_card, load_chunk, manifest_row,
                             review_agreement, sft_rows)
from .filters import TaskFilter
from .models import AuditEvent, Export, ExportStatus, ReviewState
from .versions import slug, version_bundle
from .workspace import data_dir

log = logging.getLogger(__name__)

PARTS = ("harbor", "manifest", "hf", "sft")
PART_LABELS = {
    "harbor": "Harbor dataset (one task directory per task)",
    "manifest": "Provenance manifest (JSONL and Parquet)",
    "hf": "Hugging Face layout (data/*.parquet)",
    "sft": "SFT trajectories (chat messages JSONL)",
}
ROOT = "facet-dataset"
# Reproducible-build convention: a fixed time stamp (1980-01-01, the earliest zip can hold too)
# instead of the time of export, so two exports of one selection are the same bytes.
FIXED_MTIME = 315532800
CHUNK = 250  # tasks per round of bulk queries: bounded memory and SQL parameter counts
GZIP_LEVEL = 6


class ExportError(ValueError):
    """An export that cannot be created (bad filter, unknown part)."""


def export_filter(query: str) -> TaskFilter:
    """The task filter an export honours: the query exactly, or the approved tasks when the query
    selects nothing in particular (sort and columns alone do not select)."""
    f = TaskFilter.from_query(query or "")
    if f.is_empty:
        f.review = [ReviewState.APPROVED]
    return f


def selection(query: str):
    """The tasks an export of `query` contains, in the archive's order (by id). Tasks without a
    version yet have nothing to export and are left out."""
    return export_filter(query).queryset().filter(current_version__isnull=False).order_by("pk")


def normalise_parts(parts: Iterable[str] | str | None) -> list[str]:
    if parts is None or parts == "" or parts == []:
        return list(PARTS)
    if isinstance(parts, str):
        parts = [p.strip() for p in parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ExportError(f"parts: unknown part {unknown[0]!r} (choose from {', '.join(PARTS)})")
    chosen = [p for p in PARTS if p in set(parts)]
    if not chosen:
        raise ExportError("parts: choose at least one part")
    return chosen


def create_export(*, query: str = "", parts=None, user=None, name: str = "", queue: bool = True) -> Export:
    """Record an export of the tasks `query` selects and queue its job (after the commit)."""
    f = export_filter(query)
    if f.errors:
        # An ignored typo would silently widen the selection; an export must be exactly what was asked.
        raise ExportError("; ".join(f.errors))
    chosen = normalise_parts(parts)
    query = f.query_string(with_view=False)
    with transaction.atomic():
        export = Export.objects.create(
            name=(name or f"Tasks: {f.describe()}")[:200], query=query, options={"parts": chosen},
            created_by=user if getattr(user, "is_authenticated", False) else None)
        AuditEvent.objects.create(actor=export.created_by, action="export.create", object_type="export",
                                  object_id=str(export.pk), after={"query": query, "parts": chosen})
        if queue:
            jobs.run_export.delay_on_commit(export.pk)
    return export


def archive_dir() -> Path:
    return data_dir("exports")


def run_export(export_id: int) -> Export | None:
    """Claim the export and write its archive. Returns None when another worker has it or it is
    finished (a redelivered job is a no-op)."""
    if not Export.claim(export_id):
        return None
    export = Export.objects.get(pk=export_id)
    target = archive_dir() / f"facet-export-{export.pk}.tar.gz"

    def progress(done: int, total: int) -> None:
        Export.objects.filter(pk=export_id).update(done=done, total=total)

    try:
        with leases.heartbeat(Export, export_id, running=ExportStatus.RUNNING):
            result = write_archive(target, query=export.query, parts=(export.options or {}).get("parts"),
                                   progress=progress)
    except Exception as exc:  # recorded on the export; the page shows it
        log.exception("export %s failed", export_id)
        Export.objects.filter(pk=export_id).update(status=ExportStatus.FAILED, error=f"{type(exc).__name__}: {exc}"[:5000],
                                                   finished_at=timezone.now())
        return Export.objects.get(pk=export_id)
    Export.objects.filter(pk=export_id).update(
        status=ExportStatus.DONE, archive_path=str(target), archive_sha256=result.sha256, archive_bytes=result.bytes,
        summary=result.summary, total=result.summary["tasks"], done=result.summary["tasks"], error="",
        finished_at=timezone.now())
    return Export.objects.get(pk=export_id)


def retry_export(export: Export) -> bool:
    """A failed export, or one whose worker died, is queued again (Retry / Resume on its page)."""
    if not Export.retry(export.pk):
        return False
    jobs.run_export.delay_on_commit(export.pk)
    return True


def resume_stalled() -> list[int]:
    """Exports whose worker died, or whose message was lost, go back to the queue (beat)."""
    ids = leases.requeue_stalled(Export, queued=ExportStatus.QUEUED, running=ExportStatus.RUNNING)
    for pk in ids:
        jobs.run_export.delay_on_commit(pk)
    return ids


def _slug(text: str) -> str:
    # shorter than a task directory's slug: the content hash follows it
    return slug(text or "")[:50].strip("-") or "task"


class _Names:
    """Unique, readable task directory names: slug + the first 8 hex digits of the content hash,
    more digits (then a counter) when two tasks would share a name."""

    def __init__(self):
        self.taken: set[str] = set()

    def __call__(self, name: str, content_hash: str) -> str:
        digest = content_hash.split(":", 1)[-1]
        slug = _slug(name)
        for width in (8, 12, 16, 64):
            candidate = f"{slug}-{digest[:width]}"
            if candidate not in self.taken:
                self.taken.add(candidate)
                return candidate
        n = 2
        while f"{slug}-{digest}-{n}" in self.taken:
            n += 1
        self.taken.add(f"{slug}-{digest}-{n}")
        return f"{slug}-{digest}-{n}"


@dataclass
class ArchiveResult:
    path: Path
    sha256: str
    bytes: int
    summary: dict


class _Tar:
    """A tar stream with fixed metadata: owner root/root (0:0, no names), FIXED_MTIME, 0755
    directories and scripts, 0644 files; gzip with no file name and mtime 0."""

    def __init__(self, fileobj):
        self.gz = gzip.GzipFile(filename="", mode="wb", fileobj=fileobj, compresslevel=GZIP_LEVEL, mtime=0)
        self.tar = tarfile.open(fileobj=self.gz, mode="w", format=tarfile.PAX_FORMAT)
        self.dirs: set[str] = set()

    def _info(self, name: str, mode: int, kind) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.mtime = FIXED_MTIME
        info.mode = mode
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.type = kind
        return info

    def directory(self, name: str) -> None:
        parts = name.split("/")
        for i in range(1, len(parts) + 1):
            path = "/".join(parts[:i])
            if path not in self.dirs:
                self.dirs.add(path)
                self.tar.addfile(self._info(path, 0o755, tarfile.DIRTYPE))

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self.directory(name.rsplit("/", 1)[0])
        info = self._info(name, mode, tarfile.REGTYPE)
        info.size = len(data)
        self.tar.addfile(info, io.BytesIO(data))

    def close(self) -> None:
        self.tar.close()
        self.gz.close()


def _parquet(rows: list[dict], schema: pa.Schema) -> bytes:
    """Parquet bytes that depend on the rows only (fixed options, one row group, no pandas
    metadata, statistics on)."""
    table = pa.Table.from_pylist(rows, schema=schema)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", compression_level=3, use_dictionary=True, write_statistics=True,
                   row_group_size=max(len(rows), 1), version="2.6", data_page_version="1.0")
    return buf.getvalue()


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def portable_bundle(bundle: harbor.TaskBundle) -> str | None:
    """Make `bundle` build on any machine with a registry (in place): a Dockerfile FROM facet's
    local base image starts from the pinned public Debian image with the same packages instead
    (lib.harbor.portable). Returns the image the task starts from, for the manifest."""
    dockerfile = bundle.files.get("environment/Dockerfile")
    if dockerfile is None:
        return bundle.config.docker_image
    try:
        text = dockerfile.decode("utf-8")
    except UnicodeDecodeError:
        return None
    result = portable_dockerfile(text, local_base=settings.FACET_BASE_IMAGE, packages=BASE_PACKAGES,
                                 public_base=settings.FACET_EXPORT_BASE_IMAGE,
                                 apt_snapshot=settings.FACET_EXPORT_APT_SNAPSHOT)
    if result.rewritten:
        bundle.files["environment/Dockerfile"] = result.text.encode("utf-8")
    return result.base_image or bundle.config.docker_image


def write_archive(target: Path, *, query: str = "", parts=None,
                  progress: Callable[[int, int], None] | None = None) -> ArchiveResult:
    """Write the export of `query` to `target` (written beside it, then renamed into place)."""
    parts = normalise_parts(parts)
    f = export_filter(query)
    qs = selection(query).select_related("current_version", "scenario", "run")
    ids = list(qs.values_list("pk", flat=True))
    total = len(ids)
    if progress:
        progress(0, total)
    names = _Names()
    manifest: list[dict] = []
    hf_rows: list[dict] = []
    sft: list[dict] = []
    warnings: list[str] = []
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as raw:
            tar = _Tar(raw)
            tar.directory(ROOT)
            done = 0
            for start in range(0, total, CHUNK):
                tasks = list(qs.filter(pk__in=ids[start:start + CHUNK]).order_by("pk"))
                chunk = load_chunk(tasks)
                directories: dict[int, str] = {}
                for task in tasks:
                    version = task.current_version
                    bundle = version_bundle(version, name=task.name)
                    if harbor.content_hash(bundle) != version.content_hash:
                        warnings.append(f"task {task.pk}: its files hash to {harbor.content_hash(bundle)}, "
                                        f"not the version's {version.content_hash}")
                    base = portable_bundle(bundle)
                    directory = names(task.name, version.content_hash)
                    directories[task.pk] = directory
                    entries = harbor.task_dir_entries(bundle)
                    written = {p: d for p, d, _ in entries if d is not None}
                    if "harbor" in parts:
                        for path, data, mode in entries:
                            name = f"{ROOT}/tasks/{directory}/{path}"
                            if data is None:
                                tar.directory(name)
                            else:
                                tar.file(name, data, mode)
                    row = manifest_row(task, directory, chunk, bundle.config)
                    row.update(base_image=base, exported_content_hash=harbor.content_hash(bundle),
                               artifact_hash=bundle.config.version_hash)
                    manifest.append(row)
                    if "hf" in parts:
                        hf_rows.append({**row, "instruction": bundle.instruction,
                                        "task_toml": written["task.toml"].decode("utf-8"),
                                        # binary files are listed without content (their bytes are
                                        # in the Harbor part): the column holds text
                                        "files": [{"path": p, "content": None if p in version.binary_files
                                                   else written[p].decode("utf-8")} for p in sorted(written)
                                                  if p not in ("instruction.md", "task.toml")]})
                if "sft" in parts or "hf" in parts:
                    sft.extend(sft_rows(tasks, directories))
                done += len(tasks)
                if progress:
                    progress(done, total)
            if "manifest" in parts:
                tar.file(f"{ROOT}/manifest.jsonl", _jsonl(manifest))
                tar.file(f"{ROOT}/manifest.parquet", _parquet(manifest, MANIFEST_SCHEMA))
            if "sft" in parts:
                tar.file(f"{ROOT}/sft.jsonl", _jsonl(sft))
            if "hf" in parts:
                tar.file(f"{ROOT}/data/tasks.parquet", _parquet(hf_rows, TASKS_SCHEMA))
                tar.file(f"{ROOT}/data/sft.parquet", _parquet(sft, SFT_SCHEMA))
            result_summary = _summary(f, parts, manifest, sft, warnings)
            tar.file(f"{ROOT}/README.md", dataset_card(result_summary).encode("utf-8"))
            tar.close()
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    digest = hashlib.sha256()
    with open(target, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return ArchiveResult(path=target, sha256=digest.hexdigest(), bytes=target.stat().st_size, summary=result_summary)


def _summary(f: TaskFilter, parts: list[str], manifest: list[dict], sft: list[dict], warnings: list[str]) -> dict:
    domains = Counter(d for row in manifest for d in row["domains"])
    categories = Counter(c for row in manifest for c in row["categories"])
    uncategorised = sum(1 for row in manifest if not row["categories"] and not row["domains"])
    return {
        "filter": f.describe(),
        "query": f.query_string(with_view=False),
        "parts": parts,
        "tasks": len(manifest),
        "generated": sum(1 for r in manifest if r["origin"] == "generated"),
        "imported": sum(1 for r in manifest if r["origin"] == "imported"),
        "review_agreement": review_agreement(manifest),
        "approved": sum(1 for r in manifest if r["review_state"] == ReviewState.APPROVED),
        "with_rollouts": sum(1 for r in manifest if r["n_rollouts"]),
        "sft_trajectories": len(sft),
        "domains": dict(sorted(domains.items(), key=lambda kv: (-kv[1], kv[0]))),
        "categories": dict(sorted(categories.items(), key=lambda kv: (-kv[1], kv[0]))),
        "uncategorised": uncategorised,
        "warnings": warnings[:100],
    }
