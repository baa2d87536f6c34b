"""`LLMClient`: one call per stage and subject, answered from the cache, a cassette or the server,
checked against the stage's schema, and always reported to the recorder."""
from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .cassette import Cassette, CassetteWriter
from .errors import InvalidOutput, LLMConfigError, LLMError
from .jsonout import JSONNotFound, describe_error, json_schema_for, parse_structured
from .limits import Limiter
from .providers import OpenAIProvider
from .records import Cache, CallRecord, ProviderReply, Recorder, StructuredResult, TextResult, request_hash
from .settings import LLMSettings

M = TypeVar("M", bound=BaseModel)

REASK = (
    "Your previous reply could not be used:\n{problem}\n\n"
    "Reply again with only the corrected JSON object, conforming to the required schema."
)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class LLMClient:
    """Not tied to Django: the recorder and cache are how the caller keeps what happened.

    Replay mode neither reads nor fills the cache, so a demo is exactly its cassette and never
    leaks recorded answers into a cache that real runs share."""

    def __init__(
        self,
        settings: LLMSettings,
        *,
        recorder: Recorder | None = None,
        cache: Cache | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        limiter: Limiter | None = None,
        before_wait: Callable[[], None] | None = None,
        _shared: dict[str, Any] | None = None,
    ) -> None:
        self.settings = settings
        self.recorder = recorder
        self.cache = cache
        self._sleep = sleep
        self._rng = rng
        # endpoint limits shared with other workers (limits.py); before_wait: see OpenAIProvider
        self._limiter = limiter
        self._before_wait = before_wait
        # Cassette cursors and writers are shared with clients made by for_stage(), so that the
        # per-(stage, subject) numbering is the same whichever stage client made the call.
        self._shared = _shared if _shared is not None else {"cassettes": {}, "writers": {}, "providers": []}
        self._provider: OpenAIProvider | None = None
        self._cassette: Cassette | None = None
        self._writer: CassetteWriter | None = None
        if settings.provider == "replay":
            if not settings.cassette_path:
                raise LLMConfigError("replay provider needs a cassette (FACET_LLM_CASSETTE / cassette_path)")
            if settings.record_path:
                raise LLMConfigError("record_path only applies to the 'openai' provider, not to replay")
            self._cassette = self._shared_obj("cassettes", settings.cassette_path, Cassette)
        else:
            self._provider = OpenAIProvider(settings, sleep=sleep, rng=rng, limiter=limiter, before_wait=before_wait)
            self._shared["providers"].append(self._provider)
            if settings.record_path:
                self._writer = self._shared_obj("writers", settings.record_path, CassetteWriter)

    def _shared_obj(self, kind: str, path: str, factory: Callable[[str], Any]) -> Any:
        table = self._shared[kind]
        if path not in table:
            table[path] = factory(path)
        return table[path]

    @property
    def replaying(self) -> bool:
        return self._cassette is not None

    def for_stage(self, stage: str, profiles: Mapping[str, Mapping[str, Any]] | None) -> LLMClient:
        settings = self.settings.for_stage(stage, profiles)
        if settings is self.settings:
            return self
        return LLMClient(
            settings, recorder=self.recorder, cache=self.cache, sleep=self._sleep, rng=self._rng,
            limiter=self._limiter, before_wait=self._before_wait, _shared=self._shared,
        )

    def close(self) -> None:
        """Closes the HTTP connections of this client and of every stage client made from it."""
        for provider in self._shared["providers"]:
            provider.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public calls -------------------------------------------------------------------------

    def complete(
        self,
        *,
        stage: str,
        subject: str,
        prompt_version: str,
        messages: list[dict[str, Any]],
        schema: type[M],
    ) -> StructuredResult[M]:
        parsed, record = self._call(stage, subject, prompt_version, messages, schema)
        assert parsed is not None
        return StructuredResult(parsed=parsed, record=record)

    def complete_text(
        self,
        *,
        stage: str,
        subject: str,
        prompt_version: str,
        messages: list[dict[str, Any]],
    ) -> TextResult:
        _parsed, record = self._call(stage, subject, prompt_version, messages, None)
        return TextResult(text=record.response_text, record=record)

    # -- the call -----------------------------------------------------------------------------

    def _call(
        self,
        stage: str,
        subject: str,
        prompt_version: str,
        messages: list[dict[str, Any]],
        schema: type[M] | None,
    ) -> tuple[M | None, CallRecord]:
        s = self.settings
        messages = [dict(m) for m in messages]
        rhash = request_hash(
            model=s.model,
            messages=messages,
            schema=json_schema_for(schema) if schema is not None else None,
            temperature=s.temperature,
            max_tokens=s.max_tokens,
        )
        base = {"stage": stage, "subject": subject, "prompt_version": prompt_version, "request_hash": rhash}

        if self.cache is not None and not self.replaying:
            hit = self._from_cache(rhash, base, messages, schema)
            if hit is not None:
                return hit

        conversation = messages
        for round_no in (1, 2):
            started = time.monotonic()
            try:
                reply = self._send(stage, subject, conversation, schema)
            except LLMError as exc:
                record = CallRecord(
                    **base,
                    model=s.model,
                    messages=conversation,
                    status="error",
                    error=exc.message,
                    attempts=exc.attempts,
                    latency_ms=_ms_since(started),
                    created_at=_now(),
                )
                exc.record = record
                self._emit(record)
                raise
            except Exception as exc:
                # A bug or an unexpected SDK failure still leaves a trace of the attempted call.
                self._emit(
                    CallRecord(
                        **base,
                        model=s.model,
                        messages=conversation,
                        status="error",
                        error=f"{type(exc).__name__}: {exc}",
                        latency_ms=_ms_since(started),
                        created_at=_now(),
                    )
                )
                raise
            record = self._record_from_reply(base, reply, started)
            if self._writer is not None:
                self._writer.write(
                    stage=stage,
                    subject=subject,
                    prompt_version=prompt_version,
                    model=record.model,
                    request_hash=rhash,
                    messages=reply.sent_messages,
                    response_text=reply.text,
                    tokens_in=reply.tokens_in,
                    tokens_out=reply.tokens_out,
                    finish_reason=reply.finish_reason,
                    source="http",
                )
            done = "replayed" if self.replaying else "ok"
            if schema is None:
                record.status = done
                self._keep(rhash, record)
                return None, record
            try:
                parsed = parse_structured(reply.text, schema)
            except (JSONNotFound, ValidationError) as exc:
                problem = describe_error(exc)
                if reply.finish_reason == "length":
                    problem += f"\n(The reply was cut off at the token limit, max_tokens={s.max_tokens}.)"
                record.status = "invalid_output"
                record.error = problem
                self._emit(record)
                if round_no == 1:
                    conversation = [
                        *conversation,
                        {"role": "assistant", "content": reply.text},
                        {"role": "user", "content": REASK.format(problem=problem)},
                    ]
                    continue
                raise InvalidOutput(
                    f"stage {stage!r}, subject {subject!r}: output still invalid after one re-ask: {problem}",
                    raw_text=reply.text,
                    validation_error=problem,
                    attempts=record.attempts,
                    record=record,
                ) from exc
            record.parsed = parsed.model_dump(mode="json")
            record.status = done
            self._keep(rhash, record)
            return parsed, record  # type: ignore[return-value]
        raise AssertionError("unreachable")

    def _send(
        self, stage: str, subject: str, conversation: list[dict[str, Any]], schema: type[BaseModel] | None
    ) -> ProviderReply:
        if self._cassette is not None:
            return self._cassette.reply(stage, subject, conversation)
        assert self._provider is not None
        return self._provider.send(conversation, schema)

    def _record_from_reply(self, base: dict[str, Any], reply: ProviderReply, started: float) -> CallRecord:
        s = self.settings
        model = s.model or reply.model
        return CallRecord(
            **base,
            model=model,
            messages=reply.sent_messages,
            response_text=reply.text,
            tokens_in=reply.tokens_in,
            tokens_out=reply.tokens_out,
            latency_ms=_ms_since(started),
            # Replayed calls carry what the recorded call cost, so a demo's cost view looks like
            # the real run; status "replayed" lets accounting leave them out.
            cost_usd=s.estimate_cost(model, reply.tokens_in, reply.tokens_out),
            attempts=reply.attempts,
            created_at=_now(),
        )

    def _from_cache(
        self,
        rhash: str,
        base: dict[str, Any],
        messages: list[dict[str, Any]],
        schema: type[M] | None,
    ) -> tuple[M | None, CallRecord] | None:
        assert self.cache is not None
        started = time.monotonic()
        stored = self.cache.get(rhash)
        if stored is None or stored.status != "ok":
            # Only answers that passed are worth reusing, whatever a cache implementation returns.
            return None
        parsed: M | None = None
        if schema is not None:
            try:
                if stored.parsed is not None:
                    parsed = schema.model_validate(stored.parsed)
                else:
                    parsed = parse_structured(stored.response_text, schema)  # type: ignore[assignment]
            except (JSONNotFound, ValidationError):
                # Same JSON schema, stricter validators: the stored answer no longer passes.
                return None
        record = CallRecord(
            **base,
            model=stored.model,
            messages=messages,
            response_text=stored.response_text,
            parsed=parsed.model_dump(mode="json") if parsed is not None else None,
            tokens_in=stored.tokens_in,
            tokens_out=stored.tokens_out,
            latency_ms=_ms_since(started),
            cost_usd=0.0,  # nothing was paid this time
            status="cached",
            attempts=0,
            created_at=_now(),
        )
        if self._writer is not None:
            # A cassette recorded with a warm cache must still replay the whole run without it.
            self._writer.write(
                stage=base["stage"],
                subject=base["subject"],
                prompt_version=base["prompt_version"],
                model=stored.model,
                request_hash=rhash,
                messages=stored.messages,
                response_text=stored.response_text,
                tokens_in=stored.tokens_in,
                tokens_out=stored.tokens_out,
                finish_reason=None,
                source="cache",
            )
        self._emit(record)
        return parsed, record

    def _keep(self, rhash: str, record: CallRecord) -> None:
        # Cache before recording: if the recorder fails, a retried job still finds the paid answer.
        if self.cache is not None and not self.replaying:
            self.cache.put(rhash, record)
        self._emit(record)

    def _emit(self, record: CallRecord) -> None:
        if self.recorder is not None:
            self.recorder(record)


def _ms_since(started: float) -> int:
    return int(round((time.monotonic() - started) * 1000))
