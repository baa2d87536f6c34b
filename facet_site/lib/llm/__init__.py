"""The Django-free LLM layer: OpenAI-compatible Chat Completions with structured output, typed
errors, retries, a request cache, call records, and record/replay cassettes.

    client = LLMClient(LLMSettings.from_env(os.environ), recorder=store_call, cache=MemoryCache())
    result = client.complete(stage="draft", subject="skill:42", prompt_version=prompt.version,
                             messages=prompt.messages(skill_json=skill), schema=DraftOutput)
"""
from .cache import JsonDirCache, MemoryCache
from .cassette import Cassette, CassetteWriter
from .client import LLMClient
from .errors import (
    InvalidOutput,
    LLMConfigError,
    LLMError,
    PermanentLLMError,
    TransientLLMError,
)
from .limits import Limiter, LimitTable, MemoryStore, RedisStore
from .prompts import Prompt, PromptError, load_prompt
from .records import Cache, CallRecord, Recorder, StructuredResult, TextResult, request_hash
from .settings import LLMSettings

__all__ = [
    "Cache",
    "CallRecord",
    "Cassette",
    "CassetteWriter",
    "InvalidOutput",
    "JsonDirCache",
    "LLMClient",
    "LLMConfigError",
    "LLMError",
    "LLMSettings",
    "LimitTable",
    "Limiter",
    "MemoryStore",
    "RedisStore",
    "MemoryCache",
    "PermanentLLMError",
    "Prompt",
    "PromptError",
    "Recorder",
    "StructuredResult",
    "TextResult",
    "TransientLLMError",
    "load_prompt",
    "request_hash",
]
