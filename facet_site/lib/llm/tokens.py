"""An offline estimate of how many tokens a prompt costs, for showing prompt sizes per stage.

No BPE vocabulary is available offline here (tiktoken fetches its files on first use), so this is an
APPROXIMATION, and everything that shows its figures labels them so: the text is split the way
OpenAI's cl100k tokenizer pre-splits it (words with their leading space, runs of up to three
digits, runs of punctuation, runs of whitespace), and each piece counts as the tokens a BPE
vocabulary typically needs for it: one for a short word, one more per further six letters; one per
three punctuation marks; one per run of whitespace. Messages add the chat format's few tokens of
overhead. The figures the server reports for a call (tokens_in/tokens_out) are the real ones when
a real model answered; this estimate is for comparing prompts, not for billing.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import regex

# cl100k's pre-tokenization split (a published fact about that tokenizer), without its vocabulary
_PIECES = regex.compile(
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
MESSAGE_OVERHEAD = 4  # role and separators per chat message
REPLY_PRIMING = 3  # the assistant turn the server opens
METHOD = "approximate: cl100k-style pre-tokenization without a vocabulary (no tokenizer is available offline)"


def _piece_tokens(piece: str) -> int:
    body = piece.strip()
    if not body:
        return 1  # a run of whitespace (indentation, blank lines)
    if body[-1].isalpha():
        return 1 + max(0, math.ceil((len(body) - 6) / 6))
    if body.isdigit():
        return 1
    return math.ceil(len(body) / 3)


def approx_tokens(text: str) -> int:
    """Estimated tokens of one text (see the module docstring for how, and how far to trust it)."""
    if not text:
        return 0
    return sum(_piece_tokens(m.group(0)) for m in _PIECES.finditer(text))


def approx_message_tokens(messages: Iterable[dict[str, Any]]) -> int:
    """Estimated prompt tokens of a chat request: each message's content plus the format's overhead."""
    total = REPLY_PRIMING
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else message
        total += MESSAGE_OVERHEAD + approx_tokens(content if isinstance(content, str) else str(content or ""))
    return total
