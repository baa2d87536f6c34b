"""Private verdicts for the shapes the fifth blind check of real ClawHub uploads found (docs/skills.md,
"A fifth blind check"): a Required column in other languages, a key named but not as a variable under a
Requirements heading, a key the skill generates itself, a key in a service's own shape left as a
placeholder, billing per call, and a device on the user's own network said in prose. Each has a
look-alike that stays accepted. Written for the tests; none is copied from a real skill."""
from __future__ import annotations

import pytest

from facet_site.lib.skill_filters import PRIVATE, evaluate
from tests.lib.skill_filter_samples import bash, of_kind, reasons, skill_from

STEPS = bash("python3 scripts/forecast.py --crop wheat --out forecast.json")


# --------------------------------------------------------------------------------------------
# a Required column, translated
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("header, yes, no", [
    ("是否必需", "是", "否"),
    ("必填", "必填", "选填"),
    ("必須", "必須", "任意"),
    ("필수", "예", "아니오"),
    ("Obligatorio", "Sí", "No"),
    ("Obrigatório", "Sim", "Não"),
    ("Erforderlich", "Ja", "Nein"),
])
def test_a_required_column_in_another_language_says_which_key_is_needed(tmp_path, header, yes, no):
    table = (f"\n| 变量 | 说明 | {header} |\n|---|---|---|\n| `CROPS_API_KEY` | key | {yes} |\n"
             f"| `CROPS_REGION` | region | {yes} |\n| `WEATHER_API_KEY` | key | {no} |\n")
    skill = skill_from(tmp_path, STEPS + table)
    assert reasons(evaluate(skill), PRIVATE) == {"requires secret CROPS_API_KEY"}
    # look-alike: every key in the column says no
    skill = skill_from(tmp_path, STEPS + table.replace(f"| {yes} |", f"| {no} |"), name="t")
    assert of_kind(evaluate(skill), PRIVATE) == []


# --------------------------------------------------------------------------------------------
# a key named as a thing, not a variable, under a Requirements heading
# --------------------------------------------------------------------------------------------


def test_a_key_listed_under_requirements_without_a_variable_name_is_required(tmp_path):
    reqs = ("\n## Requirements\n\n- **Relay API key** configured at `~/.openclaw/skills/relay/config.json`\n"
            "- **Node.js** with the `viem` package\n")
    [hit] = of_kind(evaluate(skill_from(tmp_path, STEPS + reqs)), PRIVATE)
    assert hit.reason == "requires an API key (stated in prose)" and "Relay API key" in hit.evidence
    # look-alikes: the key is optional, or the list names no key
    optional = reqs.replace("configured at", "(optional, for higher limits) configured at")
    assert of_kind(evaluate(skill_from(tmp_path, STEPS + optional, name="t")), PRIVATE) == []
    tools = "\n## Requirements\n\n- **Node.js** 20 or later\n- **ffmpeg** on the PATH\n"
    assert of_kind(evaluate(skill_from(tmp_path, STEPS + tools, name="u")), PRIVATE) == []


def test_a_key_the_skill_generates_itself_is_not_one_to_be_given(tmp_path):
    # a real upload's security notes: an identity key made with Ed25519 on first run
    made = "\n## 安全性\n\n- 使用**Ed25519**算法生成身份密钥（用于身份验证）\n- 密钥始终存储在设备本地\n"
    assert of_kind(evaluate(skill_from(tmp_path, STEPS + made)), PRIVATE) == []
    # look-alike: a key generated in a provider's console is one the user must get
    console = "\n## 配置\n\n请先在控制台生成API密钥，然后设置环境变量。\n"
    assert of_kind(evaluate(skill_from(tmp_path, STEPS + console, name="t")), PRIVATE) != []


# --------------------------------------------------------------------------------------------
# a key in the service's own shape, with its secret part left out
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["chirp_xxx", "sk-...", "xxxxxxxx", "chirp_…"])
def test_a_bearer_token_left_as_a_placeholder_is_a_required_key(tmp_path, token):
    post = bash(f'curl -X POST https://chirp.example/api/v1/posts -H "Authorization: Bearer {token}" -d \'{{"text": "hi"}}\'')
    [hit] = of_kind(evaluate(skill_from(tmp_path, post)), PRIVATE)
    assert hit.reason == "requires an API key or token"


def test_a_public_token_written_out_is_not_a_placeholder(tmp_path):
    # look-alike: a documented demo token is whole, so there is nothing for the user to fill in
    post = bash('curl https://demo.example/api/v1/ping -H "Authorization: Bearer demo-public-token"')
    assert of_kind(evaluate(skill_from(tmp_path, post)), PRIVATE) == []


# --------------------------------------------------------------------------------------------
# billed per call
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    "Every API call is billed via PayRail (0.001 USDT / call) after the free trial.",
    "> **计费方式**: PayRail（每次调用消耗1个令牌，约0.001美元）",
    "Pricing: $0.002 per request, charged to your PayRail balance.",
    "本技能按使用次数计费。",
])
def test_a_skill_billed_for_each_call_is_private(tmp_path, line):
    [hit] = of_kind(evaluate(skill_from(tmp_path, STEPS + "\n" + line + "\n")), PRIVATE)
    assert hit.reason == "pays per call (billed for each call)"


@pytest.mark.parametrize("line", [
    "- **Minimal** — ~180 tokens per call",  # the size of a model's answer, not money
    "Optional billing: supports PayRail for paid usage; every call is free without it.",
    "Add per-request billing to your own API: charge callers $0.01 per call.",  # a seller's tool
    "每次调用消耗约2000个token。",
])
def test_token_counts_optional_billing_and_sellers_tools_are_not_billing_the_user(tmp_path, line):
    assert of_kind(evaluate(skill_from(tmp_path, STEPS + "\n" + line + "\n")), PRIVATE) == []


# --------------------------------------------------------------------------------------------
# a device on the user's own network, said in prose
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    "4. **Network Requirements**: The machine running the script must be on the same network as the music server",
    "2. **Must be on same WiFi as the purifier** - local MQTT only",
    "使用前需要确保电脑与音箱在同一局域网内。",
])
def test_a_device_on_the_same_network_is_private(tmp_path, line):
    [hit] = of_kind(evaluate(skill_from(tmp_path, STEPS + "\n" + line + "\n")), PRIVATE)
    assert hit.reason == "uses a device on the user's own network"


@pytest.mark.parametrize("line", [
    "The client does not need to be on the same network as the server: it talks to the cloud API.",
    "Respond in the same language as the user.",
    "Both agents should use the same model for reproducible runs.",
])
def test_the_same_network_negated_or_other_sameness_is_not_private(tmp_path, line):
    assert of_kind(evaluate(skill_from(tmp_path, STEPS + "\n" + line + "\n")), PRIVATE) == []
