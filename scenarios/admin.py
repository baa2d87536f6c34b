"""The Django admin of the scenario–skill repository: runs, hypotheses, pairs, scenarios and LLM calls."""
from django.contrib import admin

from .models import (
    CandidatePair,
    Judgement,
    LLMCacheEntry,
    LLMCall,
    PairSkill,
    RunSkill,
    Scenario,
    ScenarioHypothesis,
    SynthesisRun,
)


@admin.register(SynthesisRun)
class SynthesisRunAdmin(admin.ModelAdmin):
    list_display = ["pk", "name", "status", "stage", "strategy", "created_by", "created_at", "finished_at"]
    list_filter = ["status", "stage", "strategy"]
    search_fields = ["name", "message"]
    raw_id_fields = ["created_by"]
    readonly_fields = ["created_at"]


@admin.register(RunSkill)
class RunSkillAdmin(admin.ModelAdmin):
    list_display = ["pk", "run", "skill", "status", "attempts", "finished_at"]
    list_filter = ["status"]
    search_fields = ["skill__name", "error"]
    raw_id_fields = ["run", "skill"]


@admin.register(ScenarioHypothesis)
class ScenarioHypothesisAdmin(admin.ModelAdmin):
    list_display = ["pk", "run", "skill", "position", "user_goal", "prompt_version"]
    search_fields = ["user_goal", "application_context", "skill__name"]
    raw_id_fields = ["run", "skill", "llm_call"]


class PairSkillInline(admin.TabularInline):
    model = PairSkill
    extra = 0
    raw_id_fields = ["skill"]


class JudgementInline(admin.StackedInline):
    model = Judgement
    extra = 0
    raw_id_fields = ["llm_call"]


@admin.register(CandidatePair)
class CandidatePairAdmin(admin.ModelAdmin):
    list_display = ["pk", "run", "skill_set", "score", "status", "verdict", "source"]
    list_filter = ["status", "verdict", "source"]
    search_fields = ["scenario_text", "skill_set", "external_id"]
    raw_id_fields = ["run"]
    filter_horizontal = ["hypotheses"]
    inlines = [PairSkillInline, JudgementInline]


@admin.register(Judgement)
class JudgementAdmin(admin.ModelAdmin):
    list_display = ["pair", "verdict", "relevance", "complementarity", "non_redundancy", "executability", "prompt_version"]
    list_filter = ["verdict", "prompt_version"]
    raw_id_fields = ["pair", "llm_call"]


@admin.register(Scenario)
class ScenarioAdmin(admin.ModelAdmin):
    list_display = ["pk", "title", "run", "pair", "status", "consistency"]
    list_filter = ["status", "consistency"]
    search_fields = ["title", "goal", "integrated"]
    raw_id_fields = ["pair", "run"]


@admin.register(LLMCall)
class LLMCallAdmin(admin.ModelAdmin):
    """A record of what was sent and paid for: it can be read and deleted, never rewritten."""

    list_display = ["pk", "created_at", "run", "stage", "subject", "model", "status", "tokens_in", "tokens_out", "latency_ms", "cost_usd"]
    list_filter = ["status", "stage", "model"]
    search_fields = ["subject", "error", "request_hash"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(LLMCacheEntry)
class LLMCacheEntryAdmin(admin.ModelAdmin):
    list_display = ["request_hash", "created_at"]
    search_fields = ["request_hash"]
    readonly_fields = ["request_hash", "record", "created_at"]

    def has_add_permission(self, request):
        return False
