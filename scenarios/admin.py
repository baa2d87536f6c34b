"""The Django admin of the scenario–skill repository: runs, hypotheses, pairs, scenarios, LLM calls,
and the named LLM endpoints admins define (scenarios/endpoints.py)."""
from django import forms
from django.conf import settings
from django.contrib import admin

from facet_site.roles import is_admin

from . import endpoints

from .models import (
    CandidatePair,
    Judgement,
    LLMCacheEntry,
    LLMCall,
    NamedEndpoint,
    PairSkill,
    RunSkill,
    Scenario,
    ScenarioHypothesis,
    SkillClassification,
    SynthesisRun,
)


@admin.register(SynthesisRun)
class SynthesisRunAdmin(admin.ModelAdmin):
    list_display = ["pk", "name", "status", "stage", "strategy", "created_by", "created_at", "finished_at"]
    list_filter = ["status", "stage", "strategy"]
    search_fields = ["name", "message"]
    raw_id_fields = ["created_by"]
    readonly_fields = ["created_at"]


@admin.register(SkillClassification)
class SkillClassificationAdmin(admin.ModelAdmin):
    """The optional LLM classification stage's items: what each run decided for a skill, and why."""

    list_display = ["pk", "run", "skill", "status", "outcome", "category", "confidence", "finished_at"]
    list_filter = ["status", "outcome"]
    search_fields = ["skill__name", "note", "error"]
    raw_id_fields = ["run", "skill", "category", "llm_call"]


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
    list_display = ["pk", "title", "run", "pair", "status", "consistency", "difficulty"]
    list_filter = ["status", "consistency", "difficulty"]
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


class NamedEndpointForm(forms.ModelForm):
    """The key is picked by name among the operator's (FACET_LLM_KEY_<NAME>, files of
    FACET_LLM_KEY_DIR): never typed, never shown, never stored."""

    base_url = forms.URLField(max_length=500, assume_scheme="https",
                              help_text=NamedEndpoint._meta.get_field("base_url").help_text)
    key_name = forms.ChoiceField(required=False, label="Key", help_text=NamedEndpoint._meta.get_field("key_name").help_text)

    class Meta:
        model = NamedEndpoint
        fields = ["name", "base_url", "model", "offered_models", "key_name", "max_tokens_cap", "timeout_s", "enabled"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["key_name"].choices = [("", "none")] + [(n, n) for n in endpoints.key_names()]

    def clean_name(self):
        name = self.cleaned_data["name"]
        if name in settings.FACET_LLM_ENDPOINTS:
            raise forms.ValidationError(f"name: {name!r} is an endpoint the operator set in settings; choose another name")
        return name

    def clean_base_url(self):
        url = self.cleaned_data["base_url"]
        if not url.lower().startswith(("http://", "https://")):
            raise forms.ValidationError("base_url: an http:// or https:// address")
        return url


@admin.register(NamedEndpoint)
class NamedEndpointAdmin(admin.ModelAdmin):
    """Admins only (the role, not merely staff): where runs send their prompts and which key goes along."""

    form = NamedEndpointForm
    list_display = ["name", "base_url", "model", "offered_models", "key_name", "enabled", "updated_at"]
    list_filter = ["enabled"]
    search_fields = ["name", "base_url", "model"]

    def has_module_permission(self, request):
        return is_admin(request.user)

    def has_view_permission(self, request, obj=None):
        return is_admin(request.user)

    def has_add_permission(self, request):
        return is_admin(request.user)

    def has_change_permission(self, request, obj=None):
        return is_admin(request.user)

    def has_delete_permission(self, request, obj=None):
        return is_admin(request.user)
