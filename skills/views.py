"""The skill corpus's HTML pages: the skill list and page, files, category overrides, the taxonomy
with its low-confidence queue, the safety review queue, uploads and an ingest batch's polling page."""
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

import yaml

from facet_site import stamps
from facet_site.lib.render import highlight_code, render_markdown
from facet_site.roles import can_review, require

from . import charts, queries, review, services
from .models import Category, CategorySource, IngestBatch, Skill, SkillStatus, Verdict, VerdictKind

PAGE_SIZE = 50
LOW_CONFIDENCE = 0.5  # the Taxonomy page's queue: classifier confidence below this
LOW_CONFIDENCE_ROWS = 50
FILE_COLLAPSE_LINES = 200


def _filters(request) -> dict:
    g = request.GET
    return {k: g.get(k, "").strip() for k in ("q", "category", "status", "verdict", "source", "owner")} | {
        "sort": g.get("sort", "name") if g.get("sort") in queries.SORTS else "name"
    }


def skill_list(request):
    filters = _filters(request)
    qs = queries.filter_skills(**filters)
    page = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
    status_counts = dict(
        queries.filter_skills(**{**filters, "status": "", "sort": "name"}).order_by().values_list("status").annotate(n=Count("id"))
    )
    query_without_page = request.GET.copy()
    query_without_page.pop("page", None)
    context = {
        "page": page,
        "filters": filters,
        "query_without_page": query_without_page.urlencode(),
        "status_counts": status_counts,
        "categories": Category.objects.select_related("parent").order_by("parent__position", "position"),
        "verdict_kinds": VerdictKind.choices,
        "statuses": SkillStatus.choices,
        "sources": Skill.objects.current().order_by("source").values_list("source", flat=True).distinct(),
        "sorts": [("name", "Name"), ("-ingested", "Newest"), ("category", "Category"), ("-confidence", "Confidence (high first)"), ("confidence", "Confidence (low first)"), ("owner", "Owner")],
    }
    template = "skills/list.html#results" if request.htmx else "skills/list.html"
    return render(request, template, context)


def skill_detail(request, skill_id: int):
    skill = get_object_or_404(Skill.objects.select_related("category__parent", "category_overridden_by", "batch"), pk=skill_id)
    frontmatter_yaml = yaml.safe_dump(skill.frontmatter, sort_keys=False, allow_unicode=True) if skill.frontmatter else ""
    return render(request, "skills/detail.html", {
        "skill": skill,
        "body_html": render_markdown(skill.body),
        "frontmatter_html": highlight_code(frontmatter_yaml, language="yaml", anchor="fm") if frontmatter_yaml else "",
        "files": skill.files.all(),
        "verdicts": skill.verdicts.select_related("duplicate_of"),
        "kept_over": Verdict.objects.filter(duplicate_of=skill, kind__in=[VerdictKind.DUPLICATE, VerdictKind.NEAR_DUPLICATE])
                     .select_related("skill").order_by("id")[:20],
        "safety_findings": (skill.safety_report or {}).get("findings", []),
        "safety_examples": (skill.safety_report or {}).get("examples", []),
        "neighbours": queries.nearest_skills(skill),
        "versions": Skill.objects.filter(key=skill.key).order_by("-version_number"),
        "fine_categories": Category.objects.filter(parent__isnull=False).select_related("parent").order_by("parent__position", "position"),
    })


def skill_file(request, skill_id: int, file_path: str):
    skill = get_object_or_404(Skill, pk=skill_id)
    f = skill.files.filter(path=file_path).first()
    if f is None:
        raise Http404("No such file in this skill.")
    if request.GET.get("download") == "1" and f.text is not None:
        response = HttpResponse(f.text, content_type="text/plain; charset=utf-8")
        # a name may hold newlines or quotes, which a header cannot
        name = "".join(c if c.isprintable() and c not in '"\\' else "_" for c in f.path.rsplit("/", 1)[-1])
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response
    lines = (f.text or "").count("\n") + 1
    show_all = request.GET.get("all") == "1"
    text = f.text or ""
    collapsed = not show_all and lines > FILE_COLLAPSE_LINES
    if collapsed:
        text = "\n".join(text.splitlines()[:FILE_COLLAPSE_LINES])
    return render(request, "skills/file.html", {
        "skill": skill, "file": f, "lines": lines, "collapsed": collapsed,
        "code_html": highlight_code(text, filename=f.path) if f.text is not None else "",
    })


@require_POST
@require(can_review)
def override_category(request, skill_id: int):
    skill = get_object_or_404(Skill, pk=skill_id)
    chosen = request.POST.get("category") or ""
    category = Category.objects.filter(pk=int(chosen)).first() if chosen.isascii() and chosen.isdigit() and len(chosen) < 19 else None
    if category is None:
        messages.error(request, "category: choose a category from the list.")
    else:
        try:
            services.override_category(skill=skill, category=category, user=request.user)
            messages.success(request, f"Category set to “{category.name}”.")
        except ValueError as exc:
            messages.error(request, str(exc))
    if request.POST.get("next") == "taxonomy":
        return redirect(reverse("skills:taxonomy") + "#low-confidence")
    return redirect("skills:detail", skill_id=skill.pk)


def _taxonomy_context() -> dict:
    rows = queries.taxonomy_table()
    return {
        "rows": rows,
        "total": sum(r["count"] for r in rows),
        "unclassified": Skill.objects.current().accepted().filter(category=None).count(),
        "sunburst": charts.taxonomy_sunburst(rows),
        "bars": charts.category_bars(rows),
    }


def taxonomy(request):
    # counting 70,000+ skills and building two figures, once per change of the corpus
    context = dict(stamps.cached("taxonomy", stamps.SKILLS_STAMP, _taxonomy_context))
    # The queue is read on every request (an indexed, limited query), so an override leaves it at once.
    low = (Skill.objects.current().accepted().exclude(category_source=CategorySource.OVERRIDE)
           .filter(category_confidence__lt=LOW_CONFIDENCE))
    context.update(
        low_confidence=low.select_related("category", "category_runner_up").order_by("category_confidence", "id")[:LOW_CONFIDENCE_ROWS],
        low_count=low.count(), low_threshold=LOW_CONFIDENCE,
        fine_categories=Category.objects.filter(parent__isnull=False).select_related("parent").order_by("parent__position", "position"),
    )
    return render(request, "skills/taxonomy.html", context)


def safety_queue(request):
    page = Paginator(review.queue(), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "skills/safety_queue.html", {"page": page})


@require_POST
@require(can_review)
def safety_decide(request, skill_id: int):
    skill = get_object_or_404(Skill, pk=skill_id)
    decision = request.POST.get("decision", "")
    note = request.POST.get("note", "").replace("\x00", "")[:2000]
    try:
        if decision == "clear":
            review.clear_skill(skill=skill, user=request.user, note=note)
            messages.success(request, f"“{skill.name}” cleared: it is accepted and may be used in synthesis.")
        elif decision == "reject":
            review.reject_skill(skill=skill, user=request.user, note=note)
            messages.success(request, f"“{skill.name}” rejected in safety review.")
        else:
            messages.error(request, "decision: choose clear or reject.")
    except review.ReviewError as exc:
        messages.error(request, str(exc))
    if request.POST.get("next") == "queue":
        return redirect("skills:safety-queue")
    return redirect("skills:detail", skill_id=skill.pk)


def upload(request):
    if request.method == "POST":
        if not can_review(request.user):
            return HttpResponse("Your role does not allow ingesting skills.", status=403)
        uploaded = request.FILES.get("archive")
        if uploaded is None:
            messages.error(request, "archive: choose a .zip or .tar.gz file to upload.")
        else:
            try:
                batch = services.save_upload(uploaded=uploaded, user=request.user)
            except services.UploadError as exc:
                messages.error(request, str(exc))
            else:
                return redirect("skills:batch", batch_id=batch.pk)
    return render(request, "skills/upload.html", {"batches": IngestBatch.objects.select_related("created_by")[:20]})


@require_POST
@require(can_review)
def retry_batch(request, batch_id: int):
    """Retry a failed batch, or resume one whose worker died (docs/operations.md)."""
    batch = get_object_or_404(IngestBatch, pk=batch_id)
    if services.retry_batch(batch):
        messages.success(request, f"Ingest #{batch.pk} is queued again; skills it already stored are not stored twice.")
    else:
        messages.error(request, f"Ingest #{batch.pk} is {batch.get_status_display().lower()}: only a failed batch, "
                                "or one whose worker stopped answering, can be retried.")
    return redirect("skills:batch", batch_id=batch.pk)


def batch_detail(request, batch_id: int):
    batch = get_object_or_404(IngestBatch, pk=batch_id)
    problems = batch.problems.order_by("severity", "path", "id")  # errors before warnings
    context = {"batch": batch, "problems": problems[:500], "problem_count": problems.count(),
               "can_retry": can_review(request.user)}
    if request.htmx:
        response = render(request, "skills/batch.html#progress", context)
        if batch.is_finished:
            response.status_code = 286  # tells htmx to stop polling
        return response
    return render(request, "skills/batch.html", context)
