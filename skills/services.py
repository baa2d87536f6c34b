"""Ingestion workflow: read a source, normalise, filter, classify, embed and store skills.

Each chunk of skills is stored in one transaction, so a failure never leaves a half-ingested
skill; problems with single files are recorded on the batch and the rest of the batch goes on.
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
from typing import Callable, Iterable

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F, Max, Q
from django.utils import timezone

from facet_site.lib import archives, skill_filters
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
    SkillFile,
    SkillStatus,
    Verdict,
    VerdictKind,
)

log = logging.getLogger(__name__)

CHUNK_SIZE = 256
# Softmax temperature over cosine similarities: turns a similarity margin into a confidence.
CONFIDENCE_TEMPERATURE = 0.05


class IngestError(Exception):
    """The source as a whole cannot be read (missing path, unsupported file type)."""


# --- sources ----------------------------------------------------------------------------------


def ingest_area(batch: IngestBatch) -> Path:
    return settings.DATA_DIR / "ingest" / f"batch-{batch.pk}"


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


def claim_batch(batch_id: int) -> bool:
    """Take a queued batch for this worker; False when another worker already has it (or it is done)."""
    return bool(
        IngestBatch.objects.filter(pk=batch_id, status=IngestBatchStatus.QUEUED).update(
            status=IngestBatchStatus.RUNNING, started_at=timezone.now()
        )
    )


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
    """Exact inner-product index over accepted current skills, for near-duplicate detection."""

    def __init__(self, dim: int = 384):
        import faiss

        self._index = faiss.IndexFlatIP(dim)
        self._ids: list[int] = []

    @classmethod
    def load(cls) -> "AcceptedIndex":
        index = cls()
        rows = Skill.objects.current().accepted().exclude(embedding=None).values_list("id", "embedding")
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

    def best_match(self, vectors: np.ndarray) -> list[tuple[int | None, float]]:
        if not self._ids or len(vectors) == 0:
            return [(None, 0.0)] * len(vectors)
        scores, positions = self._index.search(np.ascontiguousarray(vectors, dtype=np.float32), 1)
        return [(self._ids[p[0]] if p[0] >= 0 else None, float(s[0])) for s, p in zip(scores, positions)]


# --- ingestion --------------------------------------------------------------------------------


@dataclass
class IngestSummary:
    discovered: int = 0
    ingested: int = 0
    updated: int = 0
    unchanged: int = 0
    accepted: int = 0
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


def _store_chunk(batch: IngestBatch, chunk: list[ParsedSkill], index: AcceptedIndex, summary: IngestSummary,
                 seen_hashes: dict[str, int]):
    keys = [identity_key(p, batch.source_label) for p in chunk]
    current = {s.key: s for s in Skill.objects.current().filter(key__in=keys)}

    fresh: list[tuple[str, ParsedSkill, Skill | None]] = []
    for key, parsed in zip(keys, chunk):
        existing = current.get(key)
        if existing is not None and existing.content_hash == parsed.content_hash:
            summary.unchanged += 1
            continue
        fresh.append((key, parsed, existing))
    if not fresh:
        return

    readable = [i for i, (_, p, _) in enumerate(fresh) if not p.unreadable_reason]
    vectors = np.zeros((len(fresh), 384), dtype=np.float32)
    with summary.timing("embed"):
        if readable:
            vectors[readable] = embed([embedding_text(name=fresh[i][1].name, description=fresh[i][1].description) for i in readable])
    with summary.timing("classify"):
        categories = classify(vectors)
    with summary.timing("filter"):
        findings_by_item = [skill_filters.evaluate(p) for _, p, _ in fresh]

    hashes = [p.content_hash for _, p, _ in fresh]
    stored_by_hash = dict(
        Skill.objects.current().filter(content_hash__in=hashes).exclude(key__in=[k for k, _, _ in fresh])
        .order_by("id").values_list("content_hash", "id")
    )
    matches = index.best_match(vectors)
    threshold = settings.FACET_NEAR_DUPLICATE_THRESHOLD

    accepted_in_chunk: dict[int, int] = {}
    with transaction.atomic():
        for i, (key, parsed, existing) in enumerate(fresh):
            findings = findings_by_item[i]
            verdicts: list[Verdict] = [
                Verdict(kind=f.kind, reason=f.reason, evidence=f.evidence if isinstance(f.evidence, dict) else {"match": f.evidence})
                for f in findings
            ]
            duplicate_of = stored_by_hash.get(parsed.content_hash) or seen_hashes.get(parsed.content_hash)
            if duplicate_of:
                verdicts.append(Verdict(
                    kind=VerdictKind.DUPLICATE, duplicate_of_id=duplicate_of,
                    reason=f"Same content hash as skill #{duplicate_of}.", evidence={"content_hash": parsed.content_hash},
                ))
            elif i in readable:
                match_id, score = matches[i]
                # Near-duplicates inside this chunk: compare with earlier accepted items of the chunk too.
                for j, accepted_id in accepted_in_chunk.items():
                    s = float(vectors[i] @ vectors[j])
                    if s > score:
                        match_id, score = accepted_id, s
                if match_id is not None and score >= threshold and match_id != getattr(existing, "id", None):
                    verdicts.append(Verdict(
                        kind=VerdictKind.NEAR_DUPLICATE, duplicate_of_id=match_id,
                        reason=f"Embedding cosine {score:.3f} to skill #{match_id} (threshold {threshold}).",
                        evidence={"cosine": round(score, 4), "threshold": threshold},
                    ))

            fields = _skill_fields(parsed)
            category_id, confidence = categories[i] if i in readable else (None, None)
            version_number = 1
            carried = {}
            if existing is not None:
                version_number = existing.version_number + 1
                if existing.category_source == CategorySource.OVERRIDE:
                    # A reviewer's decision outlives a re-publication of the same skill.
                    carried = dict(
                        category_id=existing.category_id, category_source=CategorySource.OVERRIDE,
                        category_overridden_by_id=existing.category_overridden_by_id,
                        category_overridden_at=existing.category_overridden_at,
                    )
                Skill.objects.filter(pk=existing.pk).update(is_current=False)
            category_fields = carried or dict(
                category_id=category_id, category_confidence=confidence,
                category_source=CategorySource.EMBEDDING if category_id else "",
            )
            skill = Skill.objects.create(
                key=key, version_number=version_number, is_current=True, previous_version=existing,
                source=batch.source_label[:200], batch=batch,
                status=SkillStatus.REJECTED if verdicts else SkillStatus.ACCEPTED,
                embedding=vectors[i].tobytes() if i in readable else None,
                embedding_model=embedder().signature if i in readable else "",
                **fields, **category_fields,
            )
            SkillFile.objects.bulk_create([
                SkillFile(skill=skill, path=f.path[:500], size=f.size, sha256=f.sha256, text=f.text, is_binary=f.is_binary)
                for f in parsed.files
            ])
            for v in verdicts:
                v.skill = skill
            Verdict.objects.bulk_create(verdicts)

            seen_hashes.setdefault(parsed.content_hash, skill.id)
            if existing is None:
                summary.ingested += 1
            else:
                summary.updated += 1
            if verdicts:
                for kind in sorted({v.kind for v in verdicts}):
                    summary.rejected_by_reason[kind] += 1
                if any(v.kind in (VerdictKind.DUPLICATE, VerdictKind.NEAR_DUPLICATE) for v in verdicts):
                    summary.duplicates += 1
            else:
                summary.accepted += 1
                accepted_in_chunk[i] = skill.id
                index.add([skill.id], vectors[i : i + 1])


def run_ingest(batch: IngestBatch, *, progress: Callable[[int, int], None] | None = None) -> IngestSummary:
    """Ingest the batch's source. Per-file problems are recorded; only an unreadable source raises."""
    summary = IngestSummary()
    source = Path(batch.source_path)
    if not source.exists():
        raise IngestError(f"{source}: no such file or directory")
    if source.is_file():
        if not archives.is_archive(source):
            raise IngestError(f"{source}: not a directory, .zip, .tar or .tar.gz archive")
        root = ingest_area(batch)
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        for problem in archives.unpack(source, root, max_total_bytes=settings.FACET_INGEST_MAX_ARCHIVE_BYTES):
            _record_problem(batch, summary, problem)
    elif source.is_dir():
        root = source
    else:
        raise IngestError(f"{source}: not a regular file or directory")

    with summary.timing("parse"):
        items = list(discover(root, max_file_bytes=settings.FACET_INGEST_MAX_FILE_BYTES))
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

    for item in items:
        if isinstance(item, SourceProblem):
            _record_problem(batch, summary, item)
            done += 1
            continue
        _record_warnings(batch, summary, item)
        chunk.append(item)
        if len(chunk) >= CHUNK_SIZE:
            flush()
    flush()
    summary.seconds["store"] -= summary.seconds["embed"] + summary.seconds["classify"] + summary.seconds["filter"]
    IngestBatch.objects.filter(pk=batch.pk).update(processed=len(items), summary=summary.as_dict())
    return summary


def execute_batch(batch_id: int, *, progress=None) -> IngestBatch | None:
    """Claim and run one batch, recording success or a clear failure on it."""
    if not claim_batch(batch_id):
        return None
    batch = IngestBatch.objects.get(pk=batch_id)
    try:
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
    return skill


# --- queries ----------------------------------------------------------------------------------


def search_skills(qs, query: str):
    """Full-text search: PostgreSQL's text search where available, word-by-word matching elsewhere."""
    query = (query or "").strip()
    if not query:
        return qs
    if connection.vendor == "postgresql":
        return qs.extra(
            where=["skills_skill.search_vector @@ websearch_to_tsquery('english', %s)"], params=[query]
        )
    for word in query.split()[:8]:
        qs = qs.filter(search_document__icontains=word)
    return qs


_neighbour_cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def _neighbour_matrix() -> tuple[np.ndarray, np.ndarray]:
    stamp = tuple(Skill.objects.current().exclude(embedding=None).aggregate(n=Count("id"), m=Max("id")).values())
    if stamp not in _neighbour_cache:
        ids, vecs = [], []
        for skill_id, blob in Skill.objects.current().exclude(embedding=None).values_list("id", "embedding").iterator(chunk_size=2000):
            ids.append(skill_id)
            vecs.append(np.frombuffer(bytes(blob), dtype=np.float32))
        _neighbour_cache.clear()
        _neighbour_cache[stamp] = (np.array(ids, dtype=np.int64), np.vstack(vecs) if vecs else np.zeros((0, 384), np.float32))
    return _neighbour_cache[stamp]


def nearest_skills(skill: Skill, k: int = 8) -> list[tuple[Skill, float]]:
    """The k current skills most similar to `skill` by embedding cosine (works on any database)."""
    vector = skill.vector
    if vector is None:
        return []
    ids, matrix = _neighbour_matrix()
    if len(ids) == 0:
        return []
    scores = matrix @ vector
    order = np.argsort(-scores)
    picked = [(int(ids[i]), float(scores[i])) for i in order[: k + 1] if ids[i] != skill.id][:k]
    by_id = Skill.objects.select_related("category").in_bulk([i for i, _ in picked])
    return [(by_id[i], s) for i, s in picked if i in by_id]


def taxonomy_table() -> list[dict]:
    """Tables 3 and 4 of the paper, computed live: accepted current skills per category."""
    counts = dict(
        Skill.objects.current().accepted().exclude(category=None).values_list("category").annotate(n=Count("id"))
    )
    total = sum(counts.values())
    rows = []
    for parent in Category.objects.filter(parent__isnull=True).order_by("position").prefetch_related("children"):
        children = sorted(parent.children.all(), key=lambda c: c.position)
        parent_count = sum(counts.get(c.id, 0) for c in children)
        rows.append({
            "category": parent, "count": parent_count,
            "global_share": parent_count / total if total else 0.0,
            "children": [
                {
                    "category": c, "count": counts.get(c.id, 0),
                    "global_share": counts.get(c.id, 0) / total if total else 0.0,
                    "within_parent": counts.get(c.id, 0) / parent_count if parent_count else 0.0,
                }
                for c in children
            ],
        })
    return rows


def reject_reason_counts(qs) -> dict[str, int]:
    return dict(Verdict.objects.filter(skill__in=qs).values_list("kind").annotate(n=Count("skill", distinct=True)))


SORTS = {
    "name": ("name", "id"),
    "-ingested": ("-ingested_at", "-id"),
    "category": ("category__name", "name", "id"),
    "confidence": ("category_confidence", "id"),
    "-confidence": ("-category_confidence", "id"),
    "owner": ("owner", "name", "id"),
}


def filter_skills(*, q: str = "", category: str = "", status: str = "", verdict: str = "", source: str = "",
                  owner: str = "", sort: str = "name", all_versions: bool = False):
    """The skills list's query, shared by the page and the API. Unknown filter values match nothing."""
    qs = Skill.objects.all() if all_versions else Skill.objects.current()
    if category:
        cat = Category.objects.filter(slug=category).first()
        if cat is None:
            return Skill.objects.none()
        qs = qs.filter(Q(category=cat) | Q(category__parent=cat)) if cat.parent_id is None else qs.filter(category=cat)
    if status:
        qs = qs.filter(status=status)
    if verdict:
        qs = qs.filter(verdicts__kind=verdict).distinct()
    if source:
        qs = qs.filter(source=source)
    if owner:
        qs = qs.filter(owner=owner)
    qs = search_skills(qs, q)
    return qs.select_related("category").order_by(*SORTS.get(sort, SORTS["name"]))


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
