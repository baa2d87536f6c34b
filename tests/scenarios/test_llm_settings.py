"""The LLM settings a run's calls use: settings.FACET_LLM (read once from FACET_LLM_*), with the run's
own "llm" section laid over it."""
from facet_site.lib.llm import LLMSettings
from scenarios.llm import llm_settings


def test_the_settings_come_from_settings_py_and_the_run_overrides_what_it_names(settings, tmp_path):
    settings.FACET_LLM = LLMSettings(base_url="http://gpu-box:8000/v1", model="qwen3-32b", max_retries=1)
    given = {"model": "small-model", "provider": "replay", "cassette": tmp_path / "demo.cassette.jsonl",
             "record": str(tmp_path / "out.jsonl"), "base_url": "", "profiles": {"judge": {"model": "strong"}}}
    s = llm_settings(given)
    assert (s.model, s.provider, s.cassette_path, s.record_path) == (
        "small-model", "replay", str(tmp_path / "demo.cassette.jsonl"), str(tmp_path / "out.jsonl"))
    # empty values fall back to the settings; profiles are per stage, not for the run as a whole
    assert (s.base_url, s.max_retries) == ("http://gpu-box:8000/v1", 1)
    assert llm_settings(None) == settings.FACET_LLM and llm_settings({"model": ""}).model == "qwen3-32b"
