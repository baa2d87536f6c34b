"""The LLM layer against a scripted OpenAI-compatible server over real HTTP, with the real SDK.

Timeouts are a fraction of a second and every backoff goes through an injected sleep, so the whole
module runs in a couple of seconds.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from facet_site.lib.llm import (
    CallRecord,
    InvalidOutput,
    JsonDirCache,
    LLMClient,
    LLMConfigError,
    LLMSettings,
    MemoryCache,
    PermanentLLMError,
    PromptError,
    TransientLLMError,
    load_prompt,
)
from facet_site.lib.llm.cassette import CASSETTE_FIELDS
from facet_site.lib.llm.jsonout import JSONNotFound, extract_json
from facet_site.lib.llm.providers import forget_capabilities, parse_retry_after

try:
    from llm_stub import (
        closed_port_url,
        error,
        hang,
        llm_stub,  # noqa: F401  (pytest fixture)
        ok,
        ok_json,
        rate_limited,
    )
except ImportError:  # tests/lib became a package
    from .llm_stub import (  # type: ignore[no-redef]
        closed_port_url,
        error,
        hang,
        llm_stub,  # noqa: F401
        ok,
        ok_json,
        rate_limited,
    )

FIXTURES = Path(__file__).parent / "fixtures"


class Verdict(BaseModel):
    label: str
    score: int = Field(ge=0, le=10)


GOOD = {"label": "runnable", "score": 7}
MESSAGES = [
    {"role": "system", "content": "You judge whether a skill can become a terminal task."},
    {"role": "user", "content": "Skill: convert CSV to Parquet with duckdb."},
]


@pytest.fixture(autouse=True)
def _data_dir(tmp_path):
    """Shadows the Django-settings fixture of tests/conftest.py: this module runs with -p no:django."""
    return tmp_path / "data"


_open_clients: list[LLMClient] = []


@pytest.fixture(autouse=True)
def _fresh_capabilities():
    forget_capabilities()
    yield
    forget_capabilities()
    while _open_clients:
        _open_clients.pop().close()


def make(base_url: str, *, cache=None, recorder=None, **overrides) -> tuple[LLMClient, list[CallRecord], list[float]]:
    records: list[CallRecord] = []
    sleeps: list[float] = []
    fields = {"base_url": base_url, "model": "stub-model", "timeout": 0.3, "max_retries": 2, **overrides}
    settings = LLMSettings(**fields)
    client = LLMClient(
        settings,
        recorder=recorder or records.append,
        cache=cache,
        sleep=sleeps.append,
        rng=random.Random(7),
    )
    _open_clients.append(client)
    return client, records, sleeps


def judge(client: LLMClient, messages=MESSAGES, subject: str = "skill:42", stage: str = "judge"):
    return client.complete(stage=stage, subject=subject, prompt_version="v1", messages=messages, schema=Verdict)


# -- the happy path and structured output ---------------------------------------------------------


def test_success_sends_json_schema_and_records_the_call(llm_stub, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("sk-from-file\n")
    llm_stub.script(ok_json(GOOD, usage=(200, 50)))
    client, records, sleeps = make(llm_stub.base_url, api_key_file=str(key_file), max_tokens=512)

    result = judge(client)

    assert result.parsed == Verdict(**GOOD)
    rec = result.record
    assert (rec.status, rec.attempts, rec.tokens_in, rec.tokens_out) == ("ok", 1, 200, 50)
    assert (rec.stage, rec.subject, rec.prompt_version, rec.model) == ("judge", "skill:42", "v1", "stub-model")
    assert rec.parsed == GOOD and rec.response_text == json.dumps(GOOD)
    assert rec.messages == MESSAGES and len(rec.request_hash) == 64 and rec.cost_usd is None
    assert records == [rec] and sleeps == []

    [req] = llm_stub.requests
    assert req.headers["authorization"] == "Bearer sk-from-file"
    assert req.body["response_format"]["type"] == "json_schema"
    assert req.body["response_format"]["json_schema"]["schema"] == Verdict.model_json_schema()
    assert (req.body["model"], req.body["max_tokens"], req.body["temperature"]) == ("stub-model", 512, 0.0)


def test_invalid_then_valid_reasks_with_the_validation_error(llm_stub):
    llm_stub.script(ok_json({"label": "runnable", "score": 99}), ok_json(GOOD))
    client, records, _ = make(llm_stub.base_url)

    result = judge(client)

    assert result.parsed.score == 7
    assert [r.status for r in records] == ["invalid_output", "ok"]
    assert "score" in records[0].error and "less than or equal to 10" in records[0].error
    second = llm_stub.bodies[1]["messages"]
    assert second[: len(MESSAGES)] == MESSAGES
    assert second[-2] == {"role": "assistant", "content": json.dumps({"label": "runnable", "score": 99})}
    assert second[-1]["role"] == "user" and "score" in second[-1]["content"]
    assert "less than or equal to 10" in second[-1]["content"]
    assert result.record.messages == second


def test_invalid_twice_raises_invalid_output_keeping_the_raw_text(llm_stub):
    llm_stub.script(ok("I think it is runnable."), ok("Still prose, sorry."))
    client, records, _ = make(llm_stub.base_url)

    with pytest.raises(InvalidOutput) as info:
        judge(client)

    err = info.value
    assert isinstance(err, PermanentLLMError)
    assert err.raw_text == "Still prose, sorry."
    assert err.record is records[-1] and err.record.status == "invalid_output"
    assert err.record.response_text == "Still prose, sorry."
    assert [r.status for r in records] == ["invalid_output", "invalid_output"]
    assert "no JSON object" in err.validation_error
    assert len(llm_stub.requests) == 2


def test_json_is_found_in_fences_and_after_prose():
    assert extract_json('Sure! Here it is:\n```json\n{"a": {"b": [1, 2]}}\n```\nAnything else?') == {"a": {"b": [1, 2]}}
    assert extract_json('The answer is {"a": "x}y"} as requested.') == {"a": "x}y"}
    assert extract_json('<think>maybe {"no": 1</think>\n{"a": 1}') == {"a": 1}
    assert extract_json('```\n{"a": 2}\n```') == {"a": 2}
    with pytest.raises(JSONNotFound):
        extract_json("no json here [1]")


def test_server_without_response_format_support_gets_json_in_the_prompt(llm_stub):
    fenced = "Here is my verdict:\n```json\n" + json.dumps(GOOD) + "\n```"
    llm_stub.rejects_response_format = True
    llm_stub.script(ok(fenced), ok_json({"label": "other", "score": 1}))
    client, records, sleeps = make(llm_stub.base_url)

    first = judge(client)
    second = judge(client, subject="skill:43")

    assert first.parsed == Verdict(**GOOD) and second.parsed.label == "other"
    bodies = llm_stub.bodies
    assert "response_format" in bodies[0]
    assert "response_format" not in bodies[1] and "response_format" not in bodies[2], "not remembered"
    system = bodies[1]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith(MESSAGES[0]["content"])
    assert '"score"' in system["content"] and "JSON Schema" in system["content"]
    assert first.record.attempts == 2 and sleeps == []
    assert first.record.messages == bodies[1]["messages"]

    # Remembered for this server and model only; another model there is asked with the schema.
    llm_stub.rejects_response_format = False
    llm_stub.script(ok_json(GOOD))
    judge(make(llm_stub.base_url, model="other-model")[0])
    assert "response_format" in llm_stub.bodies[3]


def test_complete_text_sends_no_response_format(llm_stub):
    llm_stub.script(ok("ls -la\n"))
    client, records, _ = make(llm_stub.base_url)

    result = client.complete_text(stage="agent", subject="task:3", prompt_version="v2", messages=MESSAGES)

    assert result.text == "ls -la\n" and result.record.parsed is None and result.record.status == "ok"
    assert "response_format" not in llm_stub.bodies[0]


# -- transient and permanent failures -------------------------------------------------------------


def test_429_then_success_honours_retry_after(llm_stub):
    llm_stub.script(rate_limited("3"), ok_json(GOOD))
    client, records, sleeps = make(llm_stub.base_url)

    result = judge(client)

    assert result.record.attempts == 2 and result.record.status == "ok"
    assert sleeps == [3.0]
    assert len(llm_stub.requests) == 2


def test_500_then_success_backs_off(llm_stub):
    llm_stub.script(error(500, "upstream exploded"), error(503, "loading model"), ok_json(GOOD))
    client, records, sleeps = make(llm_stub.base_url, backoff_base=1.0)

    result = judge(client)

    assert result.record.attempts == 3
    assert len(sleeps) == 2
    assert 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0  # exponential, with jitter
    assert records == [result.record]


def test_timeout_becomes_transient_after_retries(llm_stub):
    llm_stub.script(hang(5.0), hang(5.0))
    client, records, sleeps = make(llm_stub.base_url, timeout=0.25, max_retries=1)

    with pytest.raises(TransientLLMError) as info:
        judge(client)

    assert "timed out after 0.25s" in str(info.value) and llm_stub.base_url in str(info.value)
    assert info.value.attempts == 2 and len(sleeps) == 1
    assert len(llm_stub.requests) == 2
    assert [r.status for r in records] == ["error"] and records[0].attempts == 2
    assert info.value.record is records[0] and "timed out" in records[0].error


def test_server_down_names_the_url():
    url = closed_port_url()
    client, records, sleeps = make(url, max_retries=2)

    with pytest.raises(TransientLLMError) as info:
        judge(client)

    message = str(info.value)
    assert f"cannot connect to {url}/chat/completions" in message
    assert "giving up after 3 attempt(s)" in message
    assert info.value.attempts == 3 and len(sleeps) == 2
    assert records[0].status == "error" and records[0].error == message


def test_401_is_permanent_and_not_retried(llm_stub):
    llm_stub.script(error(401, "Incorrect API key provided"), ok_json(GOOD))
    client, records, sleeps = make(llm_stub.base_url, max_retries=5)

    with pytest.raises(PermanentLLMError) as info:
        judge(client)

    assert not isinstance(info.value, TransientLLMError)
    assert "HTTP 401" in str(info.value) and "Incorrect API key" in str(info.value)
    assert len(llm_stub.requests) == 1 and sleeps == []
    assert records[0].status == "error" and records[0].attempts == 1


def test_retry_after_beyond_the_limit_is_left_to_the_queue(llm_stub):
    llm_stub.script(rate_limited("600"))
    client, records, sleeps = make(llm_stub.base_url, max_retry_after=60)

    with pytest.raises(TransientLLMError) as info:
        judge(client)

    assert info.value.retry_after == 600 and sleeps == [] and len(llm_stub.requests) == 1


def test_retry_after_forms():
    assert parse_retry_after({"retry-after": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=lambda: 1445412480.0) == 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_recorder_sees_every_call_including_failures(llm_stub):
    llm_stub.script(
        ok("not json"),  # a: invalid, re-asked
        ok_json(GOOD),  # a: ok
        error(400, "context length exceeded"),  # b: permanent
        error(500, "boom"),  # c: transient, retried...
        error(500, "boom"),  # ...and given up
    )
    client, records, _ = make(llm_stub.base_url, max_retries=1)

    judge(client, subject="a")
    with pytest.raises(PermanentLLMError):
        judge(client, subject="b")
    with pytest.raises(TransientLLMError):
        judge(client, subject="c")

    assert [(r.subject, r.status) for r in records] == [
        ("a", "invalid_output"),
        ("a", "ok"),
        ("b", "error"),
        ("c", "error"),
    ]
    assert [r.attempts for r in records] == [1, 1, 1, 2]


# -- cache, cost -----------------------------------------------------------------------------------


def test_identical_request_is_answered_from_the_cache(llm_stub):
    llm_stub.script(ok_json(GOOD))
    cache = MemoryCache()
    client, records, _ = make(llm_stub.base_url, cache=cache, prices={"stub-model": (1.0, 2.0)})

    first = judge(client)
    again = judge(client, subject="skill:42")

    assert len(llm_stub.requests) == 1
    assert again.parsed == first.parsed
    assert again.record.status == "cached" and again.record.cost_usd == 0.0 and again.record.attempts == 0
    assert again.record.request_hash == first.record.request_hash
    assert [r.status for r in records] == ["ok", "cached"]

    # Anything that changes the answer changes the hash.
    llm_stub.script(ok_json(GOOD))
    judge(client, messages=[*MESSAGES[:1], {"role": "user", "content": "another skill"}])
    assert len(llm_stub.requests) == 2


def test_json_dir_cache_survives_a_new_client(llm_stub, tmp_path):
    llm_stub.script(ok("nope"), ok_json(GOOD))
    first_client, _, _ = make(llm_stub.base_url, cache=JsonDirCache(tmp_path / "cache"))
    first = judge(first_client)

    # Another process resuming the run, pointed at a different host serving the same model.
    resumed, records, _ = make(closed_port_url(), cache=JsonDirCache(tmp_path / "cache"))
    again = judge(resumed)

    assert again.parsed == first.parsed and records[0].status == "cached"
    assert len(llm_stub.requests) == 2
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 1


def test_cost_is_estimated_from_the_price_table(llm_stub):
    llm_stub.script(ok_json(GOOD, usage=(1_000_000, 500_000)), ok_json(GOOD, usage=(10, 10)))
    client, _, _ = make(llm_stub.base_url, prices={"stub-model": (0.5, 2.0)})
    assert judge(client).record.cost_usd == pytest.approx(0.5 + 1.0)

    unpriced, _, _ = make(llm_stub.base_url, model="unknown-model", prices={"stub-model": (0.5, 2.0)})
    assert judge(unpriced).record.cost_usd is None


# -- record and replay -----------------------------------------------------------------------------


def test_record_then_replay_with_reworded_prompt(llm_stub, tmp_path):
    cassette = tmp_path / "demo.jsonl"
    llm_stub.script(ok("prose first"), ok_json(GOOD), ok_json({"label": "skip", "score": 0}), ok("free text"))
    recorder_client, _, _ = make(llm_stub.base_url, record_path=str(cassette))
    recorded_a = judge(recorder_client, subject="skill:1")
    recorded_b = judge(recorder_client, subject="skill:2")
    recorded_t = recorder_client.complete_text(stage="agent", subject="skill:1", prompt_version="v1", messages=MESSAGES)
    assert len(llm_stub.requests) == 4

    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert [(e["stage"], e["subject"], e["seq"]) for e in lines] == [
        ("judge", "skill:1", 0),
        ("judge", "skill:1", 1),
        ("judge", "skill:2", 0),
        ("agent", "skill:1", 0),
    ]
    assert tuple(lines[0]) == CASSETTE_FIELDS
    assert lines[1]["usage"] == {"prompt_tokens": 120, "completion_tokens": 30}
    assert lines[1]["messages"][-1]["role"] == "user" and lines[1]["source"] == "http"

    reworded = [MESSAGES[0], {"role": "user", "content": "Completely different wording of the question."}]
    player, records, _ = make("", provider="replay", cassette_path=str(cassette), model="")
    replay_b = judge(player, messages=reworded, subject="skill:2")  # order across subjects does not matter
    replay_a = judge(player, messages=reworded, subject="skill:1")
    replay_t = player.complete_text(stage="agent", subject="skill:1", prompt_version="v1", messages=reworded)

    assert replay_a.parsed == recorded_a.parsed and replay_b.parsed == recorded_b.parsed
    assert replay_t.text == recorded_t.text == "free text"
    assert [r.status for r in records] == ["replayed", "invalid_output", "replayed", "replayed"]
    assert records[0].messages == reworded and records[0].model == "stub-model"
    assert len(llm_stub.requests) == 4, "replay made an HTTP request"

    with pytest.raises(PermanentLLMError) as info:
        judge(player, subject="skill:99")
    assert "'judge'" in str(info.value) and "'skill:99'" in str(info.value) and str(cassette) in str(info.value)
    assert records[-1].status == "error"
    with pytest.raises(PermanentLLMError, match="only 2 call"):
        judge(player, subject="skill:1")


def test_resumed_recording_continues_the_numbering(llm_stub, tmp_path):
    cassette = tmp_path / "demo.jsonl"
    llm_stub.script(ok_json(GOOD), ok_json({"label": "second", "score": 2}))
    make(llm_stub.base_url, record_path=str(cassette))[0].complete_text(
        stage="judge", subject="s", prompt_version="v1", messages=MESSAGES
    )
    make(llm_stub.base_url, record_path=str(cassette))[0].complete_text(
        stage="judge", subject="s", prompt_version="v1", messages=MESSAGES
    )
    with cassette.open("a") as fh:
        fh.write('{"stage": "judge", "subj')  # a run killed mid-line

    assert [json.loads(line)["seq"] for line in cassette.read_text().splitlines()[:2]] == [0, 1]
    player, _, _ = make("", provider="replay", cassette_path=str(cassette))
    assert judge(player, subject="s").parsed == Verdict(**GOOD)
    assert judge(player, subject="s").parsed.label == "second"


def test_recording_with_a_warm_cache_still_yields_a_complete_cassette(llm_stub, tmp_path):
    cassette = tmp_path / "demo.jsonl"
    cache = MemoryCache()
    llm_stub.script(ok_json(GOOD))
    judge(make(llm_stub.base_url, cache=cache)[0])  # earlier run, not recorded
    recorder_client, records, _ = make(llm_stub.base_url, cache=cache, record_path=str(cassette))
    judge(recorder_client)

    assert records[0].status == "cached" and len(llm_stub.requests) == 1
    [entry] = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert entry["source"] == "cache" and json.loads(entry["response_text"]) == GOOD


# -- settings ---------------------------------------------------------------------------------------


def test_settings_from_env_and_stage_profiles(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-file")
    env = {
        "FACET_LLM_BASE_URL": "http://gpu-box:8000/v1",
        "FACET_LLM_API_KEY_FILE": str(key),
        "FACET_LLM_MODEL": "qwen3-32b",
        "FACET_LLM_TEMPERATURE": "0.2",
        "FACET_LLM_MAX_TOKENS": "2048",
        "FACET_LLM_TIMEOUT": "90",
        "FACET_LLM_PROVIDER": "openai",
        "FACET_LLM_RECORD": str(tmp_path / "rec.jsonl"),
        "FACET_LLM_PRICES": '{"qwen3-32b": [0.1, 0.3], "gpt-4.1": [2, 8]}',
    }
    s = LLMSettings.from_env(env)
    assert (s.base_url, s.model, s.temperature, s.max_tokens, s.timeout) == (
        "http://gpu-box:8000/v1",
        "qwen3-32b",
        0.2,
        2048,
        90.0,
    )
    assert s.resolve_api_key() == "sk-file" and s.record_path == str(tmp_path / "rec.jsonl")
    assert s.prices == {"qwen3-32b": (0.1, 0.3), "gpt-4.1": (2.0, 8.0)}
    assert "sk-" not in repr(LLMSettings(api_key="sk-secret"))

    judge_settings = s.for_stage("judge", {"judge": {"model": "gpt-4.1", "timeout": "30", "max_tokens": None}})
    assert (judge_settings.model, judge_settings.timeout, judge_settings.max_tokens) == ("gpt-4.1", 30.0, None)
    assert s.for_stage("draft", {"judge": {"model": "x"}}) is s
    with pytest.raises(LLMConfigError, match="unknown field"):
        s.for_stage("judge", {"judge": {"modle": "x"}})
    with pytest.raises(LLMConfigError, match="FACET_LLM_PRICES"):
        LLMSettings.from_env({"FACET_LLM_PRICES": "{not json"})
    with pytest.raises(LLMConfigError, match="provider"):
        LLMSettings.from_env({"FACET_LLM_PROVIDER": "anthropic"})
    with pytest.raises(LLMConfigError, match="key file"):
        LLMSettings(api_key_file=str(tmp_path / "missing")).resolve_api_key()
    with pytest.raises(LLMConfigError, match="cassette"):
        LLMClient(LLMSettings(provider="replay"))


def test_stage_client_shares_recorder_and_cache(llm_stub):
    llm_stub.script(ok_json(GOOD))
    cache = MemoryCache()
    client, records, _ = make(llm_stub.base_url, cache=cache)
    judge_client = client.for_stage("judge", {"judge": {"max_tokens": 77}})

    judge(judge_client)

    assert llm_stub.bodies[0]["max_tokens"] == 77 and records[0].status == "ok" and len(cache) == 1


# -- prompts ----------------------------------------------------------------------------------------


def test_prompt_loader_picks_the_highest_version_and_renders_safely():
    prompts = FIXTURES / "prompts"
    latest = load_prompt(prompts, "summarize")
    assert latest.version == "v10" and latest.meta["description"] == "adds the file list"
    assert latest.system.startswith("You summarize agent skills.")
    assert latest.placeholders == {"skill_json", "files", "name"}

    pinned = load_prompt(prompts, "summarize", version=2)
    assert pinned.version == "v2" and "files" not in pinned.placeholders

    skill = {"name": "csv2parquet", "steps": ["{{name}}", "echo ${HOME} {x}"], "nested": {"a": {}}}
    messages = latest.messages(skill_json=skill, files="a.py\nb.{c,d}", name="csv2parquet")
    user = messages[1]["content"]
    assert json.loads(user.split("<skill>\n")[1].split("\n</skill>")[0]) == skill
    assert "{{name}}" in user, "a placeholder inside an inserted value must not be expanded"
    assert "b.{c,d}" in user and "echo $HOME" in user and "{literal braces}" in user
    assert messages[0] == {"role": "system", "content": latest.system.replace("{{name}}", "csv2parquet")}

    with pytest.raises(PromptError, match=r"placeholder\(s\) files, name"):
        latest.messages(skill_json="{}")
    with pytest.raises(PromptError, match="no prompt v7"):
        load_prompt(prompts, "summarize", version="v7")
    with pytest.raises(PromptError, match="no prompt files"):
        load_prompt(prompts, "nonexistent")


def test_overrides_are_laid_over_settings_by_one_function(tmp_path):
    base = LLMSettings(base_url="http://gpu-box:8000/v1", model="qwen3-32b", max_tokens=2048)
    run = base.overlaid({"model": "small", "cassette_path": tmp_path / "c.jsonl", "max_tokens": "none",
                         "timeout": "30"}, source="the run's llm settings")
    assert (run.base_url, run.model, run.cassette_path, run.max_tokens, run.timeout) == (
        "http://gpu-box:8000/v1", "small", str(tmp_path / "c.jsonl"), None, 30.0)
    assert base.overlaid({}, source="nothing") is base and base.model == "qwen3-32b"
    with pytest.raises(LLMConfigError, match="the run's llm settings sets unknown field"):
        base.overlaid({"cassette": "x"}, source="the run's llm settings")
    # a stage's profile goes through the same function
    assert base.for_stage("judge", {"judge": {"timeout": "30"}}) == base.overlaid({"timeout": 30}, source="x")
