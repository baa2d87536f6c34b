"""Datasets in and out: exporting a task selection as a reproducible archive (a Harbor dataset,
provenance manifests, a Hugging Face layout, SFT trajectories), and importing Harbor or
Terminal-Bench 1.x tasks made elsewhere so they enter review.

Export. `create_export` records an Export for a task-list query (tasks.filters; an empty query
means the approved tasks) and queues `run_export`, which claims it with a conditional UPDATE and
writes one .tar.gz under DATA_DIR/exports/. Every task contributes its current version: for an
approved task that is the version its standing decision names (a decision is bound to the
current version's content hash, tasks.summary.standing_decision). The archive holds, under
`facet-dataset/`:

    tasks/<slug>-<hash8>/   one Harbor task per task (harbor.task_dir_entries)
    manifest.jsonl, manifest.parquet   provenance, one row per task (MANIFEST_SCHEMA)
    data/tasks.parquet, data/sft.parquet, README.md   the Hugging Face layout and dataset card
    sft.jsonl   successful rollouts of the exported versions as chat messages

The archive is a function of the selection: tasks in id order, fixed tar metadata (mtime,
owner, modes), gzip without a name or time stamp, Parquet written with fixed options, and no
export time, export id or user anywhere in it. The same selection exported twice gives the
same bytes (a test checks it).

Import. `create_import` / `import_path` record a TaskImport for a directory, a dataset or an
archive (.tar.gz/.zip, unpacked by lib.archives, which never writes links, devices or paths
outside its destination). Each task directory found (task.toml or task.yaml) is read by
lib.harbor and stored in its own transaction as an imported Task with one TaskVersion: a task
that fails to read is reported in TaskImport.problems with the file, field and line and leaves
nothing behind; the others are imported. Content already present (same content hash) is
skipped and counted.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
import re
import shutil
import tarfile
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Callable, Iterable

import pyarrow as pa
import pyarrow.parquet as pq
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from facet_site.lib import archives, harbor
from facet_site.lib import rollout as rollout_lib
from facet_site.lib.stats import pass_at_k
from scenarios.models import PairSkill

from . import services, summary
from .filters import TaskFilter
from .models import (
    AuditEvent,
    Decision,
    Export,
    ExportStatus,
    LabelKind,
    ReviewState,
    Step,
    Task,
    TaskImport,
    TaskLabel,
    TaskStatus,
    TaskVersion,
    Trajectory,
    TrajectoryStatus,
    Trial,
    Turn,
    Validation,
    ValidationStatus,
)

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
STALE_AFTER = timedelta(hours=2)  # a running job not finished by then is taken over
GZIP_LEVEL = 6
PASS_AT = (1, 3)


class ExportError(ValueError):
    """An export that cannot be created (bad filter, unknown part)."""


class ImportRefused(ValueError):
    """An import that cannot start (unreadable source, wrong kind of upload)."""


# =================================================================================================
# Export: the selection
# =================================================================================================


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
            from . import jobs

            transaction.on_commit(lambda: jobs.run_export.delay(export.pk))
    return export


def archive_dir() -> Path:
    path = Path(settings.DATA_DIR) / "exports"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _claim(model, pk: int) -> bool:
    """Queued -> running with a conditional UPDATE, so two workers never take the same job. A job
    whose worker died (running, claimed long ago) is taken over: exports start again from
    scratch, imports skip the tasks already stored (same content hash, one transaction each)."""
    stale = timezone.now() - STALE_AFTER
    return bool(model.objects.filter(pk=pk).filter(
        Q(status=ExportStatus.QUEUED) | Q(status=ExportStatus.RUNNING, claimed_at__lt=stale)
    ).update(status=ExportStatus.RUNNING, claimed_at=timezone.now()))


def run_export(export_id: int) -> Export | None:
    """Claim the export and write its archive. Returns None when another worker has it or it is
    finished (a redelivered job is a no-op)."""
    if not _claim(Export, export_id):
        return None
    export = Export.objects.get(pk=export_id)
    target = archive_dir() / f"facet-export-{export.pk}.tar.gz"

    def progress(done: int, total: int) -> None:
        Export.objects.filter(pk=export_id).update(done=done, total=total)

    try:
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


# =================================================================================================
# Export: the records behind each task, in bulk
# =================================================================================================


def _slug(text: str) -> str:
    return (re.sub(r"[^a-z0-9]+", "-", (text or "").lower()).strip("-") or "task")[:50].strip("-") or "task"


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


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def _pass_at(n: int, c: int, k: int) -> float | None:
    return pass_at_k(n, c, k) if n >= k else None


@dataclass
class _Chunk:
    """What the manifest says about a chunk of tasks, from a fixed number of queries."""

    skills: dict[int, list[dict]] = field(default_factory=dict)  # pair id -> skills
    labels: dict[int, dict[str, list[str]]] = field(default_factory=dict)
    decisions: dict[int, list[dict]] = field(default_factory=dict)  # version id -> decisions
    validations: dict[int, dict] = field(default_factory=dict)  # version id -> latest finished validation
    rollouts: dict[int, list[dict]] = field(default_factory=dict)  # version id -> per-model counts


def _load_chunk(tasks: list[Task]) -> _Chunk:
    chunk = _Chunk()
    task_ids = [t.pk for t in tasks]
    versions = {t.current_version_id: t.current_version for t in tasks}
    pair_ids = [t.scenario.pair_id for t in tasks if t.scenario_id]
    for ps in (PairSkill.objects.filter(pair_id__in=pair_ids).select_related("skill__category")
               .order_by("pair_id", "position")):
        chunk.skills.setdefault(ps.pair_id, []).append({
            "key": ps.skill.key, "name": ps.skill.name,
            "category": ps.skill.category.slug if ps.skill.category_id else None})

    kinds = {LabelKind.TAG: "tags", LabelKind.CATEGORY: "categories", LabelKind.DOMAIN: "domains",
             LabelKind.FAMILY: "families"}
    for task_id, kind, value in (TaskLabel.objects.filter(task_id__in=task_ids)
                                 .order_by("task_id", "kind", "value").values_list("task_id", "kind", "value")):
        chunk.labels.setdefault(task_id, {k: [] for k in kinds.values()})[kinds[kind]].append(value)

    hashes = {v.content_hash: v.pk for v in versions.values()}
    rows = list(Decision.objects.filter(task_id__in=task_ids, content_hash__in=list(hashes))
                .select_related("author").order_by("id"))
    withdrawn = {d.withdraws_id for d in rows if d.withdraws_id}
    for d in rows:
        if d.withdraws_id:
            continue  # an undo's compensating entry: shown as `withdrawn` on the decision it undoes
        chunk.decisions.setdefault(hashes[d.content_hash], []).append({
            "id": d.pk, "verdict": d.verdict, "reason": d.reason, "comment": d.comment,
            "reviewer": d.author.get_username() if d.author_id else None, "bulk": d.bulk,
            "created_at": _iso(d.created_at), "withdrawn": d.pk in withdrawn})

    finished = [ValidationStatus.DONE, ValidationStatus.ERROR]
    latest: dict[int, Validation] = {}
    for v in Validation.objects.filter(version_id__in=list(versions), status__in=finished).order_by("id"):
        latest[v.version_id] = v
    trials: dict[int, list[dict]] = defaultdict(list)
    counted = (Trial.objects.filter(validation_id__in=[v.pk for v in latest.values()]).order_by("id")
               .annotate(n_tests=Count("tests"), n_passed=Count("tests", filter=Q(tests__outcome="passed"))))
    for t in counted:
        trials[t.validation_id].append({"kind": t.kind, "index": t.index, "reward": t.reward, "passed": t.passed,
                                        "failure": t.failure, "n_tests": t.n_tests, "n_passed": t.n_passed})
    for version_id, v in latest.items():
        chunk.validations[version_id] = {
            "id": v.pk, "status": v.status, "accepted": v.accepted, "failure": v.failure, "reason": v.reason,
            "finished_at": _iso(v.finished_at), "trials": trials.get(v.pk, [])}

    counts = (Trajectory.objects.filter(version_id__in=list(versions), status=TrajectoryStatus.DONE)
              .values("version_id", "model").order_by("version_id", "model")
              .annotate(n=Count("id"), c=Count("id", filter=Q(passed=True))))
    for row in counts:
        chunk.rollouts.setdefault(row["version_id"], []).append(row)
    return chunk


def _manifest_row(task: Task, directory: str, chunk: _Chunk, config: harbor.TaskConfig) -> dict:
    version = task.current_version
    labels = chunk.labels.get(task.pk, {"tags": [], "categories": [], "domains": [], "families": []})
    decisions = chunk.decisions.get(version.pk, [])
    standing = next((d for d in reversed(decisions) if not d["withdrawn"]), None)
    per_model = []
    n_all = c_all = 0
    for row in chunk.rollouts.get(version.pk, []):
        n, c = row["n"], row["c"]
        n_all, c_all = n_all + n, c_all + c
        per_model.append({"model": row["model"], "n": n, "passed": c,
                          **{f"pass_at_{k}": _pass_at(n, c, k) for k in PASS_AT}})
    return {
        "task_id": task.pk,
        "name": task.name,
        "directory": f"tasks/{directory}",
        "content_hash": version.content_hash,
        "version": version.number,
        "version_id": version.pk,
        "origin": "imported" if task.imported else "generated",
        "source": task.source,
        "status": task.status,
        "review_state": task.review_state,
        "standing_verdict": standing["verdict"] if standing else None,
        "strategy": task.strategy,
        "scenario_id": task.scenario_id,
        "scenario_title": task.scenario.title if task.scenario_id else None,
        "run_id": task.run_id,
        "run_name": task.run.name if task.run_id else None,
        "skills": chunk.skills.get(task.scenario.pair_id, []) if task.scenario_id else [],
        "tags": labels["tags"],
        "categories": labels["categories"],
        "domains": labels["domains"],
        "families": labels["families"],
        "difficulty": config.difficulty,
        "category": config.category,
        "n_tests": task.n_tests,
        "repair_rounds": task.repair_rounds,
        "validation": chunk.validations.get(version.pk),
        "decisions": decisions,
        "rollouts": per_model,
        "n_rollouts": n_all,
        "n_rollouts_passed": c_all,
        **{f"pass_at_{k}": _pass_at(n_all, c_all, k) for k in PASS_AT},
    }


_TRIAL = pa.struct([("kind", pa.string()), ("index", pa.int32()), ("reward", pa.float64()), ("passed", pa.bool_()),
                    ("failure", pa.string()), ("n_tests", pa.int32()), ("n_passed", pa.int32())])
MANIFEST_SCHEMA = pa.schema([
    ("task_id", pa.int64()), ("name", pa.string()), ("directory", pa.string()), ("content_hash", pa.string()),
    ("version", pa.int32()), ("version_id", pa.int64()), ("origin", pa.string()), ("source", pa.string()),
    ("status", pa.string()), ("review_state", pa.string()), ("standing_verdict", pa.string()),
    ("strategy", pa.string()), ("scenario_id", pa.int64()), ("scenario_title", pa.string()), ("run_id", pa.int64()),
    ("run_name", pa.string()),
    ("skills", pa.list_(pa.struct([("key", pa.string()), ("name", pa.string()), ("category", pa.string())]))),
    ("tags", pa.list_(pa.string())), ("categories", pa.list_(pa.string())), ("domains", pa.list_(pa.string())),
    ("families", pa.list_(pa.string())), ("difficulty", pa.string()), ("category", pa.string()),
    ("n_tests", pa.int32()), ("repair_rounds", pa.int32()),
    ("validation", pa.struct([("id", pa.int64()), ("status", pa.string()), ("accepted", pa.bool_()),
                              ("failure", pa.string()), ("reason", pa.string()), ("finished_at", pa.string()),
                              ("trials", pa.list_(_TRIAL))])),
    ("decisions", pa.list_(pa.struct([("id", pa.int64()), ("verdict", pa.string()), ("reason", pa.string()),
                                      ("comment", pa.string()), ("reviewer", pa.string()), ("bulk", pa.bool_()),
                                      ("created_at", pa.string()), ("withdrawn", pa.bool_())]))),
    ("rollouts", pa.list_(pa.struct([("model", pa.string()), ("n", pa.int32()), ("passed", pa.int32()),
                                     ("pass_at_1", pa.float64()), ("pass_at_3", pa.float64())]))),
    ("n_rollouts", pa.int32()), ("n_rollouts_passed", pa.int32()),
    ("pass_at_1", pa.float64()), ("pass_at_3", pa.float64()),
])
_FILES = pa.list_(pa.struct([("path", pa.string()), ("content", pa.string())]))
TASKS_SCHEMA = pa.schema(list(MANIFEST_SCHEMA) + [pa.field("instruction", pa.string()),
                                                  pa.field("task_toml", pa.string()), pa.field("files", _FILES)])
_MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
SFT_SCHEMA = pa.schema([
    ("task_id", pa.int64()), ("task", pa.string()), ("content_hash", pa.string()), ("trajectory_id", pa.int64()),
    ("model", pa.string()), ("agent", pa.string()), ("attempt", pa.int32()), ("reward", pa.float64()),
    ("n_turns", pa.int32()), ("messages", _MESSAGES),
])


# =================================================================================================
# Export: SFT trajectories
# =================================================================================================


def _workdir(files: dict[str, str]) -> str:
    """The agent's starting directory: the Dockerfile's last WORKDIR, as the rollout saw it."""
    found = re.findall(r"(?im)^\s*WORKDIR\s+(\S+)", files.get("environment/Dockerfile", ""))
    return found[-1] if found else "/"


def _asked(command: dict) -> dict:
    """A stored command as the model wrote it: Turn.commands also keeps what running it gave
    (exit code, seconds, kind), which the model never wrote and must not learn to."""
    if "keystrokes" in command and "command" not in command:  # Terminus-2's own keys (Harbor imports)
        return {k: command[k] for k in ("keystrokes", "duration") if command.get(k) is not None}
    out = {"command": command.get("command", "")}
    if command.get("timeout_s"):
        out["timeout_s"] = command["timeout_s"]
    return out


def sft_messages(trajectory: Trajectory, turns: list[Turn], instruction: str, workdir: str) -> list[dict]:
    """The rollout as the model saw it: the system prompt and the task (lib.rollout's texts, with
    the batch's budgets), then per turn the model's answer (its JSON object) and the terminal
    output it saw next. It ends with the model's last answer. Trajectories imported from a Harbor
    job ran another agent whose prompt we do not have: they start with the instruction alone."""
    batch = trajectory.batch
    if batch.source == "builtin":
        config = batch.config or {}
        cap = float(config.get("command_timeout_cap_s", 120))
        default = min(float(config.get("default_command_timeout_s", rollout_lib.DEFAULT_COMMAND_TIMEOUT_S)), cap)
        system = rollout_lib.SYSTEM_PROMPT.format(default_timeout=default, cap=cap)
        first = rollout_lib.INITIAL.format(instruction=instruction.strip(), cwd=workdir, max_turns=batch.max_turns,
                                           budget=rollout_lib._format_duration(float(batch.timeout_s)))
        messages = [{"role": "system", "content": system}, {"role": "user", "content": first}]
    else:
        messages = [{"role": "user", "content": instruction.strip()}]
    for i, turn in enumerate(turns):
        answer = {"analysis": turn.analysis, "plan": turn.plan,
                  "commands": [_asked(c) for c in turn.commands or [] if isinstance(c, dict)],
                  "task_complete": turn.task_complete}
        messages.append({"role": "assistant", "content": json.dumps(answer, ensure_ascii=False)})
        if i + 1 < len(turns):
            messages.append({"role": "user", "content": turn.output or "(no commands ran)"})
    return messages


def _sft_rows(tasks: list[Task], directories: dict[int, str]) -> list[dict]:
    versions = {t.current_version_id: t for t in tasks}
    trajectories = list(Trajectory.objects.filter(version_id__in=list(versions), status=TrajectoryStatus.DONE,
                                                  passed=True).select_related("batch").order_by("task_id", "id"))
    turns: dict[int, list[Turn]] = defaultdict(list)
    for turn in Turn.objects.filter(trajectory_id__in=[t.pk for t in trajectories]).order_by("trajectory_id", "index"):
        turns[turn.trajectory_id].append(turn)
    rows = []
    for traj in trajectories:
        if not turns.get(traj.pk):
            continue  # e.g. an imported Harbor trial without a trajectory file: nothing to learn from
        task = versions[traj.version_id]
        files = task.current_version.files
        rows.append({
            "task_id": task.pk, "task": directories[task.pk], "content_hash": task.current_version.content_hash,
            "trajectory_id": traj.pk, "model": traj.model, "agent": traj.agent, "attempt": traj.attempt,
            "reward": traj.reward, "n_turns": len(turns[traj.pk]),
            "messages": sft_messages(traj, turns[traj.pk], files.get("instruction.md", ""), _workdir(files)),
        })
    return rows


# =================================================================================================
# Export: writing the archive
# =================================================================================================


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
                chunk = _load_chunk(tasks)
                directories: dict[int, str] = {}
                for task in tasks:
                    version = task.current_version
                    bundle = services.bundle_of(task.name, version.files)
                    directory = names(task.name, version.content_hash)
                    directories[task.pk] = directory
                    entries = harbor.task_dir_entries(bundle)
                    written = {p: d for p, d, _ in entries if d is not None}
                    if harbor.content_hash(bundle) != version.content_hash:
                        warnings.append(f"task {task.pk}: written files hash to {harbor.content_hash(bundle)}, "
                                        f"not the version's {version.content_hash}")
                    if "harbor" in parts:
                        for path, data, mode in entries:
                            name = f"{ROOT}/tasks/{directory}/{path}"
                            if data is None:
                                tar.directory(name)
                            else:
                                tar.file(name, data, mode)
                    row = _manifest_row(task, directory, chunk, bundle.config)
                    manifest.append(row)
                    if "hf" in parts:
                        hf_rows.append({**row, "instruction": bundle.instruction,
                                        "task_toml": written["task.toml"].decode("utf-8"),
                                        "files": [{"path": p, "content": version.files[p]} for p in sorted(version.files)
                                                  if p not in ("instruction.md", "task.toml")]})
                if "sft" in parts or "hf" in parts:
                    sft.extend(_sft_rows(tasks, directories))
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
        "approved": sum(1 for r in manifest if r["review_state"] == ReviewState.APPROVED),
        "with_rollouts": sum(1 for r in manifest if r["n_rollouts"]),
        "sft_trajectories": len(sft),
        "domains": dict(sorted(domains.items(), key=lambda kv: (-kv[1], kv[0]))),
        "categories": dict(sorted(categories.items(), key=lambda kv: (-kv[1], kv[0]))),
        "uncategorised": uncategorised,
        "warnings": warnings[:100],
    }


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "n>1M"


def _md(text: str) -> str:
    """A value inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def dataset_card(s: dict) -> str:
    """README.md: the Hugging Face dataset card (YAML header with the Parquet configs), and what
    the archive holds. Made from the summary only, so it is as reproducible as the rest."""
    configs = []
    if "hf" in s["parts"]:
        configs = ["configs:",
                   "- config_name: tasks", "  default: true", "  data_files:", "  - split: train",
                   "    path: data/tasks.parquet",
                   "- config_name: sft", "  data_files:", "  - split: train", "    path: data/sft.parquet"]
    header = ["---", "pretty_name: facet terminal tasks", "language:", "- en", "tags:", "- terminal-agents",
              "- harbor", "- terminal-bench", "- facet", "size_categories:", f"- {_size_category(s['tasks'])}",
              *configs, "---", ""]
    lines = [
        "# facet terminal tasks", "",
        "Executable terminal tasks in the Harbor format (Terminal-Bench 2.x), synthesised from public agent skills "
        "and verified in Docker by facet (the FACET method), with their provenance and review record.", "",
        f"**Selection:** `{s['filter']}` (task-list query `{s['query'] or '(none)'}`).", "",
        "| | |", "|---|---|",
        f"| Tasks | {s['tasks']} |",
        f"| Generated / imported | {s['generated']} / {s['imported']} |",
        f"| Approved by a reviewer | {s['approved']} |",
        f"| With rollouts | {s['with_rollouts']} |",
        f"| Successful trajectories (SFT) | {s['sft_trajectories']} |", "",
        "## Categories", "",
    ]
    if s["domains"]:
        lines += ["| Top-level category | Tasks |", "|---|---|"]
        lines += [f"| {_md(k)} | {v} |" for k, v in s["domains"].items()]
        lines.append("")
    if s["categories"]:
        lines += ["| Category | Tasks |", "|---|---|"]
        lines += [f"| {_md(k)} | {v} |" for k, v in s["categories"].items()]
        lines.append("")
    if s["uncategorised"]:
        lines += [f"{s['uncategorised']} task(s) have no category.", ""]
    if not s["domains"] and not s["categories"] and not s["uncategorised"]:
        lines += ["No tasks.", ""]
    lines += ["## Contents", ""]
    if "harbor" in s["parts"]:
        lines += ["- `tasks/<name>/`: one Harbor task per directory (`task.toml`, `instruction.md`, `environment/`, "
                  "`solution/solve.sh`, `tests/test.sh`). Run them with `harbor run -p tasks -a oracle`. "
                  "Their Dockerfiles start `FROM` facet's base image (`facet-base:bookworm`, built by "
                  "`facet base-image`); have it on the Docker host that builds them."]
    if "manifest" in s["parts"]:
        lines += ["- `manifest.jsonl`, `manifest.parquet`: one row per task with its provenance: skills, categories, "
                  "scenario, run, strategy, version hash, last validation with its trials, review decisions with "
                  "reviewers, rollout counts and pass@1/pass@3 (null with fewer attempts than k)."]
    if "hf" in s["parts"]:
        lines += ["- `data/tasks.parquet`: the manifest columns plus `instruction`, `task_toml` and `files` "
                  "(path and text of every other file); `data/sft.parquet`: the SFT conversations."]
    if "sft" in s["parts"]:
        lines += ["- `sft.jsonl`: successful rollouts (reward 1) of the exported versions as chat messages "
                  "(system, user task, then the model's JSON answers and the terminal output it saw), with the "
                  "task, trajectory and model."]
    if "hf" in s["parts"]:
        lines += ["", "## Loading", "", "```python", "from datasets import load_dataset", "",
                  'tasks = load_dataset("parquet", data_files="data/tasks.parquet", split="train")',
                  'sft = load_dataset("parquet", data_files="data/sft.parquet", split="train")', "```"]
    if s["warnings"]:
        lines += ["", "## Warnings", ""] + [f"- {_md(w)}" for w in s["warnings"]]
    return "\n".join(header + lines) + "\n"


# =================================================================================================
# Import
# =================================================================================================

TASK_MARKERS = ("task.toml", "task.yaml", "instruction.md")
MAX_DEPTH = 4  # dataset/, facet-dataset/tasks/<task>, an archive's top folder: deep enough, never a crawl


def import_area(task_import: TaskImport) -> Path:
    return Path(settings.DATA_DIR) / "imports" / f"import-{task_import.pk}"


def _limit(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


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
            from . import jobs

            transaction.on_commit(lambda: jobs.run_import.delay(task_import.pk, validate))
    return task_import


def save_upload(*, uploaded, user, validate: bool = False) -> TaskImport:
    """Store an uploaded archive under DATA_DIR/imports/ and queue its import."""
    name = Path(uploaded.name or "").name
    if not archives.is_archive(Path(name)):
        raise ImportRefused(f"{name or 'file'}: upload a .tar.gz, .tgz, .tar or .zip archive of Harbor or "
                            "Terminal-Bench tasks")
    limit = _limit("FACET_IMPORT_MAX_UPLOAD_BYTES", settings.FACET_INGEST_MAX_UPLOAD_BYTES)
    if uploaded.size > limit:
        raise ImportRefused(f"{name}: {uploaded.size:,} bytes is over the upload limit of {limit:,} bytes")
    folder = Path(settings.DATA_DIR) / "imports" / "uploads" / hashlib.sha256(
        f"{timezone.now().isoformat()}{name}{user.pk}".encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
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


def _text_files(bundle: harbor.TaskBundle) -> dict[str, str]:
    """The task as facet stores a version: path -> text, instruction.md and task.toml included."""
    files: dict[str, str] = {}
    for path, data in sorted(bundle.files.items()):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise harbor.TaskFormatError(path, f"is binary (not UTF-8 at byte {exc.start}); facet keeps task files "
                                               "as text, so this task cannot be imported") from None
        if "\x00" in text:
            raise harbor.TaskFormatError(path, "is binary (contains NUL bytes); facet keeps task files as text, "
                                               "so this task cannot be imported")
        files[path] = text
    files["instruction.md"] = bundle.instruction
    files["task.toml"] = harbor.canonical_task_toml(bundle)
    return files


def _problem(task: str | None, error: str, *, file: str | None = None, field: str | None = None,
             line: int | None = None) -> dict:
    return {"task": task, "file": file, "field": field, "line": line, "error": error}


@dataclass
class ImportOutcome:
    imported: list[Task] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)


def import_task_dir(task_dir: Path, *, source: str, name: str | None = None, task_import: TaskImport | None = None,
                    validate: bool = False) -> Task | None:
    """One task directory as an imported task with one version, in one transaction; None when a
    version with the same content already exists. Raises harbor.TaskFormatError (file, field,
    line) when the directory is not a task facet can store; nothing is stored then."""
    bundle = harbor.read_task_dir(Path(task_dir))
    files = _text_files(bundle)
    name = (name or bundle.name)[:200]
    digest = harbor.content_hash(services.bundle_of(name, files))
    if TaskVersion.objects.filter(content_hash=digest).exists():
        return None
    notes = ""
    if bundle.source_format == "terminal-bench-1":
        notes = "Converted from Terminal-Bench 1.x: " + "; ".join(bundle.notes)
    with transaction.atomic():
        task = Task.objects.create(name=name, imported=True, source=source[:300], status=TaskStatus.VALIDATING,
                                   step=Step.DONE, message=notes[:5000])
        version = services.create_version(task, files)
        Task.objects.filter(pk=task.pk).update(current_version=version)
        task.current_version = version
        summary.set_labels(task)
        if task_import is not None:
            task_import.tasks.add(task)
        if validate:
            from . import jobs

            validation = services.request_validation(version, user=task_import.created_by if task_import else None)
            transaction.on_commit(lambda: jobs.docker_validate.delay(validation.pk))
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
            task = import_task_dir(d, source=where, name=names.get(d.resolve()), task_import=task_import,
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
    if not _claim(TaskImport, import_id):
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
                                    max_total_bytes=_limit("FACET_IMPORT_MAX_ARCHIVE_BYTES", 1_000_000_000),
                                    max_member_bytes=_limit("FACET_IMPORT_MAX_FILE_BYTES", harbor.DEFAULT_MAX_FILE_BYTES),
                                    max_entries=_limit("FACET_IMPORT_MAX_ENTRIES", 200_000))
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
