"""Ingestion workflow: read a source, normalise, filter, classify, embed and store skills.

Each chunk of skills is stored in one transaction, so a failure never leaves a half-ingested
skill; problems with single files are recorded on the batch and the rest of the batch goes on.

The per-chunk storing is in storing.py, review in review.py, re-runs in refresh.py, and what the
pages read (lists, search, neighbours, the taxonomy table) in queries.py.
"""
from __future__ import annotations

import hashlib
import logging
import shutil
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from facet_site import leases
from facet_site.lib import archives, skill_safety
from facet_site.lib.embedding import Embedder, get_embedder
from facet_site.lib.skillformat import ParsedSkill, SourceProblem, discover

from .models import (
    Category,
    CategorySource,
    IngestBatch,
    IngestBatchStatus,
    IngestProblem,
    ProblemSeverity,
    Skill,
    SkillStatus,
    Verdict,
    VerdictKind,
)

log = logging.getLogger(__name__)

# Softmax temperature over cosine similarities: turns a similarity margin into a confidence.
CONFIDENCE_TEMPERATURE = 0.05


class IngestError(Exception):
    """The source as a whole cannot be read (missing path, unsupported file type)."""


# --- sources ----------------------------------------------------------------------------------


def ingest_areas() -> Path:
    return settings.DATA_DIR / "ingest"


def ingest_area(batch: IngestBatch) -> Path:
    return ingest_areas() / f"batch-{batch.pk}"


def remove_leftovers(*, upload_tmp_older_than_s: float = 3600) -> list[str]:
    """Extraction areas no running batch owns (finished, failed, or its worker died: a resumed batch
    extracts again) and upload temp files a killed web process left. A starting worker calls this.
    Returns what was removed."""
    removed: list[str] = []
    live = {f"batch-{pk}" for pk in IngestBatch.objects.filter(status=IngestBatchStatus.RUNNING)
            .exclude(leases.stalled(IngestBatchStatus.RUNNING)).values_list("pk", flat=True)}
    if ingest_areas().is_dir():
        for area in ingest_areas().iterdir():
            if area.name not in live:
                shutil.rmtree(area, ignore_errors=True) if area.is_dir() else area.unlink(missing_ok=True)
                removed.append(str(area))
    tmp = Path(settings.FILE_UPLOAD_TEMP_DIR)
    cutoff = time.time() - upload_tmp_older_than_s  # younger ones may be uploads in progress
    for f in tmp.iterdir() if tmp.is_dir() else []:
        if f.is_file() and f.stat().st_mtime < cutoff:
            f.unlink(missing_ok=True)
            removed.append(str(f))
    return removed


def _unpack_within_cap(batch: IngestBatch, source: Path, root: Path) -> list[SourceProblem]:
    """Unpack into the batch's area, within the archive limit and what the total ingest-area cap
    leaves after the other batches' areas; past the cap the batch fails with a clear message."""
    cap = settings.FACET_INGEST_AREA_MAX_BYTES
    others = sum(archives.tree_bytes(a) for a in ingest_areas().iterdir() if a != root) if ingest_areas().is_dir() else 0
    room = cap - others
    if room <= 0:
        raise IngestError(f"{source.name}: the ingest area is full ({others:,} bytes of other batches' extracted "
                          f"files, cap {cap:,} bytes, FACET_INGEST_AREA_MAX_BYTES); retry once they finish")
    limit = min(settings.FACET_INGEST_MAX_ARCHIVE_BYTES, room)
    problems = archives.unpack(source, root, max_total_bytes=limit)
    if limit < settings.FACET_INGEST_MAX_ARCHIVE_BYTES and any(f"beyond {limit} bytes" in p.message for p in problems):
        shutil.rmtree(root, ignore_errors=True)
        raise IngestError(f"{source.name}: extracting it would pass the ingest area's cap of {cap:,} bytes "
                          f"(FACET_INGEST_AREA_MAX_BYTES; other batches hold {others:,}); nothing was ingested")
    return problems


def source_label_for(path: Path) -> str:
    name = path.name
    for suffix in (".tar.gz", ".tgz", ".zip", ".tar"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def create_batch(*, path: Path, origin: str = "cli", user=None, label: str | None = None) -> IngestBatch:
    return IngestBatch.objects.create(
        source_label=label or source_label_for(path), source_path=str(path), origin=origin, created_by=user
    )


def retry_batch(batch: IngestBatch) -> bool:
    """Queue a failed batch, or one whose worker died, again (the Retry button, resume_stalled).
    False when it is neither."""
    from . import jobs  # at call time: jobs imports this module

    if not IngestBatch.retry(batch.pk):
        return False
    jobs.ingest_batch.delay_on_commit(batch.pk)
    return True


def resume_stalled() -> list[int]:
    """Batches whose worker died (or whose message was lost) go back to the queue, once a lease."""
    from . import jobs  # at call time: jobs imports this module

    ids = leases.requeue_stalled(IngestBatch, queued=IngestBatchStatus.QUEUED, running=IngestBatchStatus.RUNNING,
                                 message_field="message")
    for pk in ids:
        jobs.ingest_batch.delay_on_commit(pk)
    return ids


def identity_key(parsed: ParsedSkill, source_label: str) -> str:
    if parsed.provenance.get("source_kind") == "clawhub" and parsed.owner and parsed.slug:
        return f"clawhub:{parsed.owner}/{parsed.slug}"
    return f"{source_label}:{parsed.key}"


# --- taxonomy and embeddings ------------------------------------------------------------------

_category_cache: dict[tuple, tuple[list[int], np.ndarray]] = {}


def embedding_text(*, name: str, description: str) -> str:
    return f"{name}: {description}".strip()


def embedder() -> Embedder:
    """The process's embedder for the configured backend (facet_site.lib.embedding keeps the one cache)."""
    return get_embedder(backend=settings.FACET_EMBEDDING_BACKEND, models_dir=settings.FACET_MODELS_DIR)


def embed(texts: list[str]) -> np.ndarray:
    return embedder().encode(texts)


def category_vectors() -> tuple[list[int], np.ndarray]:
    """Fine-grained categories and their description embeddings, cached per process and taxonomy."""
    cats = list(Category.objects.filter(parent__isnull=False).order_by("id").values_list("id", "name", "description"))
    key = (settings.FACET_EMBEDDING_BACKEND, tuple(cats))
    if key not in _category_cache:
        vectors = embed([f"{name}. {description}" for _, name, description in cats]) if cats else np.zeros((0, 384), np.float32)
        _category_cache.clear()
        _category_cache[key] = ([c[0] for c in cats], vectors)
    return _category_cache[key]


def classify(vectors: np.ndarray) -> list[tuple[int | None, float | None]]:
    """Zero-shot category per vector: the most similar category description, with a softmax confidence."""
    ids, cat_vectors = category_vectors()
    if not ids or len(vectors) == 0:
        return [(None, None)] * len(vectors)
    sims = vectors @ cat_vectors.T
    scaled = sims / CONFIDENCE_TEMPERATURE
    scaled -= scaled.max(axis=1, keepdims=True)
    probs = np.exp(scaled)
    probs /= probs.sum(axis=1, keepdims=True)
    best = sims.argmax(axis=1)
    return [(ids[b], float(round(probs[i, b], 4))) for i, b in enumerate(best)]


class AcceptedIndex:
    """Exact inner-product index over kept (accepted or held) current skills, for near-duplicate
    detection. A copy displaced by a better duplicate is discarded (skipped by searches)."""

    def __init__(self, dim: int = 384):
        import faiss

        self._index = faiss.IndexFlatIP(dim)
        self._ids: list[int] = []
        self._discarded: set[int] = set()

    @classmethod
    def load(cls) -> "AcceptedIndex":
        index = cls()
        rows = (Skill.objects.current().filter(status__in=[SkillStatus.ACCEPTED, SkillStatus.HELD])
                .exclude(embedding=None).values_list("id", "embedding"))
        ids, vecs = [], []
        for skill_id, blob in rows.iterator(chunk_size=2000):
            ids.append(skill_id)
            vecs.append(np.frombuffer(bytes(blob), dtype=np.float32))
        if ids:
            index.add(ids, np.vstack(vecs))
        return index

    def add(self, ids: list[int], vectors: np.ndarray):
        if len(ids):
            self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))
            self._ids.extend(ids)

    def discard(self, skill_id: int) -> None:
        self._discarded.add(skill_id)

    def is_discarded(self, skill_id: int) -> bool:
        return skill_id in self._discarded

    def best_match(self, vectors: np.ndarray) -> list[tuple[int | None, float]]:
        if not self._ids or len(vectors) == 0:
            return [(None, 0.0)] * len(vectors)
        k = min(len(self._ids), 1 + min(len(self._discarded), 15))
        scores, positions = self._index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
        out = []
        for row_scores, row_positions in zip(scores, positions):
            found = next(((self._ids[p], float(s)) for s, p in zip(row_scores, row_positions)
                          if p >= 0 and self._ids[p] not in self._discarded), (None, 0.0))
            out.append(found)
        return out


# --- ingestion --------------------------------------------------------------------------------


@dataclass
class IngestSummary:
    discovered: int = 0
    ingested: int = 0
    updated: int = 0
    unchanged: int = 0
    accepted: int = 0
    held: int = 0  # suspicious by the safety scan, waiting for a reviewer
    displaced: int = 0  # stored copies that lost to a better duplicate of this batch
    duplicates: int = 0
    rejected_by_reason: Counter = field(default_factory=Counter)
    errors: list[dict] = field(default_factory=list)
    warnings: int = 0
    seconds: Counter = field(default_factory=Counter)  # wall time per stage, for the benchmark and the batch page

    @contextmanager
    def timing(self, stage: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - start

    def as_dict(self) -> dict:
        return {
            "discovered": self.discovered,
            "ingested": self.ingested,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "accepted": self.accepted,
            "held": self.held,
            "displaced": self.displaced,
            "duplicates": self.duplicates,
            "rejected_by_reason": dict(sorted(self.rejected_by_reason.items())),
            "errors": len(self.errors),
            "warnings": self.warnings,
            "seconds": {k: round(v, 3) for k, v in sorted(self.seconds.items())},
        }


def _record_problem(batch: IngestBatch, summary: IngestSummary, problem: SourceProblem):
    summary.errors.append({"path": problem.path, "field": problem.field, "message": problem.message})
    IngestProblem.objects.create(batch=batch, path=problem.path[:1000], field=problem.field[:100], message=problem.message)


def _record_warnings(batch: IngestBatch, summary: IngestSummary, parsed: ParsedSkill):
    if parsed.warnings:
        summary.warnings += len(parsed.warnings)
        IngestProblem.objects.bulk_create([
            IngestProblem(batch=batch, severity=ProblemSeverity.WARNING, path=parsed.skill_md_path[:1000], message=w)
            for w in parsed.warnings
        ])


def _search_document(p: ParsedSkill) -> str:
    parts = [p.name, p.description, " ".join(p.tools), " ".join(p.steps[:20]), p.owner, p.slug]
    return "\n".join(x for x in parts if x)[:20000]


def _skill_fields(p: ParsedSkill) -> dict:
    return dict(
        source_kind=p.provenance.get("source_kind", "directory"),
        owner=p.owner[:200],
        slug=p.slug[:200],
        name=(p.name or p.slug or p.key)[:200],
        description=p.description,
        declared_version=str(p.version or "")[:100],
        license=str(p.license or "")[:200],
        homepage=str(p.homepage or "")[:500] if str(p.homepage or "").startswith(("http://", "https://")) else "",
        frontmatter=p.frontmatter,
        body=p.body,
        required_tools=p.tools,
        required_bins=sorted(set(p.required_bins) | set(p.any_bins)),
        required_env=p.required_env,
        install=p.install,
        os_support=p.os,
        inputs=p.inputs,
        outputs=p.outputs,
        steps=p.steps,
        provenance=p.provenance,
        content_hash=p.content_hash,
        search_document=_search_document(p),
    )


def _count_stored_earlier(summary: IngestSummary, skills: list[Skill], seen_hashes: dict[str, int]) -> None:
    """A resumed batch (its worker died mid-way) meets the skills its first attempt stored: they
    count as that attempt counted them, so the summary is the one an uninterrupted run gives. A
    verdict that displaced a copy later (evidence "displaced_by") was counted as a displacement."""
    kinds: dict[int, set[str]] = {}
    for skill_id, kind, evidence in Verdict.objects.filter(skill__in=skills).values_list("skill_id", "kind", "evidence"):
        if isinstance(evidence, dict) and "displaced_by" in evidence:
            summary.displaced += 1
            continue
        kinds.setdefault(skill_id, set()).add(kind)
    for skill in skills:
        seen_hashes.setdefault(skill.content_hash, skill.id)
        if skill.previous_version_id is None:
            summary.ingested += 1
        else:
            summary.updated += 1
        found = kinds.get(skill.id, set())
        for kind in sorted(found):
            summary.rejected_by_reason[kind] += 1
        if found & {VerdictKind.DUPLICATE, VerdictKind.NEAR_DUPLICATE}:
            summary.duplicates += 1
        if not found:
            if skill.status == SkillStatus.HELD:
                summary.held += 1
            else:
                summary.accepted += 1


def _store_chunk(batch: IngestBatch, chunk: list[ParsedSkill], index: AcceptedIndex, summary: IngestSummary,
                 seen_hashes: dict[str, int]):
    keys = [identity_key(p, batch.source_label) for p in chunk]
    current = {s.key: s for s in Skill.objects.current().filter(key__in=keys)}

    fresh: list[tuple[str, ParsedSkill, Skill | None]] = []
    earlier: list[Skill] = []
    for key, parsed in zip(keys, chunk):
        existing = current.get(key)
        if existing is not None and existing.content_hash == parsed.content_hash:
            if existing.batch_id == batch.pk:
                earlier.append(existing)
            else:
                summary.unchanged += 1
            continue
        fresh.append((key, parsed, existing))
    _count_stored_earlier(summary, earlier, seen_hashes)
    if not fresh:
        return
    from . import storing  # at call time: storing uses this module's embedder and record helpers

    storing.store_fresh(batch, fresh, index, summary, seen_hashes)


def run_ingest(batch: IngestBatch, *, progress: Callable[[int, int], None] | None = None) -> IngestSummary:
    """Ingest the batch's source. Per-file problems are recorded; only an unreadable source raises."""
    summary = IngestSummary()
    source = Path(batch.source_path)
    # A resumed batch records its problems again; the first attempt's would be counted twice.
    IngestProblem.objects.filter(batch=batch).delete()
    if not source.exists():
        raise IngestError(f"{source}: no such file or directory")
    if source.is_file():
        if not archives.is_archive(source):
            raise IngestError(f"{source}: not a directory, .zip, .tar or .tar.gz archive")
        root = ingest_area(batch)
        if root.exists():
            shutil.rmtree(root)  # a resumed batch extracts again from a clean area
        root.mkdir(parents=True)
        for problem in _unpack_within_cap(batch, source, root):
            _record_problem(batch, summary, problem)
    elif source.is_dir():
        root = source
    else:
        raise IngestError(f"{source}: not a regular file or directory")

    with summary.timing("parse"):
        # The middle of a text file too large to keep is scanned as it is read (only findings are kept)
        items = list(discover(root, max_file_bytes=settings.FACET_INGEST_MAX_FILE_BYTES,
                              scan_text=skill_safety.scan_text_part))
    summary.discovered = sum(1 for x in items if isinstance(x, ParsedSkill))
    IngestBatch.objects.filter(pk=batch.pk).update(total=len(items), processed=0)
    if progress:
        progress(0, len(items))

    index = AcceptedIndex.load()
    seen_hashes: dict[str, int] = {}
    done = 0
    chunk: list[ParsedSkill] = []

    def flush():
        nonlocal chunk, done
        if chunk:
            start = time.perf_counter()
            _store_chunk(batch, chunk, index, summary, seen_hashes)
            # everything in the chunk that is not embedding, classification or filtering is storage
            summary.seconds["store"] += time.perf_counter() - start
            done += len(chunk)
            chunk = []
            IngestBatch.objects.filter(pk=batch.pk).update(processed=done, summary=summary.as_dict())
            if progress:
                progress(done, len(items))

    from . import storing  # at call time: storing imports this module

    for item in items:
        if isinstance(item, ParsedSkill) and (refused := storing.nul_problem(item)):
            item = refused  # refused on its own, with the reason; the rest of the batch is stored
        if isinstance(item, SourceProblem):
            _record_problem(batch, summary, item)
            done += 1
            continue
        _record_warnings(batch, summary, item)
        chunk.append(item)
        if len(chunk) >= settings.FACET_INGEST_CHUNK_SIZE:
            flush()
    flush()
    summary.seconds["store"] -= (summary.seconds["embed"] + summary.seconds["classify"] + summary.seconds["filter"]
                                 + summary.seconds["safety"])
    tainted = storing.taint_publishers()
    moved = Skill.objects.filter(pk__in=tainted, batch=batch, status=SkillStatus.HELD).count()
    summary.accepted -= moved
    summary.held += moved
    IngestBatch.objects.filter(pk=batch.pk).update(processed=len(items), summary=summary.as_dict())
    return summary


def execute_batch(batch_id: int, *, progress=None) -> IngestBatch | None:
    """Claim and run one batch, recording success or a clear failure on it. Its extraction area
    is removed afterwards, whatever the outcome (the uploaded archive stays, for a retry)."""
    if not IngestBatch.claim(batch_id):
        return None
    batch = IngestBatch.objects.get(pk=batch_id)
    try:
        with leases.heartbeat(IngestBatch, batch_id, running=IngestBatchStatus.RUNNING):
            summary = run_ingest(batch, progress=progress)
    except IngestError as exc:
        IngestBatch.objects.filter(pk=batch_id).update(status=IngestBatchStatus.FAILED, message=str(exc), finished_at=timezone.now())
    except Exception as exc:  # recorded on the batch so the page shows it; the worker goes on
        log.exception("ingest batch %s failed", batch_id)
        IngestBatch.objects.filter(pk=batch_id).update(
            status=IngestBatchStatus.FAILED, message=f"Unexpected error: {exc.__class__.__name__}: {exc}", finished_at=timezone.now()
        )
    else:
        IngestBatch.objects.filter(pk=batch_id).update(
            status=IngestBatchStatus.SUCCEEDED, summary=summary.as_dict(), finished_at=timezone.now(),
            message=f"{summary.ingested} new, {summary.updated} updated, {summary.unchanged} unchanged, "
                    f"{summary.accepted} accepted, {len(summary.errors)} errors, {summary.warnings} warnings",
        )
    finally:
        shutil.rmtree(ingest_area(batch), ignore_errors=True)
    return IngestBatch.objects.get(pk=batch_id)


def ingest_path(path: Path, *, origin: str = "cli", user=None, label: str | None = None, progress=None) -> IngestBatch:
    """Create a batch for `path` and run it in this process (the CLI and tests use this)."""
    batch = create_batch(path=Path(path).resolve(), origin=origin, user=user, label=label)
    return execute_batch(batch.pk, progress=progress)


# --- reviewer actions -------------------------------------------------------------------------


def override_category(*, skill: Skill, category: Category, user) -> Skill:
    if category.parent_id is None:
        raise ValueError("category: choose a fine-grained category, not a top-level family")
    Skill.objects.filter(pk=skill.pk).update(
        category=category, category_source=CategorySource.OVERRIDE, category_confidence=None,
        category_overridden_by=user, category_overridden_at=timezone.now(),
    )
    skill.refresh_from_db()
    category_changed(skill.pk)
    return skill


def category_changed(skill_id: int) -> None:
    """Tell the app that labels tasks (by the job named in settings) that a skill's category
    changed, once the change commits; task labels and analytics follow the skill's category."""
    from facet_site.celery import app

    # A signature's delay runs in-process when jobs are eager, where send_task would only queue.
    transaction.on_commit(lambda: app.signature(settings.FACET_CATEGORY_CHANGED_JOB, args=[skill_id]).delay())


class UploadError(ValueError):
    pass


ALLOWED_UPLOADS = (".zip", ".tar.gz", ".tgz", ".tar")


def save_upload(*, uploaded, user, origin: str = "upload") -> IngestBatch:
    """Store an uploaded archive in the ingest area and queue its batch for a worker."""
    from . import jobs  # at call time: jobs imports this module

    name = Path(uploaded.name or "").name
    if not name.lower().endswith(ALLOWED_UPLOADS):
        raise UploadError(f"{name or 'file'}: upload a .zip, .tar.gz or .tar archive of skills")
    if uploaded.size > settings.FACET_INGEST_MAX_UPLOAD_BYTES:
        raise UploadError(
            f"{name}: {uploaded.size:,} bytes is over the upload limit of {settings.FACET_INGEST_MAX_UPLOAD_BYTES:,} bytes"
        )
    folder = settings.DATA_DIR / "uploads" / hashlib.sha256(f"{timezone.now().isoformat()}{name}{user.pk}".encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    with open(target, "wb") as out:
        for piece in uploaded.chunks():
            out.write(piece)
    with transaction.atomic():
        batch = create_batch(path=target, origin=origin, user=user)
        jobs.ingest_batch.delay_on_commit(batch.pk)
    return batch
