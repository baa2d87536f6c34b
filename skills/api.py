"""JSON API of skills: the skill list and one skill version, category overrides, the taxonomy
with live counts, and ingesting an uploaded archive (and retrying a failed or stalled ingest).
Viewers read; overriding, ingesting and retrying need a reviewer or an admin (403 otherwise)."""
from django.shortcuts import get_object_or_404
from ninja import File, Query, Router, Schema, Status
from ninja.errors import HttpError
from ninja.files import UploadedFile
from ninja.pagination import paginate

from facet_site.pagination import PageNumberPagination  # bounded page numbers
from facet_site.roles import can_review

from . import queries, services
from .models import Category, IngestBatch, Skill
from .schemas import (
    CategoryOut,
    CategoryOverrideIn,
    IngestBatchOut,
    SkillDetailOut,
    SkillOut,
)

# mounted at /skills and /categories by facet_site/api.py
skills_router = Router(tags=["skills"])
categories_router = Router(tags=["skills"])


class SkillFilters(Schema):
    q: str = ""
    category: str = ""
    status: str = ""
    verdict: str = ""
    source: str = ""
    owner: str = ""
    sort: str = "name"


@skills_router.get("", response=list[SkillOut], summary="List skills (current versions)")
@paginate(PageNumberPagination, page_size=50)
def list_skills(request, filters: Query[SkillFilters]):
    return queries.filter_skills(**filters.dict()).prefetch_related("verdicts")


@skills_router.get("/{int:skill_id}", response=SkillDetailOut, summary="One skill version with files, verdicts and neighbours")
def get_skill(request, skill_id: int):
    return get_object_or_404(Skill.objects.select_related("category"), pk=skill_id)


@skills_router.put("/{int:skill_id}/category", response=SkillOut, summary="Override a skill's category (reviewers)")
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
    return skill


@categories_router.get("", response=list[CategoryOut], summary="The taxonomy with live counts")
def list_categories(request):
    out = []
    for row in queries.taxonomy_table():
        out.append(_counted(row, within_parent=False))
        out += [_counted(child, within_parent=True) for child in row["children"]]
    return out


def _counted(row: dict, *, within_parent: bool) -> Category:
    """The row's category carrying its counts, as CategoryOut reads them."""
    category = row["category"]
    category.n_skills, category.share = row["count"], row["global_share"]
    category.share_in_parent = row["within_parent"] if within_parent else None
    return category


@skills_router.post("/ingest", response={202: IngestBatchOut}, summary="Upload a .zip/.tar.gz of skills to ingest")
def ingest(request, file: File[UploadedFile]):
    if not can_review(request.auth):
        raise HttpError(403, "Only reviewers and admins may ingest skills.")
    try:
        batch = services.save_upload(uploaded=file, user=request.auth, origin="api")
    except services.UploadError as exc:
        raise HttpError(422, str(exc)) from None
    return Status(202, batch)


@skills_router.get("/ingest/{int:batch_id}", response=IngestBatchOut, summary="Progress and summary of an ingest")
def get_batch(request, batch_id: int):
    return get_object_or_404(IngestBatch, pk=batch_id)


@skills_router.post("/ingest/{int:batch_id}/retry", response={202: IngestBatchOut},
                    summary="Retry a failed ingest, or resume one whose worker stopped answering (reviewers)")
def retry_batch(request, batch_id: int):
    """What the batch page's Retry / Resume button does; 409 unless the batch failed or stalled
    (a repeated call finds it queued already)."""
    if not can_review(request.auth):
        raise HttpError(403, "Only reviewers and admins may retry ingests.")
    batch = get_object_or_404(IngestBatch, pk=batch_id)
    if not services.retry_batch(batch):
        raise HttpError(409, f"ingest {batch.pk} is {batch.status}: only a failed batch, or one whose worker "
                             f"stopped answering, can be retried")
    batch.refresh_from_db()
    return Status(202, batch)
