"""Endpoint limits: how many requests may be in flight at an LLM endpoint (and at one model on it),
how many may start per minute and how many tokens may pass per minute, shared by every worker.

A `Limiter` is asked for a lease before each HTTP request and given it back after, with the tokens
really used and whether the server throttled. The state lives in a store: `RedisStore` when a
Redis URL is configured (one count for every worker on every machine) or `MemoryStore` (this
process only). On a 429 or 503 the scope waits out `Retry-After` (or an exponential backoff that
grows with repeated throttling) and halves its concurrency cap, which then grows back by one
request per cap's worth of successes (additive increase, multiplicative decrease), so a fleet of
workers settles just under what the endpoint really serves.

The rules (`try_acquire`) exist twice: as Python for the memory store and as one Lua script for
Redis, where they must run atomically on the server; keep the two in step.
"""
from __future__ import annotations

import json
import math
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import LLMConfigError

WINDOW_S = 60.0  # requests/minute and tokens/minute are counted over a sliding minute
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 60.0
CAP_MEMORY_S = 300  # a cap lowered by throttling is forgotten after this long without throttling


@dataclass(frozen=True)
class ScopeLimits:
    """0 means no limit of that kind."""

    max_concurrent: int = 0
    requests_per_minute: int = 0
    tokens_per_minute: int = 0

    @classmethod
    def parse(cls, raw: Any, *, where: str) -> ScopeLimits:
        if not isinstance(raw, Mapping):
            raise LLMConfigError(f"{where}: expected an object of limits, got {type(raw).__name__}")
        known = {"max_concurrent", "requests_per_minute", "tokens_per_minute"}
        unknown = sorted(set(raw) - known - {"models"})
        if unknown:
            raise LLMConfigError(f"{where}: unknown limit(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        values = {}
        for name in known & set(raw):
            value = raw[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise LLMConfigError(f"{where}.{name}: a whole number >= 0, got {value!r}")
            values[name] = value
        return cls(**values)

    @property
    def any(self) -> bool:
        return bool(self.max_concurrent or self.requests_per_minute or self.tokens_per_minute)


@dataclass(frozen=True)
class LimitTable:
    """Limits by endpoint base URL ("*": any endpoint not named), each with optional per-model limits.

        {"http://gpu-1:8000/v1": {"max_concurrent": 256, "requests_per_minute": 3000,
                                  "models": {"qwen3-32b": {"tokens_per_minute": 2000000}}}}
    """

    endpoints: Mapping[str, ScopeLimits] = field(default_factory=dict)
    models: Mapping[tuple[str, str], ScopeLimits] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Any, *, source: str = "FACET_LLM_LIMITS") -> LimitTable:
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw.strip() else None
            except json.JSONDecodeError as exc:
                raise LLMConfigError(f"{source} is not valid JSON: {exc}") from None
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise LLMConfigError(f"{source}: expected an object keyed by endpoint base URL")
        endpoints, models = {}, {}
        for url, section in raw.items():
            key = _endpoint_key(str(url))
            endpoints[key] = ScopeLimits.parse(section, where=f"{source}[{url!r}]")
            per_model = section.get("models") or {}
            if not isinstance(per_model, Mapping):
                raise LLMConfigError(f"{source}[{url!r}].models: expected an object keyed by model name")
            for model, limits in per_model.items():
                models[(key, str(model))] = ScopeLimits.parse(limits, where=f"{source}[{url!r}].models[{model!r}]")
        return cls(endpoints=endpoints, models=models)

    def scopes(self, base_url: str, model: str) -> list[tuple[str, ScopeLimits]]:
        """The scopes one request counts against: its endpoint, and its model on that endpoint."""
        key = _endpoint_key(base_url)
        endpoint = self.endpoints.get(key) or self.endpoints.get("*") or ScopeLimits()
        per_model = self.models.get((key, model)) or self.models.get(("*", model)) or ScopeLimits()
        # Every endpoint gets a scope even without limits: throttling and in-flight counts still apply.
        return [(f"ep:{key}", endpoint), (f"model:{key}#{model}", per_model)]


def _endpoint_key(url: str) -> str:
    return url.strip().rstrip("/") or "*"


@dataclass
class Lease:
    lease_id: str
    scopes: list[str]
    tokens_estimated: int
    started: float


class MemoryStore:
    """Limiter state for the workers of this process only (no Redis configured)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._state: dict[str, dict[str, Any]] = {}

    def _scope(self, key: str) -> dict[str, Any]:
        return self._state.setdefault(key, {"leases": {}, "requests": {}, "tokens": {}, "cool": 0.0, "cap": None,
                                            "cap_until": 0.0, "strikes": 0, "throttled": 0})

    def try_acquire(self, scopes: list[tuple[str, ScopeLimits]], lease_id: str, ttl: float, tokens: int) -> float:
        """0 when the lease was taken, else how long to wait before asking again."""
        with self._lock:
            now = self._clock()
            for key, limits in scopes:
                st = self._scope(key)
                st["leases"] = {k: exp for k, exp in st["leases"].items() if exp > now}
                wait = _refusal(now, limits, len(st["leases"]), self._cap(st, now),
                                _windowed(st["requests"], now), _windowed(st["tokens"], now), st["cool"], tokens)
                if wait:
                    return wait
            minute = int(now // WINDOW_S)
            for key, _limits in scopes:
                st = self._scope(key)
                st["leases"][lease_id] = now + ttl
                st["requests"][minute] = st["requests"].get(minute, 0) + 1
                st["tokens"][minute] = st["tokens"].get(minute, 0) + tokens
            return 0.0

    def release(self, scopes: list[tuple[str, ScopeLimits]], lease_id: str, token_delta: int,
                throttled: bool, retry_after: float | None) -> None:
        with self._lock:
            now = self._clock()
            minute = int(now // WINDOW_S)
            for key, limits in scopes:
                st = self._scope(key)
                in_flight = len(st["leases"])
                st["leases"].pop(lease_id, None)
                st["tokens"][minute] = st["tokens"].get(minute, 0) + token_delta
                cap = self._cap(st, now)
                if throttled:
                    st["strikes"] += 1
                    st["throttled"] += 1
                    st["cool"] = max(st["cool"], now + _cooldown(st["strikes"], retry_after))
                    base = min(in_flight or 1, cap or math.inf)
                    st["cap"] = float(max(1, math.floor(base / 2)))
                    st["cap_until"] = now + CAP_MEMORY_S
                else:
                    st["strikes"] = max(0, st["strikes"] - 1)
                    if cap is not None:
                        st["cap"] = cap + 1.0 / cap

    @staticmethod
    def _cap(st: dict[str, Any], now: float) -> float | None:
        if st["cap"] is not None and st["cap_until"] <= now:
            st["cap"] = None
        return st["cap"]

    def state(self, key: str) -> dict[str, Any]:
        with self._lock:
            now = self._clock()
            st = self._scope(key)
            return _state_dict(now, sum(1 for exp in st["leases"].values() if exp > now), self._cap(st, now),
                               _windowed(st["requests"], now), _windowed(st["tokens"], now), st["cool"], st["throttled"])


def _windowed(counts: dict[int, float], now: float) -> float:
    """Requests (or tokens) in the sliding minute: this minute's, plus last minute's for the part
    of it still inside the window."""
    minute = int(now // WINDOW_S)
    for old in [m for m in counts if m < minute - 1]:
        del counts[old]
    fraction = (now - minute * WINDOW_S) / WINDOW_S
    return counts.get(minute - 1, 0) * (1 - fraction) + counts.get(minute, 0)


def _refusal(now, limits: ScopeLimits, in_flight, cap, requests, tokens, cool, want_tokens) -> float:
    if cool > now:
        return cool - now
    ceiling = min(c for c in (limits.max_concurrent or math.inf, cap or math.inf))
    if ceiling != math.inf and in_flight >= math.floor(ceiling):
        return 0.05
    if limits.requests_per_minute and requests + 1 > limits.requests_per_minute:
        return WINDOW_S / limits.requests_per_minute
    # A request bigger than the whole budget still goes when the window is empty, or it never would.
    if limits.tokens_per_minute and tokens > 0 and tokens + want_tokens > limits.tokens_per_minute:
        return min(5.0, WINDOW_S * want_tokens / limits.tokens_per_minute)
    return 0.0


def _cooldown(strikes: int, retry_after: float | None) -> float:
    if retry_after is not None:
        return min(retry_after, BACKOFF_MAX_S * 5)
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (strikes - 1))


def _state_dict(now, in_flight, cap, requests, tokens, cool, throttled) -> dict[str, Any]:
    return {"in_flight": int(in_flight), "cap": None if cap is None else int(cap),
            "requests_last_minute": int(requests), "tokens_last_minute": int(tokens),
            "cooling_down_s": round(max(0.0, cool - now), 1), "throttled": int(throttled)}


_ACQUIRE = """
local now, lease, ttl, want = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local minute = math.floor(now / 60)
local fraction = (now - minute * 60) / 60
local n = #KEYS
for i = 1, n do
  local p = KEYS[i]
  local maxc, rpm, tpm = tonumber(ARGV[2 + 3 * i]), tonumber(ARGV[3 + 3 * i]), tonumber(ARGV[4 + 3 * i])
  local cool = tonumber(redis.call('GET', p .. ':cool') or '0')
  if cool > now then return tostring(cool - now) end
  redis.call('ZREMRANGEBYSCORE', p .. ':leases', '-inf', now)
  local ceiling = maxc > 0 and maxc or math.huge
  local cap = redis.call('GET', p .. ':cap')
  if cap and tonumber(cap) < ceiling then ceiling = tonumber(cap) end
  if redis.call('ZCARD', p .. ':leases') >= math.floor(ceiling) then return '0.05' end
  local requests = tonumber(redis.call('GET', p .. ':r:' .. (minute - 1)) or '0') * (1 - fraction)
                   + tonumber(redis.call('GET', p .. ':r:' .. minute) or '0')
  if rpm > 0 and requests + 1 > rpm then return tostring(60 / rpm) end
  local tokens = tonumber(redis.call('GET', p .. ':t:' .. (minute - 1)) or '0') * (1 - fraction)
                 + tonumber(redis.call('GET', p .. ':t:' .. minute) or '0')
  if tpm > 0 and tokens > 0 and tokens + want > tpm then return tostring(math.min(5, 60 * want / tpm)) end
end
for i = 1, n do
  local p = KEYS[i]
  redis.call('ZADD', p .. ':leases', now + ttl, lease)
  redis.call('EXPIRE', p .. ':leases', math.ceil(ttl) + 60)
  redis.call('INCR', p .. ':r:' .. minute)
  redis.call('EXPIRE', p .. ':r:' .. minute, 180)
  redis.call('INCRBY', p .. ':t:' .. minute, want)
  redis.call('EXPIRE', p .. ':t:' .. minute, 180)
end
return '0'
"""

_RELEASE = """
local now, lease, delta, throttled, cooldown = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local memory = tonumber(ARGV[6])
local minute = math.floor(now / 60)
for i = 1, #KEYS do
  local p = KEYS[i]
  local in_flight = redis.call('ZCARD', p .. ':leases')
  redis.call('ZREM', p .. ':leases', lease)
  redis.call('INCRBY', p .. ':t:' .. minute, delta)
  redis.call('EXPIRE', p .. ':t:' .. minute, 180)
  local cap = tonumber(redis.call('GET', p .. ':cap') or '0')
  if throttled == '1' then
    local strikes = redis.call('INCR', p .. ':strikes')
    redis.call('EXPIRE', p .. ':strikes', memory)
    redis.call('INCR', p .. ':throttled')
    local wait = cooldown >= 0 and cooldown or math.min(tonumber(ARGV[8]), tonumber(ARGV[7]) * 2 ^ (strikes - 1))
    local cool = tonumber(redis.call('GET', p .. ':cool') or '0')
    if now + wait > cool then redis.call('SET', p .. ':cool', tostring(now + wait), 'EX', math.ceil(wait) + 1) end
    local base = in_flight > 0 and in_flight or 1
    if cap > 0 and cap < base then base = cap end
    redis.call('SET', p .. ':cap', tostring(math.max(1, math.floor(base / 2))), 'EX', memory)
  else
    if tonumber(redis.call('GET', p .. ':strikes') or '0') > 0 then redis.call('DECR', p .. ':strikes') end
    if cap > 0 then redis.call('SET', p .. ':cap', tostring(cap + 1 / cap), 'KEEPTTL') end
  end
end
return 1
"""


class RedisStore:
    """Limiter state in Redis, shared by every worker that names the same Redis."""

    def __init__(self, url: str, *, prefix: str = "facet:llm-limits") -> None:
        import redis  # deferred: installations without Redis never import it

        self._redis = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
        self._prefix = prefix
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._release = self._redis.register_script(_RELEASE)

    def _keys(self, scopes) -> list[str]:
        return [f"{self._prefix}:{key}" for key, _ in scopes]

    def try_acquire(self, scopes, lease_id: str, ttl: float, tokens: int) -> float:
        args: list[Any] = [repr(time.time()), lease_id, ttl, tokens]
        for _key, limits in scopes:
            args += [limits.max_concurrent, limits.requests_per_minute, limits.tokens_per_minute]
        return float(self._acquire(keys=self._keys(scopes), args=args))

    def release(self, scopes, lease_id: str, token_delta: int, throttled: bool, retry_after: float | None) -> None:
        cooldown = -1 if retry_after is None else min(retry_after, BACKOFF_MAX_S * 5)
        self._release(keys=self._keys(scopes), args=[repr(time.time()), lease_id, int(token_delta),
                                                     "1" if throttled else "0", cooldown, CAP_MEMORY_S,
                                                     BACKOFF_BASE_S, BACKOFF_MAX_S])

    def state(self, key: str) -> dict[str, Any]:
        p = f"{self._prefix}:{key}"
        now = time.time()
        minute = int(now // WINDOW_S)
        pipe = self._redis.pipeline()
        pipe.zcount(f"{p}:leases", now, "+inf")
        for name in ("cap", "cool", "throttled", f"r:{minute - 1}", f"r:{minute}", f"t:{minute - 1}", f"t:{minute}"):
            pipe.get(f"{p}:{name}")
        in_flight, cap, cool, throttled, r0, r1, t0, t1 = pipe.execute()
        num = lambda v: float(v) if v is not None else 0.0  # noqa: E731
        fraction = (now - minute * WINDOW_S) / WINDOW_S
        return _state_dict(now, in_flight, None if cap is None else num(cap), num(r0) * (1 - fraction) + num(r1),
                           num(t0) * (1 - fraction) + num(t1), num(cool), num(throttled))


class Limiter:
    """Leases for requests to LLM endpoints under a `LimitTable`, kept in a store."""

    def __init__(self, table: LimitTable | None = None, store: MemoryStore | RedisStore | None = None, *,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None) -> None:
        self.table = table or LimitTable()
        self.store = store or MemoryStore()
        self._sleep = sleep
        self._rng = rng or random.Random()

    def acquire(self, *, base_url: str, model: str, tokens: int, ttl: float, max_wait: float | None = None) -> Lease:
        """Wait for room at the endpoint and the model. `ttl` bounds how long a lease counts if its
        holder dies without giving it back (the request's timeout, plus a margin)."""
        scopes = self.table.scopes(base_url, model)
        lease = Lease(lease_id=uuid.uuid4().hex, scopes=[k for k, _ in scopes], tokens_estimated=tokens,
                      started=time.monotonic())
        waited = 0.0
        while True:
            wait = self.store.try_acquire(scopes, lease.lease_id, ttl, tokens)
            if not wait:
                return lease
            if max_wait is not None and waited >= max_wait:
                raise TimeoutError(f"no room at {base_url} for {model} after {waited:.0f}s")
            # Jitter, so that workers refused together do not all come back together.
            pause = min(wait, 2.0) * (0.5 + self._rng.random())
            self._sleep(pause)
            waited += pause

    def release(self, lease: Lease, *, base_url: str, model: str, tokens_used: int | None = None,
                throttled: bool = False, retry_after: float | None = None) -> None:
        scopes = self.table.scopes(base_url, model)
        delta = (tokens_used - lease.tokens_estimated) if tokens_used is not None else 0
        self.store.release(scopes, lease.lease_id, delta, throttled, retry_after)

    def state(self, base_url: str, model: str | None = None) -> dict[str, Any]:
        """What the run page shows: in flight, the current cap, the last minute's requests and
        tokens, how long the endpoint is still cooling down and how often it throttled."""
        scopes = self.table.scopes(base_url, model or "")
        return self.store.state(scopes[0][0] if model is None else scopes[1][0])


def estimate_tokens(messages: list[dict[str, Any]], max_tokens: int | None) -> int:
    """Tokens a request is counted for until the reply says: about four characters a token for
    the prompt, and up to 1,024 for the answer."""
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    return chars // 4 + min(max_tokens or 1024, 1024)
