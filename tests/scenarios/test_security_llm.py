"""Issue 18, item 1: a run's config cannot reach the server's files, redirect the LLM key or write
anywhere. Endpoints are the operator's (settings.FACET_LLM_ENDPOINTS), chosen by name; URLs, keys,
cassettes and record paths in a run are refused with a 422 naming the field, before anything is
read, written or contacted (a listener on 127.0.0.1 must receive nothing)."""
import socket
import threading

import pytest

from demo import scripted_llm
from facet_site.lib.llm import LLMSettings
from facet_site.lib.llm.settings import LLMEndpoint, endpoints_from_env
from facet_site.lib.llm.errors import LLMConfigError
from scenarios import llm, services
from scenarios.models import LLMCall, RunStatus, SynthesisRun
from scenarios.run_config import RunConfigError
from tasks.models import RolloutBatch
from tasks.rollouts import llm_settings as batch_settings
from tests.tasks.review_records import make_run, make_task

pytestmark = pytest.mark.django_db


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection made to it."""

    def __enter__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.connections, self.stop = 0, False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _accept(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join()
        self.sock.close()


@pytest.fixture
def reviewer_api(client, token_for):
    header = {"HTTP_AUTHORIZATION": f"Bearer {token_for('reviewer')}"}

    def post(url, payload):
        return client.post(url, payload, content_type="application/json", **header)

    return post


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "secret_key"
    path.write_text("the-django-secret")
    return path


ATTACKS = [
    ({"base_url": "{url}"}, "llm.base_url"),
    ({"record": "{tmp}/outside/recorded.jsonl"}, "llm.record"),
    ({"cassette": "{secret}"}, "llm.cassette"),
    ({"cassette": "{tmp}/does-not-exist.jsonl"}, "llm.cassette"),
    ({"api_key_file": "{secret}", "base_url": "{url}"}, "llm.api_key_file"),
    ({"api_key": "sk-x"}, "llm.api_key"),
    ({"provider": "replay"}, "llm.provider"),
    ({"profiles": {"judge": {"api_key_file": "{secret}", "base_url": "{url}"}}}, "llm.profiles.judge.api_key_file"),
    ({"profiles": {"judge": {"base_url": "{url}"}}}, "llm.profiles.judge.base_url"),
    ({"profiles": {"judge": {"record": "{tmp}/outside/judge.jsonl"}}}, "llm.profiles.judge.record"),
    ({"profiles": {"judge": {"cassette": "{secret}"}}}, "llm.profiles.judge.cassette"),
    ({"endpoint": "elsewhere"}, "llm.endpoint"),
]


def _fill(value, **names):
    if isinstance(value, dict):
        return {k: _fill(v, **names) for k, v in value.items()}
    return value.format(**names)


@pytest.mark.parametrize("llm_section, field", ATTACKS)
def test_a_run_that_names_a_url_key_or_path_is_refused_and_nothing_is_contacted_read_or_written(
        corpus, reviewer_api, secret_file, tmp_path, llm_section, field, django_capture_on_commit_callbacks):
    listener = Listener()
    with listener as url:
        section = _fill(llm_section, url=url, secret=secret_file, tmp=tmp_path)
        with django_capture_on_commit_callbacks(execute=True):
            response = reviewer_api("/api/runs", {"name": "probe", "config": {"llm": section}})
        assert response.status_code == 422, response.content
        assert response.json()["detail"].startswith(f"{field}:")
        assert "the-django-secret" not in response.content.decode()
        assert not SynthesisRun.objects.exists()
    assert listener.connections == 0
    assert not (tmp_path / "outside").exists()


def test_the_listener_sees_a_run_the_operator_points_at_it(corpus, settings):
    """The probe above can fail: a run the operator's CLI points at the listener does contact it."""
    settings.FACET_LLM = LLMSettings(max_retries=0, timeout=2)
    listener = Listener()
    with listener as url:
        run = services.start_run(name="operator", enqueue=False, trusted=True,
                                 config={"limits": {"max_pairs": 1}, "llm": {"base_url": url, "model": "m"}})
        services.execute_run_inline(run.pk)
    assert listener.connections > 0


def test_a_run_chooses_a_named_endpoint_whose_key_stays_on_the_server(corpus, reviewer_api, settings, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("operator-key")
    with scripted_llm.ScriptedLLMServer() as url:
        settings.FACET_LLM_ENDPOINTS = {
            "default": LLMEndpoint("default", settings.FACET_LLM),
            "scripted": LLMEndpoint("scripted", LLMSettings(base_url=url, model="scripted", api_key_file=str(key_file)),
                                    models=("scripted", "scripted-large"), max_tokens_cap=4096),
        }
        response = reviewer_api("/api/runs", {"name": "named", "config": {"limits": {"max_pairs": 2},
                                                                          "llm": {"endpoint": "scripted"}}})
        assert response.status_code == 201, response.content
        assert "operator-key" not in response.content.decode() and str(key_file) not in response.content.decode()
        run = services.execute_run_inline(response.json()["id"])
    assert run.status == RunStatus.SUCCEEDED
    assert set(LLMCall.objects.filter(run=run).values_list("model", flat=True)) == {"scripted"}
    bad_model = reviewer_api("/api/runs", {"name": "x", "config": {"llm": {"endpoint": "scripted", "model": "gpt-x"}}})
    assert bad_model.status_code == 422 and bad_model.json()["detail"].startswith("llm.model:")
    too_many = reviewer_api("/api/runs", {"name": "x", "config": {"llm": {"endpoint": "scripted", "max_tokens": 10**6}}})
    assert too_many.status_code == 422 and too_many.json()["detail"].startswith("llm.max_tokens:")


def test_a_stage_profile_on_another_endpoint_gets_that_endpoints_key_not_the_defaults(settings, tmp_path):
    settings.FACET_LLM = LLMSettings(base_url="http://default.invalid/v1", api_key="default-key", model="small")
    settings.FACET_LLM_ENDPOINTS = {
        "default": LLMEndpoint("default", settings.FACET_LLM),
        "strong": LLMEndpoint("strong", LLMSettings(base_url="http://strong.invalid/v1", api_key="strong-key", model="big")),
    }
    run = SynthesisRun(config={"llm": {"model": "small", "profiles": {"judge": {"endpoint": "strong", "temperature": 0.5}}}})
    client, _ = llm.client_for(run)
    judge = llm.stage_client(client, run, "judge").settings
    assert (judge.base_url, judge.resolve_api_key(), judge.model, judge.temperature) == (
        "http://strong.invalid/v1", "strong-key", "big", 0.5)
    hypotheses = llm.stage_client(client, run, "hypotheses").settings
    assert (hypotheses.base_url, hypotheses.resolve_api_key()) == ("http://default.invalid/v1", "default-key")


def test_endpoints_come_from_the_environment_with_keys_by_variable_name(tmp_path):
    default = LLMSettings(base_url="http://default/v1", api_key="default-key")
    endpoints = endpoints_from_env({
        "FACET_LLM_ENDPOINTS": '{"strong": {"base_url": "http://strong/v1", "model": "big", "api_key_env": "STRONG_KEY",'
                               ' "models": ["big", "bigger"], "max_tokens_cap": 8192}}',
        "STRONG_KEY": "strong-key"}, default)
    assert endpoints["default"].settings is default
    strong = endpoints["strong"]
    assert (strong.settings.base_url, strong.settings.resolve_api_key(), strong.models, strong.max_tokens_cap) == (
        "http://strong/v1", "strong-key", ("big", "bigger"), 8192)
    assert "strong-key" not in repr(strong)
    with pytest.raises(LLMConfigError, match="FACET_LLM_ENDPOINTS.x: unknown field"):
        endpoints_from_env({"FACET_LLM_ENDPOINTS": '{"x": {"api_key": "inline"}}'}, default)
    with pytest.raises(LLMConfigError, match="not valid JSON"):
        endpoints_from_env({"FACET_LLM_ENDPOINTS": "{"}, default)


@pytest.mark.parametrize("config, field", [
    ({"limits": {"max_pairs": 2**70}}, "limits.max_pairs"),
    ({"limits": {"k": 10**30}}, "limits.k"),
    ({"limits": {"max_tokens": 2**64}}, "limits.max_tokens"),
    ({"skills": {"max_skills": 2**70}}, "skills.max_skills"),
    ({"skills": {"categories": [{"a": 1}]}}, "skills.categories"),
    ({"skills": {"source": "a\x00b"}}, "skills.source"),
    ({"llm": {"model": "a\x00b"}}, "llm.model"),
    ({"llm": {"temperature": 10**40}}, "llm.temperature"),
    ({"construction": {"max_repair_rounds": 2**70}}, "construction.max_repair_rounds"),
])
def test_huge_numbers_and_nul_bytes_in_a_run_config_are_refused_naming_the_field(corpus, config, field):
    with pytest.raises(RunConfigError, match=f"^{field.replace('.', '[.]')}:"):
        services.start_run(name="bad", config=config, enqueue=False)


def test_the_operator_cli_may_still_replay_a_cassette(corpus):
    run = services.start_run(name="cli", enqueue=False, trusted=True,
                             config={"llm": {"provider": "replay", "cassette": "/nonexistent"}})
    assert llm.llm_settings_for(run).cassette_path == "/nonexistent"
    with pytest.raises(RunConfigError, match="^llm.profiles.judge.base_url:"):
        services.start_run(name="cli", enqueue=False, trusted=True,
                           config={"llm": {"profiles": {"judge": {"base_url": "http://x"}}}})


def test_a_rollout_batch_chooses_an_endpoint_by_name_and_nothing_else(reviewer_api, settings):
    make_task(make_run())
    settings.FACET_LLM_ENDPOINTS = {"default": LLMEndpoint("default", settings.FACET_LLM),
                                    "strong": LLMEndpoint("strong", LLMSettings(base_url="http://strong.invalid/v1",
                                                                                model="big"))}
    unknown = reviewer_api("/api/rollouts", {"endpoint": "elsewhere", "attempts": 1})
    assert unknown.status_code == 422 and unknown.json()["detail"].startswith("llm.endpoint: no endpoint named 'elsewhere'")
    chosen = reviewer_api("/api/rollouts", {"endpoint": "strong", "attempts": 1})
    assert chosen.status_code == 201, chosen.content
    batch = RolloutBatch.objects.get(pk=chosen.json()["id"])
    assert batch.model == "big" and batch.config["llm"]["endpoint"] == "strong"
    assert batch_settings(batch).base_url == "http://strong.invalid/v1"
