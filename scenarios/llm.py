"""The Django side of the LLM layer: calls are stored as LLMCall rows, responses cached in the database."""
from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError

from facet_site.lib.llm import CallRecord, LLMClient, LLMSettings, load_prompt

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


def llm_settings_for(run: SynthesisRun) -> LLMSettings:
    """Environment settings, overridden by what the run was started with."""
    base = LLMSettings.from_env(os.environ)
    overrides = {}
    llm = run.config.get("llm") or {}
    if llm.get("model"):
        overrides["model"] = llm["model"]
    if llm.get("provider"):
        overrides["provider"] = llm["provider"]
    if llm.get("cassette"):
        overrides["cassette_path"] = str(llm["cassette"])
    if llm.get("base_url"):
        overrides["base_url"] = llm["base_url"]
    if llm.get("record"):
        overrides["record_path"] = str(llm["record"])
    if llm.get("temperature") is not None:
        overrides["temperature"] = llm["temperature"]
    if not overrides:
        return base
    import dataclasses

    return dataclasses.replace(base, **overrides)


def client_for(run: SynthesisRun) -> tuple[LLMClient, DbRecorder]:
    """One client per job: replay counts calls per (stage, subject) within a client."""
    recorder = DbRecorder(run)
    return LLMClient(llm_settings_for(run), recorder=recorder, cache=DbCache()), recorder


def stage_client(client: LLMClient, run: SynthesisRun, stage: str) -> LLMClient:
    """The client with the run's per-stage profile applied (e.g. a stronger model for the judge)."""
    profiles = (run.config.get("llm") or {}).get("profiles") or {}
    return client.for_stage(stage, profiles) if stage in profiles else client


def prompt(stage: str):
    return load_prompt(PROMPTS_DIR, stage)
