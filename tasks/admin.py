from django.contrib import admin

from .models import Environment, EnvironmentBuild, RepairRound, Task, TaskVersion, TestResult, Trial, Validation


class ReadOnly(admin.ModelAdmin):
    """Versions, builds, validations, trials and repairs are append-only records: viewable, never edited."""

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["pk", "name", "status", "step", "strategy", "run", "imported", "updated_at"]
    list_filter = ["status", "step", "strategy", "imported"]
    search_fields = ["name", "message", "discard_reason"]
    raw_id_fields = ["scenario", "run", "environment", "current_version"]


@admin.register(Environment)
class EnvironmentAdmin(admin.ModelAdmin):
    list_display = ["pk", "scenario", "status", "repair_count", "image_tag"]
    list_filter = ["status"]
    raw_id_fields = ["scenario"]


@admin.register(EnvironmentBuild)
class EnvironmentBuildAdmin(ReadOnly):
    list_display = ["pk", "environment", "attempt", "outcome", "cached", "seconds", "created_at"]
    list_filter = ["outcome"]


@admin.register(TaskVersion)
class TaskVersionAdmin(ReadOnly):
    list_display = ["pk", "task", "number", "content_hash", "created_at"]
    search_fields = ["content_hash", "task__name"]


@admin.register(Validation)
class ValidationAdmin(ReadOnly):
    list_display = ["pk", "version", "status", "accepted", "failure", "build_cached", "total_seconds", "created_at"]
    list_filter = ["status", "accepted", "failure"]


class TestResultInline(admin.TabularInline):
    model = TestResult
    extra = 0
    can_delete = False
    readonly_fields = ["name", "outcome", "message"]


@admin.register(Trial)
class TrialAdmin(ReadOnly):
    list_display = ["pk", "version", "kind", "index", "reward", "passed", "failure", "seconds"]
    list_filter = ["kind", "passed", "failure"]
    inlines = [TestResultInline]


@admin.register(RepairRound)
class RepairRoundAdmin(ReadOnly):
    list_display = ["pk", "task", "number", "failure", "artifact", "routed_by", "outcome"]
    list_filter = ["artifact", "failure", "outcome"]
