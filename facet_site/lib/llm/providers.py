"""The OpenAI-compatible transport: one logical request, our own retries, typed errors.

Works with any server speaking Chat Completions (vLLM, SGLang, llama.cpp server, Ollama, DeepSeek,
OpenAI). Servers differ in whether they accept `response_format` with a JSON schema; the first
rejection is remembered per base URL (and model: on one OpenAI endpoint some models take it and
others do not) and later requests ask for JSON in the prompt instead.
"""
from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from .errors import LLMConfigError, LLMError, PermanentLLMError, TransientLLMError
from .jsonout import json_schema_for, schema_name
from .limits import Limiter, estimate_tokens
from .records import ProviderReply
from .settings import LLMSettings

log = logging.getLogger(__name__)

# Local servers ignore the key but the SDK insists on one; a placeholder also stops the SDK from
# silently picking up OPENAI_API_KEY, which belongs to a different endpoint.
NO_KEY = "sk-no-key-required"

JSON_INSTRUCTION = (
    "Reply with exactly one JSON object and nothing else: no prose, no code fences. "
    "It must conform to this JSON Schema:\n{schema}"
)

_no_response_format: set[tuple[str, str]] = set()
_capability_lock = threading.Lock()


def supports_response_format(base_url: str, model: str) -> bool:
    with _capability_lock:
        return (base_url.rstrip("/"), model) not in _no_response_format


def mark_response_format_unsupported(base_url: str, model: str) -> None:
    with _capability_lock:
        _no_response_format.add((base_url.rstrip("/"), model))


def forget_capabilities() -> None:
    with _capability_lock:
        _no_response_format.clear()


def with_json_instruction(messages: list[dict[str, Any]], schema: type[BaseModel]) -> list[dict[str, Any]]:
    """The conversation with the schema spelled out in the system message.

    The system message (not the last user turn) carries it so the wording stays in one place
    across the re-ask, whose extra turns come after it."""
    instruction = JSON_INSTRUCTION.format(schema=json.dumps(json_schema_for(schema), ensure_ascii=False))
    out = [dict(m) for m in messages]
    for msg in out:
        if msg.get("role") == "system" and isinstance(msg.get("content"), str):
            msg["content"] = f"{msg['content'].rstrip()}\n\n{instruction}"
            return out
    return [{"role": "system", "content": instruction}, *out]


def _rejects_response_format(exc: Any) -> bool:
    if getattr(exc, "status_code", None) not in (400, 422):
        return False
    text = f"{getattr(exc, 'message', '')} {json.dumps(getattr(exc, 'body', None), default=str)}".lower()
    return "response_format" in text or "json_schema" in text


def _schema_itself_rejected(exc: Any) -> bool:
    # OpenAI accepts response_format but refuses some schemas ("Invalid schema for
    # response_format ..."); that says nothing about the server, so it is not remembered.
    text = f"{getattr(exc, 'message', '')} {json.dumps(getattr(exc, 'body', None), default=str)}".lower()
    return "invalid schema" in text


def parse_retry_after(headers: Any, now: Callable[[], float] = time.time) -> float | None:
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now())


_sdk_clients: dict[tuple[str, str, float], Any] = {}
_sdk_lock = threading.Lock()


def _shared_sdk(openai: Any, base_url: str, api_key: str, timeout: float) -> Any:
    """One SDK client, with its connection pool, per endpoint, key and timeout in a process. Building
    one loads the TLS certificates, a tenth of a second of CPU or more: with a client per job and
    dozens of jobs a second that alone would fill a core. The SDK's HTTP client is thread-safe."""
    key = (base_url, hashlib.sha256(api_key.encode()).hexdigest(), timeout)
    with _sdk_lock:
        client = _sdk_clients.get(key)
        if client is None or client.is_closed():
            # Our loop is the only retry loop, so attempts are counted and backoff is testable.
            client = _sdk_clients[key] = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout,
                                                       max_retries=0)
        return client


class OpenAIProvider:
    def __init__(
        self,
        settings: LLMSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        limiter: Limiter | None = None,
        before_wait: Callable[[], None] | None = None,
    ) -> None:
        if not settings.base_url:
            raise LLMConfigError("no LLM base URL configured (FACET_LLM_BASE_URL / LLMSettings.base_url)")
        if not settings.model:
            raise LLMConfigError("no LLM model configured (FACET_LLM_MODEL / LLMSettings.model)")
        import openai  # deferred: replay-only runs and the Django side's imports need not pay for it

        self._openai = openai
        self.settings = settings
        self.base_url = settings.base_url.rstrip("/")
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._limiter = limiter
        # Called before each request goes out: the Django side gives back its database connection
        # here, so hundreds of calls waiting on the endpoint do not hold hundreds of connections.
        self._before_wait = before_wait
        self._sdk = _shared_sdk(openai, self.base_url, settings.resolve_api_key() or NO_KEY, settings.timeout)

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def close(self) -> None:
        """Nothing of this provider's own to close: the connection pool is the process's (_shared_sdk),
        and closing it here would cut the calls other threads have in flight."""

    def send(self, messages: list[dict[str, Any]], schema: type[BaseModel] | None) -> ProviderReply:
        s = self.settings
        use_response_format = schema is not None and supports_response_format(self.base_url, s.model)
        attempts = 0
        retries = 0
        while True:
            attempts += 1
            sent = messages if (schema is None or use_response_format) else with_json_instruction(messages, schema)
            kwargs: dict[str, Any] = {"model": s.model, "messages": sent}
            if s.temperature is not None:
                kwargs["temperature"] = s.temperature
            if s.max_tokens is not None:
                kwargs["max_tokens"] = s.max_tokens
            if use_response_format and schema is not None:
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": schema_name(schema), "schema": json_schema_for(schema), "strict": False},
                }
            cause: BaseException | None = None
            if self._before_wait is not None:
                self._before_wait()
            lease = self._limiter.acquire(base_url=self.base_url, model=s.model, ttl=s.timeout + 60,
                                          tokens=estimate_tokens(sent, s.max_tokens)) if self._limiter else None
            try:
                completion = self._sdk.chat.completions.create(**kwargs)
            except self._openai.APIStatusError as exc:
                self._give_back(lease, throttled=exc.status_code in (429, 503),
                                retry_after=parse_retry_after(getattr(exc.response, "headers", None)))
                cause = exc
                if use_response_format and _rejects_response_format(exc):
                    if not _schema_itself_rejected(exc):
                        mark_response_format_unsupported(self.base_url, s.model)
                    log.info("%s rejected response_format; asking for JSON in the prompt", self.base_url)
                    use_response_format = False
                    continue
                error = self._status_error(exc, attempts)
            except self._openai.APITimeoutError as exc:
                self._give_back(lease)
                cause = exc
                error = TransientLLMError(
                    f"timed out after {s.timeout:g}s waiting for {self.url}", attempts=attempts
                )
            except self._openai.APIConnectionError as exc:
                self._give_back(lease)
                cause = exc
                root = exc.__cause__ or exc
                error = TransientLLMError(
                    f"cannot connect to {self.url}: {type(root).__name__}: {root}",
                    attempts=attempts,
                )
            except self._openai.APIResponseValidationError as exc:
                self._give_back(lease)
                cause = exc
                error = TransientLLMError(f"malformed response from {self.url}: {exc.message}", attempts=attempts)
            except BaseException as exc:
                self._give_back(lease)
                if isinstance(exc, self._openai.OpenAIError):
                    raise PermanentLLMError(f"LLM client error for {self.url}: {exc}", attempts=attempts) from exc
                raise
            else:
                usage = getattr(completion, "usage", None)
                used = (getattr(usage, "prompt_tokens", None) or 0) + (getattr(usage, "completion_tokens", None) or 0)
                self._give_back(lease, tokens_used=used if usage is not None else None)
                return self._reply(completion, sent, attempts)

            if isinstance(error, PermanentLLMError):
                raise error from cause
            assert isinstance(error, TransientLLMError)
            retry_after = error.retry_after
            if retries >= s.max_retries:
                error.message = f"{error.message}; giving up after {attempts} attempt(s)"
                error.args = (error.message,)
                raise error from cause
            if retry_after is not None and retry_after > s.max_retry_after:
                error.message = f"{error.message}; server asks to wait {retry_after:g}s, leaving that to the caller"
                error.args = (error.message,)
                raise error from cause
            retries += 1
            delay = retry_after if retry_after is not None else self._backoff(retries)
            log.warning("%s (attempt %d); retry %d/%d in %.2fs", error.message, attempts, retries, s.max_retries, delay)
            self._sleep(delay)

    def _give_back(self, lease, *, tokens_used: int | None = None, throttled: bool = False,
                   retry_after: float | None = None) -> None:
        if lease is not None:
            self._limiter.release(lease, base_url=self.base_url, model=self.settings.model, tokens_used=tokens_used,
                                  throttled=throttled, retry_after=retry_after)

    def _backoff(self, retry: int) -> float:
        s = self.settings
        ceiling = min(s.backoff_max, s.backoff_base * (2 ** (retry - 1)))
        # Half fixed, half random: spreads out workers that failed together without
        # ever retrying immediately.
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def _status_error(self, exc: Any, attempts: int) -> LLMError:
        status = exc.status_code
        text = f"HTTP {status} from {self.url}: {exc.message}"
        if status == 429 or status == 408 or status >= 500:
            return TransientLLMError(
                text, attempts=attempts, retry_after=parse_retry_after(getattr(exc.response, "headers", None))
            )
        return PermanentLLMError(text, attempts=attempts)

    def _reply(self, completion: Any, sent: list[dict[str, Any]], attempts: int) -> ProviderReply:
        choices = getattr(completion, "choices", None)
        if not choices:
            raise TransientLLMError(f"response from {self.url} has no choices", attempts=attempts)
        choice = choices[0]
        usage = getattr(completion, "usage", None)
        return ProviderReply(
            text=(choice.message.content if choice.message is not None else None) or "",
            sent_messages=sent,
            tokens_in=getattr(usage, "prompt_tokens", None),
            tokens_out=getattr(usage, "completion_tokens", None),
            attempts=attempts,
            finish_reason=choice.finish_reason,
            model=getattr(completion, "model", "") or "",
        )
