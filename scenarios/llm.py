"""The Django side of the LLM layer: calls are stored as LLMCall rows, responses cached in the database."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError

from facet_site.lib.llm import CallRecord, LLMClient, LLMConfigError, LLMSettings, load_prompt

from . import endpoints
from .models import LLMCacheEntry, LLMCall, SynthesisRun

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"


class DbRecorder:
    """Stores every call (failed ones too); remembers the rows so records can name their call."""

    def __init__(self, run: SynthesisRun | None):
        self.run = run
        self.calls: list[LLMCall] = []

    def __call__(self, record: CallRecord) -> None:
        self.calls.append(LLMCall.objects.create(
            run=self.run, stage=record.stage[:60], subject=record.subject[:500], model=record.model[:200],
            prompt_version=record.prompt_version[:40], messages=record.messages, response_text=record.response_text or "",
            parsed=record.parsed, tokens_in=record.tokens_in, tokens_out=record.tokens_out,
            latency_ms=record.latency_ms or 0, cost_usd=record.cost_usd, status=record.status,
            error=record.error or "", request_hash=record.request_hash or "", attempts=record.attempts or 0,
        ))

    @property
    def last(self) -> LLMCall | None:
        return self.calls[-1] if self.calls else None


class DbCache:
    def get(self, request_hash: str) -> CallRecord | None:
        entry = LLMCacheEntry.objects.filter(request_hash=request_hash).first()
        return CallRecord.from_dict(entry.record) if entry else None

    def put(self, request_hash: str, record: CallRecord) -> None:
        try:
            LLMCacheEntry.objects.get_or_create(request_hash=request_hash, defaults={"record": record.to_dict()})
        except IntegrityError:  # another worker stored the same answer first
            pass


# A run's (or rollout batch's) "llm" section names two settings more briefly than LLMSettings does.
CONFIG_NAMES = {"cassette": "cassette_path", "record": "record_path"}


def llm_settings(given: dict | None = None) -> LLMSettings:
    """The settings of the endpoint a run's or rollout batch's "llm" section names (settings.
    FACET_LLM_ENDPOINTS; none: "default", the FACET_LLM_* variables) with the section's own values
    laid over them; empty values keep the endpoint's. Which values a section may hold is checked
    when the run or batch is made (run_config.check_llm_config); "profiles" apply per stage."""
    given = dict(given or {})
    name = given.pop("endpoint", "") or "default"
    if name == "default":  # FACET_LLM itself, the FACET_LLM_* variables
        base = settings.FACET_LLM
    elif (endpoint := endpoints.find(name)) is not None:  # the operator's, or one an admin defined
        base = endpoint.settings
    else:  # the operator removed it since the run was started
        raise LLMConfigError(f"llm.endpoint: no endpoint named {name!r} is configured")
    overrides = {CONFIG_NAMES.get(key, key): value for key, value in given.items()
                 if key != "profiles" and value not in (None, "")}
    return base.overlaid(overrides, source="the run's llm settings")


def llm_settings_for(run: SynthesisRun) -> LLMSettings:
    """The settings a synthesis run's calls use."""
    return llm_settings(run.config.get("llm"))


def client_for(run: SynthesisRun) -> tuple[LLMClient, DbRecorder]:
    """One client per job: replay counts calls per (stage, subject) within a client."""
    from .throughput import limiter, release_connection

    recorder = DbRecorder(run)
    return LLMClient(llm_settings_for(run), recorder=recorder, cache=DbCache(), limiter=limiter(),
                     before_wait=release_connection), recorder


def stage_client(client: LLMClient, run: SynthesisRun, stage: str) -> LLMClient:
    """The client with the run's per-stage profile applied (e.g. a stronger model for the judge).
    A profile naming another endpoint gets that endpoint's settings whole, its key included, so
    no key is ever sent to another endpoint's URL."""
    section = run.config.get("llm") or {}
    profile = (section.get("profiles") or {}).get(stage)
    if not profile:
        return client
    if not profile.get("endpoint"):
        return client.for_stage(stage, {stage: profile})
    stage_settings = llm_settings({**profile, **{k: section[k] for k in CONFIG_NAMES if section.get(k)}})
    whole = {f.name: getattr(stage_settings, f.name) for f in dataclasses.fields(stage_settings)}
    return client.for_stage(stage, {stage: whole})


def prompt(stage: str):
    return load_prompt(PROMPTS_DIR, stage)
