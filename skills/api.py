from django.db.models import Count
from django.shortcuts import get_object_or_404
from ninja import File, Query, Router, Schema
from ninja.errors import HttpError
from ninja.files import UploadedFile
from ninja.pagination import PageNumberPagination, paginate

from facet_site.pagination import LazyPage
from facet_site.roles import can_review

from . import services
from .models import Category, IngestBatch, Skill
from .schemas import (
    CategoryOut,
    CategoryOverrideIn,
    IngestBatchOut,
    SkillDetailOut,
    SkillOut,
)

router = Router(tags=["skills"])


class SkillFilters(Schema):
    q: str = ""
    category: str = ""
    status: str = ""
    verdict: str = ""
    source: str = ""
    owner: str = ""
    sort: str = "name"


def _skill_out(s: Skill, verdict_kinds: list[str] | None = None) -> dict:
    return {
        "id": s.id, "key": s.key, "version_number": s.version_number, "name": s.name,
        "description": s.description, "owner": s.owner, "slug": s.slug, "source": s.source,
        "source_kind": s.source_kind, "status": s.status,
        "category": {"id": s.category.id, "slug": s.category.slug, "name": s.category.name} if s.category else None,
        "category_confidence": s.category_confidence, "category_source": s.category_source,
        "content_hash": s.content_hash, "ingested_at": s.ingested_at,
        "verdicts": verdict_kinds if verdict_kinds is not None else sorted({v.kind for v in s.verdicts.all()}),
    }


@router.get("/skills", response=list[SkillOut], summary="List skills (current versions)")
@paginate(PageNumberPagination, page_size=50)
def list_skills(request, filters: Query[SkillFilters]):
    qs = services.filter_skills(**filters.dict()).prefetch_related("verdicts")
    return LazyPage(qs, _skill_out)



@router.get("/skills/{int:skill_id}", response=SkillDetailOut, summary="One skill version with files, verdicts and neighbours")
def get_skill(request, skill_id: int):
    s = get_object_or_404(Skill.objects.select_related("category"), pk=skill_id)
    out = _skill_out(s)
    out.update({
        "declared_version": s.declared_version, "license": s.license, "homepage": s.homepage,
        "frontmatter": s.frontmatter, "body": s.body, "required_tools": s.required_tools,
        "required_bins": s.required_bins, "required_env": s.required_env, "install": s.install,
        "os_support": s.os_support, "inputs": s.inputs, "outputs": s.outputs, "steps": s.steps,
        "provenance": s.provenance,
        "files": [
            {"path": f.path, "size": f.size, "sha256": f.sha256, "is_binary": f.is_binary, "has_text": f.text is not None}
            for f in s.files.all()
        ],
        "verdict_details": [
            {"kind": v.kind, "reason": v.reason, "evidence": v.evidence, "duplicate_of": v.duplicate_of_id}
            for v in s.verdicts.all()
        ],
        "neighbours": [{"id": n.id, "name": n.name, "cosine": round(c, 4)} for n, c in services.nearest_skills(s)],
        "versions": list(Skill.objects.filter(key=s.key).order_by("version_number").values_list("id", flat=True)),
    })
    return out


@router.put("/skills/{int:skill_id}/category", response=SkillOut, summary="Override a skill's category (reviewers)")
def override_category(request, skill_id: int, payload: CategoryOverrideIn):
    if not can_review(request.auth):
        raise HttpError(403, "Only reviewers and admins may override a category.")
    skill = get_object_or_404(Skill, pk=skill_id)
    category = Category.objects.filter(slug=payload.category).first()
    if category is None:
        raise HttpError(422, f"category: no category with slug {payload.category!r}")
    try:
        skill = services.override_category(skill=skill, category=category, user=request.auth)
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None
    return _skill_out(skill)


@router.get("/categories", response=list[CategoryOut], summary="The taxonomy with live counts")
def list_categories(request):
    out = []
    for row in services.taxonomy_table():
        parent = row["category"]
        out.append(_category_out(parent, None, row["count"], row["global_share"], None))
        for child in row["children"]:
            out.append(_category_out(child["category"], parent.slug, child["count"], child["global_share"], child["within_parent"]))
    return out


def _category_out(c, parent_slug, count, global_share, within_parent):
    return {
        "id": c.id, "slug": c.slug, "name": c.name, "description": c.description, "parent": parent_slug,
        "skills": count, "global_share": round(global_share, 6),
        "within_parent": round(within_parent, 6) if within_parent is not None else None,
        "paper_count": c.paper_count, "paper_global_share": c.paper_global_share, "in_digest": c.in_digest,
    }


def _batch_out(b: IngestBatch) -> dict:
    return {
        "id": b.id, "source_label": b.source_label, "origin": b.origin, "status": b.status, "total": b.total,
        "processed": b.processed, "summary": b.summary, "message": b.message, "created_at": b.created_at,
        "finished_at": b.finished_at,
        "problems": [
            {"severity": p.severity, "path": p.path, "field": p.field, "message": p.message}
            for p in b.problems.order_by("severity", "path", "id")[:1000]
        ],
    }


@router.post("/skills/ingest", response={202: IngestBatchOut}, summary="Upload a .zip/.tar.gz of skills to ingest")
def ingest(request, file: File[UploadedFile]):
    if not can_review(request.auth):
        raise HttpError(403, "Only reviewers and admins may ingest skills.")
    try:
        batch = services.save_upload(uploaded=file, user=request.auth, origin="api")
    except services.UploadError as exc:
        raise HttpError(422, str(exc)) from None
    return 202, _batch_out(batch)


@router.get("/skills/ingest/{int:batch_id}", response=IngestBatchOut, summary="Progress and summary of an ingest")
def get_batch(request, batch_id: int):
    return _batch_out(get_object_or_404(IngestBatch, pk=batch_id))
