"""What the skills pages and API read: the filtered skills list, full-text search, nearest
neighbours by embedding and the taxonomy table. Read-only; the ingest workflow is services.py."""
from __future__ import annotations

import numpy as np
from django.db import connection
from django.db.models import Count, Max, Q

from .models import Category, Skill


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
    return qs.select_related("category", "category_runner_up").order_by(*SORTS.get(sort, SORTS["name"]))
