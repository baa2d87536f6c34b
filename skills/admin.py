"""The Django admin of the skill corpus: skills, their files, verdicts, categories and ingest batches."""
from django.contrib import admin

from .models import Category, IngestBatch, IngestProblem, Skill, SkillFile, Verdict


@admin.register(Category)
class CategoryAdmin(admin.ModelAdmin):
    list_display = ["name", "parent", "slug", "paper_count", "in_digest"]
    list_filter = ["parent", "in_digest"]
    search_fields = ["name", "description"]


class SkillFileInline(admin.TabularInline):
    model = SkillFile
    extra = 0
    fields = ["path", "size", "sha256", "is_binary"]
    readonly_fields = fields


class VerdictInline(admin.TabularInline):
    model = Verdict
    extra = 0
    fk_name = "skill"
    fields = ["kind", "reason", "duplicate_of"]
    readonly_fields = ["duplicate_of"]


@admin.register(Skill)
class SkillAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "key", "version_number", "is_current", "status", "category", "ingested_at"]
    list_filter = ["status", "is_current", "source_kind", "category__parent", "source"]
    search_fields = ["name", "description", "key", "owner"]
    raw_id_fields = ["previous_version", "batch", "category_overridden_by"]
    inlines = [VerdictInline, SkillFileInline]


@admin.register(Verdict)
class VerdictAdmin(admin.ModelAdmin):
    list_display = ["skill", "kind", "reason", "created_at"]
    list_filter = ["kind"]
    raw_id_fields = ["skill", "duplicate_of"]


class IngestProblemInline(admin.TabularInline):
    model = IngestProblem
    extra = 0


@admin.register(IngestBatch)
class IngestBatchAdmin(admin.ModelAdmin):
    list_display = ["pk", "source_label", "origin", "status", "processed", "total", "created_by", "created_at"]
    list_filter = ["status", "origin"]
    inlines = [IngestProblemInline]


@admin.register(IngestProblem)
class IngestProblemAdmin(admin.ModelAdmin):
    list_display = ["batch", "path", "message"]
    search_fields = ["path", "message"]


@admin.register(SkillFile)
class SkillFileAdmin(admin.ModelAdmin):
    list_display = ["path", "skill", "size", "is_binary"]
    search_fields = ["path", "skill__name"]
    raw_id_fields = ["skill"]
