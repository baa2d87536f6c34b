"""The two kinds of LLM failure a caller has to tell apart.

A job queue retries a `TransientLLMError` later (the server was busy, slow or down) and marks a job
failed on a `PermanentLLMError` (retrying the same request cannot help). Every error raised by
`LLMClient` carries the `CallRecord` of the failed call, already handed to the recorder.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .records import CallRecord


class LLMError(Exception):
    def __init__(self, message: str, *, attempts: int = 0, record: CallRecord | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.attempts = attempts
        self.record = record


class TransientLLMError(LLMError):
    """Timeouts, connection failures, 429 and 5xx, after our own retries ran out."""

    def __init__(
        self,
        message: str,
        *,
        attempts: int = 0,
        record: CallRecord | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, attempts=attempts, record=record)
        # A queue should not come back sooner than the server asked.
        self.retry_after = retry_after


class PermanentLLMError(LLMError):
    """Auth failures, other 4xx, a cassette without the call, output still invalid after the re-ask."""


class LLMConfigError(PermanentLLMError):
    """Settings that cannot work (no base URL, unreadable key file, unknown provider)."""


class InvalidOutput(PermanentLLMError):
    def __init__(
        self,
        message: str,
        *,
        raw_text: str,
        validation_error: str = "",
        attempts: int = 0,
        record: CallRecord | None = None,
    ) -> None:
        super().__init__(message, attempts=attempts, record=record)
        # Kept verbatim so a reviewer can see what the model actually said.
        self.raw_text = raw_text
        self.validation_error = validation_error
