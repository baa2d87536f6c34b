"""Django admin for the tasks app: read-only views of construction, validation, review and rollout records."""
from django.contrib import admin

from .models import (
    AuditEvent,
    Decision,
    Environment,
    EnvironmentBuild,
    Export,
    Recheck,
    RepairRound,
    ReviewLock,
    RolloutBatch,
    SavedView,
    Task,
    TaskImport,
    TaskLabel,
    TaskVersion,
    TestResult,
    Trajectory,
    Trial,
    Turn,
    Validation,
)


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


@admin.register(TaskLabel)
class TaskLabelAdmin(admin.ModelAdmin):
    list_display = ["pk", "task", "kind", "value"]
    list_filter = ["kind"]
    search_fields = ["value"]
    raw_id_fields = ["task"]


@admin.register(Decision)
class DecisionAdmin(ReadOnly):
    """Append-only: a decision is withdrawn by a compensating one (undo), never edited."""

    list_display = ["pk", "task", "verdict", "reason", "author", "bulk", "withdraws", "created_at"]
    list_filter = ["verdict", "reason", "bulk"]
    search_fields = ["task__name", "comment", "content_hash"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnly):
    list_display = ["pk", "actor", "action", "object_type", "object_id", "task", "undoes", "created_at"]
    list_filter = ["action", "object_type"]


@admin.register(ReviewLock)
class ReviewLockAdmin(admin.ModelAdmin):
    list_display = ["task", "holder", "acquired_at"]
    raw_id_fields = ["task"]


@admin.register(SavedView)
class SavedViewAdmin(admin.ModelAdmin):
    list_display = ["pk", "name", "owner", "shared", "query", "created_at"]
    list_filter = ["shared"]


@admin.register(Recheck)
class RecheckAdmin(ReadOnly):
    list_display = ["pk", "version", "kind", "runs", "status", "requested_by", "created_at", "finished_at"]
    list_filter = ["kind", "status"]


@admin.register(RolloutBatch)
class RolloutBatchAdmin(admin.ModelAdmin):
    list_display = ["pk", "name", "source", "model", "agent", "attempts", "status", "created_at"]
    list_filter = ["source", "status"]


class TurnInline(admin.TabularInline):
    model = Turn
    extra = 0
    can_delete = False
    fields = ["index", "state", "task_complete", "seconds", "prompt_tokens", "completion_tokens"]
    readonly_fields = fields


@admin.register(Trajectory)
class TrajectoryAdmin(ReadOnly):
    list_display = ["pk", "batch", "task", "attempt", "model", "status", "reward", "passed", "n_turns"]
    list_filter = ["status", "passed", "model"]
    inlines = [TurnInline]


@admin.register(Export)
class ExportAdmin(ReadOnly):
    list_display = ["pk", "name", "status", "done", "total", "archive_bytes", "created_by", "created_at"]
    list_filter = ["status"]


@admin.register(TaskImport)
class TaskImportAdmin(ReadOnly):
    list_display = ["pk", "source", "status", "imported", "skipped", "created_by", "created_at"]
    list_filter = ["status"]
