"""`facet prompts` and the admins' prompts page: every prompt with its versions, one rendered with a
call stored by a real request to the scripted model, tokens per stage of that call's chain, and
the page closed to everyone but admins."""
import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from demo import scripted_llm
from facet_site.lib.llm import LLMClient, LLMSettings
from facet_site.lib.llm.tokens import approx_message_tokens, approx_tokens
from scenarios import llm, outputs
from tests.html_safety import active_content

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[1]
PROMPT_DIRS = [ROOT / "scenarios" / "prompts", ROOT / "tasks" / "prompts", ROOT / "skills" / "prompts"]
EVIL = "<script>alert('prompt')</script>"


def prompt_files() -> dict[str, list[str]]:
    """stage -> its versions, read from the prompt directories themselves."""
    found: dict[str, list[str]] = {}
    for directory in PROMPT_DIRS:
        for path in directory.glob("*.v*.md"):
            stage, version = re.match(r"(.+)\.(v\d+)\.md$", path.name).groups()
            found.setdefault(stage, []).append(version)
    return {stage: sorted(v, key=lambda x: int(x[1:])) for stage, v in found.items()}


def run(*args) -> str:
    out = StringIO()
    call_command("prompts", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def stored_calls():
    """Calls made the way the pipeline makes them (the v2 prompts rendered, sent over HTTP to the
    scripted model, recorded by the database recorder): a skill's hypotheses, and for one pair the
    judge and the dimensions, plus another pair's judge that is not part of the first pair's chain."""
    skill = {"id": 1, "name": "csv-dedupe", "description": f"Remove duplicate rows from CSV files {EVIL}",
             "category": None, "required_tools": ["python3"], "inputs": ["orders.csv"], "outputs": ["clean.csv"], "steps": []}
    other = {**skill, "id": 2, "name": "sqlite-report", "description": "Load CSV into SQLite and report revenue"}
    recorder = llm.DbRecorder(None)
    with scripted_llm.ScriptedLLMServer() as url:
        client = LLMClient(LLMSettings(provider="openai", base_url=url, model="scripted"), recorder=recorder)

        def call(stage, subject, schema, **values):
            p = llm.prompt(stage)
            client.complete(stage=stage, subject=subject, prompt_version=p.version, messages=p.messages(**values), schema=schema)
            return recorder.last

        hypotheses = call("hypotheses", "skill:csv", outputs.HypothesesOut, skill_json=json.dumps(skill, indent=1), count=2)
        skills_json = json.dumps([skill, other], indent=1)
        judge = call("judge", "pair:csv+sqlite", outputs.JudgeOut, scenario_text="- dedupe then report", skills_json=skills_json)
        dims = call("reconstruct.dimensions", "pair:csv+sqlite", outputs.DimensionsOut, skills_json=skills_json,
                    modules_json=json.dumps({"skill_analysis": {"skills": [{"skill": "csv-dedupe"}, {"skill": "sqlite-report"}]}}))
        elsewhere = call("judge", "pair:html+sqlite", outputs.JudgeOut, scenario_text="- a web page", skills_json=skills_json)
        client.close()
    return {"hypotheses": hypotheses, "judge": judge, "dimensions": dims, "elsewhere": elsewhere}


def test_list_names_every_prompt_file_with_its_versions():
    out = run("list")
    files = prompt_files()
    assert len(files) >= 20
    for stage, versions in files.items():
        line = next((row for row in out.splitlines() if re.search(rf"\s{re.escape(stage)}\s", row)), None)
        assert line is not None, f"{stage} missing from the list"
        assert ",".join(versions) in line and f" {versions[-1]} " in line
    assert re.search(r"^repair\s+task\.router\s", out, re.M) and re.search(r"^scenario\s+reconstruct\.dimensions\s", out, re.M)
    assert re.search(r"^rollout\s+rollout\.turn\s", out, re.M)


def test_render_prints_a_template_or_the_stored_example_as_sent(stored_calls):
    template = run("render", "reconstruct.information_expansion")
    assert "{{skills_json}}" in template and "{{workflow_json}}" in template
    assert template.startswith(f"# reconstruct.information_expansion {llm.prompt('reconstruct.information_expansion').version} ")
    older = run("render", "judge", "--version", "v1")
    assert older.startswith("# judge v1 ") and "strict reviewer" in older

    example = run("render", "hypotheses", "--example", "latest")
    call = stored_calls["hypotheses"]
    assert f"call #{call.pk} for skill:csv: prompt {llm.prompt('hypotheses').version}" in example
    assert "Remove duplicate rows from CSV files" in example  # the stored inputs, rendered into the text
    assert call.response_text in example and "Propose 2 distinct" in example


def test_render_refuses_an_unknown_stage_or_example(stored_calls):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no prompt file"):
        run("render", "no.such.stage")
    with pytest.raises(CommandError, match="no stored call"):
        run("render", "task.router", "--example", "latest")


def test_tokens_counts_each_stage_of_the_examples_chain_only(stored_calls):
    dims = stored_calls["dimensions"]
    out = run("tokens", "--stage", "reconstruct.dimensions")
    assert f"Example: call #{dims.pk} (reconstruct.dimensions) for pair:csv+sqlite" in out
    assert "approximate" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("judge", "reconstruct.", "hypotheses"))}
    assert set(rows) == {"judge", "reconstruct.dimensions"}  # the pair's calls; not the skill's hypotheses
    for stage, call in (("judge", stored_calls["judge"]), ("reconstruct.dimensions", dims)):
        _, version, prompt_tokens, answer_tokens, reported_in, reported_out, chars_4 = rows[stage]
        assert version == call.prompt_version
        chars = sum(len(m["content"]) for m in call.messages)
        assert chars / 6 < int(prompt_tokens) < chars / 2  # a token is a few characters, not one, not ten
        assert int(chars_4) == chars // 4  # the count the prompt budgets use
        assert int(answer_tokens) > 0
        assert int(reported_in) == call.tokens_in and int(reported_out) == call.tokens_out
    everything = run("tokens", "--all")
    assert re.search(r"^hypotheses\s", everything, re.M) and re.search(r"^judge\s", everything, re.M)


def test_the_token_estimate_is_near_a_bpe_tokenizers_count():
    # cl100k counts: 2 and 10 tokens (published examples); the estimate is labelled approximate
    assert approx_tokens("Hello world") == 2
    assert abs(approx_tokens("The quick brown fox jumps over the lazy dog.") - 10) <= 1
    longer = approx_message_tokens([{"role": "user", "content": "word " * 100}])
    assert 100 <= longer <= 115


def test_the_page_lists_the_prompts_and_renders_the_stored_example(client_as, stored_calls):
    page = client_as("admin").get(reverse("prompts"))
    assert page.status_code == 200
    html = page.content.decode()
    for stage, versions in prompt_files().items():
        assert f"<code>{stage}</code>" in html
        for version in versions:
            assert f"?version={version}\"><code>{version}</code>" in html

    judge = stored_calls["judge"]
    detail = client_as("admin").get(reverse("prompt", args=["judge"]))
    assert detail.status_code == 200
    html = detail.content.decode()
    latest = stored_calls["elsewhere"]  # the newest judge call is the example
    assert f"Call #{latest.pk} for <code>pair:html+sqlite</code>" in html
    assert "Remove duplicate rows from CSV files &lt;script&gt;" in html and EVIL not in html
    assert active_content(html) == []
    assert '<ul class="messages">' not in html  # the stored messages are the example, not notices
    assert re.search(r'<h3>system <span class="muted">≈ \d+ tokens</span></h3>\s*<pre class="prompt">You are a strict reviewer', html)
    assert 'id="tokens"' in html and f"#{latest.pk}</td>" in html and f"#{judge.pk}</td>" not in html

    chosen = client_as("admin").get(reverse("prompt", args=["judge"]), {"example": judge.pk}).content.decode()
    assert f"Call #{judge.pk} for <code>pair:csv+sqlite</code>" in chosen
    assert f"#{stored_calls['dimensions'].pk}</td>" in chosen  # the same pair's other stage, in the tokens table

    v1 = client_as("admin").get(reverse("prompt", args=["judge"]), {"version": "v1"}).content.decode()
    assert "Template v1" in v1
    assert client_as("admin").get(reverse("prompt", args=["judge"]), {"version": "v99"}).status_code == 404
    assert client_as("admin").get(reverse("prompt", args=["no.such.stage"])).status_code == 404
    other_stage = stored_calls["dimensions"].pk  # a call, but not of this stage
    assert client_as("admin").get(reverse("prompt", args=["judge"]), {"example": other_stage}).status_code == 404
    assert client_as("admin").get(reverse("prompt", args=["judge"]), {"example": "x"}).status_code == 404
    empty = client_as("admin").get(reverse("prompt", args=["task.router"])).content.decode()
    assert "No call of this stage is stored yet" in empty


def test_only_admins_see_the_prompts(client_as, users):
    for url in (reverse("prompts"), reverse("prompt", args=["judge"])):
        anonymous = Client().get(url)
        assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
        for role in ("reviewer", "viewer"):
            assert client_as(role).get(url).status_code == 403
    assert reverse("prompts") in client_as("admin").get(reverse("home")).content.decode()
    assert reverse("prompts") not in client_as("reviewer").get(reverse("home")).content.decode()
