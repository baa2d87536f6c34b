"""Endpoint limits (lib/llm/limits.py): concurrent requests, requests and tokens per minute, and the
backoff after a 429, in one process (MemoryStore) and shared through Redis between limiters that
stand for two workers; and the client keeping to them against the scripted model over HTTP."""
from __future__ import annotations

import os
import threading
import uuid

import pytest
from pydantic import BaseModel

from demo.scripted_llm import ScriptedLLMServer
from facet_site.lib.llm import LLMClient, LLMConfigError, LLMSettings, Limiter, LimitTable, MemoryStore, RedisStore


class HypothesesOut(BaseModel):  # named as the scripted model's hypotheses answer
    hypotheses: list[dict]

URL = "http://endpoint.test/v1"


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


def table(**limits) -> LimitTable:
    return LimitTable.parse({URL: limits})


def try_once(store, limits: LimitTable, model="m", tokens=10) -> float:
    return store.try_acquire(limits.scopes(URL, model), uuid.uuid4().hex, 60, tokens)


def test_it_keeps_concurrent_requests_under_the_endpoints_limit_and_frees_a_slot_on_release():
    store, limits = MemoryStore(Clock()), table(max_concurrent=2)
    leases = [uuid.uuid4().hex for _ in range(3)]
    scopes = limits.scopes(URL, "m")
    assert store.try_acquire(scopes, leases[0], 60, 1) == 0
    assert store.try_acquire(scopes, leases[1], 60, 1) == 0
    assert store.try_acquire(scopes, leases[2], 60, 1) > 0
    store.release(scopes, leases[0], 0, False, None)
    assert store.try_acquire(scopes, leases[2], 60, 1) == 0
    assert store.state(scopes[0][0])["in_flight"] == 2


def test_a_per_model_limit_applies_beside_the_endpoints():
    limits = LimitTable.parse({URL: {"max_concurrent": 10, "models": {"big": {"max_concurrent": 1}}}})
    store = MemoryStore(Clock())
    assert try_once(store, limits, "big") == 0
    assert try_once(store, limits, "big") > 0
    assert try_once(store, limits, "small") == 0  # another model on the same endpoint is not held back


def test_requests_and_tokens_per_minute_wait_for_the_sliding_minute():
    clock = Clock()
    store = MemoryStore(clock)
    rpm = table(requests_per_minute=3)
    assert [try_once(store, rpm) for _ in range(3)] == [0, 0, 0]
    assert try_once(store, rpm) == pytest.approx(20.0)
    clock.now += 121  # two minutes on, the window is empty again
    assert try_once(store, rpm) == 0

    tokens = MemoryStore(clock)
    tpm = table(tokens_per_minute=1000)
    assert try_once(tokens, tpm, tokens=800) == 0
    assert try_once(tokens, tpm, tokens=800) > 0
    assert try_once(tokens, tpm, tokens=100) == 0


def test_a_429_makes_everyone_wait_for_retry_after_and_halves_the_concurrency_cap():
    clock = Clock()
    store, limits = MemoryStore(clock), table()
    scopes = limits.scopes(URL, "m")
    held = [uuid.uuid4().hex for _ in range(8)]
    for lease in held:
        assert store.try_acquire(scopes, lease, 60, 1) == 0
    store.release(scopes, held[0], 0, True, 5.0)
    assert try_once(store, limits) == pytest.approx(5.0)
    clock.now += 5.1
    state = store.state(scopes[0][0])
    assert state["cap"] == 4 and state["throttled"] == 1 and state["in_flight"] == 7
    assert try_once(store, limits) > 0  # 7 in flight, cap 4: wait until enough come back
    for lease in held[1:5]:
        store.release(scopes, lease, 0, False, None)
    assert try_once(store, limits) == 0


def test_without_retry_after_the_backoff_doubles_with_each_throttle():
    clock = Clock()
    store, limits = MemoryStore(clock), table()
    waits = []
    for _ in range(3):
        scopes = limits.scopes(URL, "m")
        lease = uuid.uuid4().hex
        clock.now += 100
        assert store.try_acquire(scopes, lease, 60, 1) == 0
        store.release(scopes, lease, 0, True, None)
        waits.append(try_once(store, limits))
    assert waits == [pytest.approx(1.0), pytest.approx(2.0), pytest.approx(4.0)]


def test_bad_limits_are_refused_with_the_setting_named():
    with pytest.raises(LLMConfigError, match=r"max_concurrent: a whole number"):
        LimitTable.parse({URL: {"max_concurrent": -1}})
    with pytest.raises(LLMConfigError, match="unknown limit"):
        LimitTable.parse({URL: {"rpm": 5}})
    with pytest.raises(LLMConfigError, match="FACET_LLM_LIMITS is not valid JSON"):
        LimitTable.parse("{nope")


@pytest.fixture
def redis_url():
    redis = pytest.importorskip("redis")
    url = os.environ.get("FACET_TEST_REDIS", "redis://127.0.0.1:6379") + "/12"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        if os.environ.get("FACET_REQUIRE_SERVICES") == "1":
            pytest.fail(f"Redis is not reachable: {exc}")
        pytest.skip(f"Redis is not reachable: {exc}")
    return url


def test_two_workers_share_one_limit_through_redis(redis_url):
    prefix = f"facet:test-limits:{uuid.uuid4().hex}"
    first, second = RedisStore(redis_url, prefix=prefix), RedisStore(redis_url, prefix=prefix)
    limits = table(max_concurrent=3, requests_per_minute=100)
    scopes = limits.scopes(URL, "m")
    held = [uuid.uuid4().hex for _ in range(3)]
    assert first.try_acquire(scopes, held[0], 60, 5) == 0
    assert second.try_acquire(scopes, held[1], 60, 5) == 0
    assert first.try_acquire(scopes, held[2], 60, 5) == 0
    assert second.try_acquire(scopes, uuid.uuid4().hex, 60, 5) > 0  # the other worker's leases count
    second.release(scopes, held[0], 0, True, 2.0)  # a 429 seen by one worker stops the other too
    assert 1.5 < first.try_acquire(scopes, uuid.uuid4().hex, 60, 5) <= 2.0
    state = first.state(scopes[0][0])
    assert state["in_flight"] == 2 and state["throttled"] == 1 and state["cap"] == 1
    assert state["requests_last_minute"] == 3


def test_the_client_keeps_to_max_concurrent_against_a_slow_endpoint_and_retries_a_429():
    limiter = Limiter(table(max_concurrent=4))
    results, errors = [], []
    server = ScriptedLLMServer(latency=0.3, throttle_every=7, retry_after=0.2)
    with server as url:
        limiter.table = LimitTable.parse({url: {"max_concurrent": 4}})
        server_url = url

        def call(i: int):
            client = LLMClient(LLMSettings(base_url=server_url, model="scripted", backoff_base=0.05), limiter=limiter)
            try:
                results.append(client.complete(
                    stage="hypotheses", subject=f"skill:{i}", prompt_version="t",
                    messages=[{"role": "user", "content": f'Propose 2 distinct\n{{"name": "s{i}", "description": "d"}}'}],
                    schema=HypothesesOut))
            except Exception as exc:  # collected: a thread's failure must fail the test
                errors.append(exc)
            finally:
                client.close()

        threads = [threading.Thread(target=call, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert errors == [] and len(results) == 16
    assert 2 <= server.peak_in_flight <= 4
    assert limiter.state(server_url)["throttled"] >= 1
    assert limiter.state(server_url)["in_flight"] == 0
