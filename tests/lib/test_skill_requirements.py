"""Credential requirements (skill_requirements, through skill_filters.evaluate): required versus optional
credentials and requirements stated in prose, in tables, in lists, in the skill's own scripts and
setup documents, each with look-alikes that stay accepted."""
from __future__ import annotations

import pytest

from facet_site.lib import skill_requirements
from facet_site.lib.skill_filters import PRIVATE, evaluate, requirements
from tests.lib.skill_filter_samples import FRONT, bash, of_kind, reasons, skill_from


# --------------------------------------------------------------------------------------------
# private: required vs optional credentials, requirements stated in prose (skill_requirements)
# --------------------------------------------------------------------------------------------


ENV_FRONT = "---\nname: w\ndescription: weather\nmetadata: {\"openclaw\": {\"requires\": {\"env\": [\"WEATHER_API_KEY\"]}}}\n---\n"


@pytest.mark.parametrize(
    "text, why",
    [
        ("Set `WEATHER_API_KEY` (optional) for higher limits.", "optional"),
        ("If you have a WEATHER_API_KEY, export it to get hourly data.", "if you have"),
        ("Works without an API key in free mode; a key adds radar maps.", "no-key path"),
        ("No API key required for the basic forecast.", "no-key path"),
    ],
)
def test_an_optional_key_or_a_free_mode_is_not_private_but_is_recorded(tmp_path, text, why):
    skill = skill_from(tmp_path, bash("curl https://api.weather.example/today") + "\n" + text + "\n", front=ENV_FRONT)

    assert of_kind(evaluate(skill), PRIVATE) == []
    found = requirements(skill)
    [req] = found.items
    assert (req.name, req.required, req.source, req.line) == ("WEATHER_API_KEY", False, "frontmatter", 4)
    assert req.optional_because
    if why == "no-key path":
        assert found.no_key_path and found.no_key_line == 12
    else:
        assert "optional" in req.optional_because


def test_a_declared_key_without_optional_wording_stays_required(tmp_path):
    skill = skill_from(tmp_path, bash("curl https://api.weather.example/today"), front=ENV_FRONT)
    [hit] = of_kind(evaluate(skill), PRIVATE)
    assert hit.reason == "requires secret WEATHER_API_KEY"
    req = requirements(skill).to_dict()
    assert req["no_key_path"] is False and req["requirements"][0]["required"] is True


@pytest.mark.parametrize(
    "text, reason, line",
    [
        ("Needs env: OPENAI_API_KEY", "requires secret OPENAI_API_KEY", 11),
        ("Required environment variables: NOTION_TOKEN, NOTION_DB", "requires secret NOTION_TOKEN", 11),
        ("- API key (required): create one in the dashboard.", "requires an API key (stated in prose)", 11),
        ("You'll need a personal access token from the settings page.", "requires an API key (stated in prose)", 11),
        # bold is emphasis: a real later upload said "you need a **Humanod API Key**" and was accepted
        ("To use this skill, you need a **Forum API Key**.", "requires an API key (stated in prose)", 11),
        ("An API key is required for every call.", "requires an API key (stated in prose)", 11),
        ("You must set `NOTION_TOKEN` before using this skill.", "requires secret NOTION_TOKEN", 11),
        ("Create an API key in the dashboard and save it as `LINEAR_API_KEY`.", "requires secret LINEAR_API_KEY", 11),
        ("1. Generate your API key on the account page.", "requires an API key (stated in prose)", 11),
        ("| Variable | Required | Description |\n|---|---|---|\n| `STRIPE_SECRET_KEY` | yes | your secret key |",
         "requires secret STRIPE_SECRET_KEY", 13),
        # other languages public skills are written in
        ("使用前需要设置环境变量 `DEEPSEEK_API_KEY`（必需）。", "requires secret DEEPSEEK_API_KEY", 11),
        ("1. 前往开放平台申请 API Key", "requires an API key (stated in prose)", 11),
        ("API Key（必需）：在控制台创建", "requires an API key (stated in prose)", 11),
        ("環境変数 `DEEPL_API_KEY` の設定が必要です。", "requires secret DEEPL_API_KEY", 11),
        ("Necesitas una clave de API de OpenWeather.", "requires an API key (stated in prose)", 11),
        ("Vous devez définir `MISTRAL_API_KEY` avant de lancer le script.", "requires secret MISTRAL_API_KEY", 11),
        ("Ein API-Schlüssel ist erforderlich.", "requires an API key (stated in prose)", 11),
    ],
)
def test_requirements_stated_only_in_prose_are_private(tmp_path, text, reason, line):
    skill = skill_from(tmp_path, bash("curl https://api.example.com/v1/items") + "\n" + text + "\n")
    [hit] = of_kind(evaluate(skill), PRIVATE)
    assert (hit.reason, hit.line) == (reason, line)
    [req] = requirements(skill).required
    assert req.source == "prose" and req.path == "SKILL.md"


@pytest.mark.parametrize(
    "text",
    ["No API key is needed; the endpoint is public.", "This tool does not need an API key.",
     "Needs env: OUTPUT_DIR", "An API key is optional and only raises the rate limit.",
     "You must set `OUTPUT_DIR` to a writable folder.", "Optionally create an API key to lift the rate limit.",
     "| Variable | Required |\n|---|---|\n| `SENTRY_AUTH_TOKEN` | no |",
     "| Name | Required | Notes |\n|---|---|---|\n| `GITHUB_TOKEN` | optional | higher rate limits |",
     "Do I need an API key? No, the endpoint is public.",
     "无需 API Key，直接运行即可。", "**Q: 需要API Key吗？**\nA: 不需要，免费接口无需Key。",
     "API Key（可选）：设置后可提高速率限制。", "如果有 `GITHUB_TOKEN` 需要设置，可以提高限额。",
     "需要 JSON 文件作为输入。", "APIキーは不要です。", "Funktioniert ohne API-Schlüssel.",
     "Opcional: define `WEATHER_API_KEY` para más peticiones.",
     # an SSH key the skill generates itself (a published SSH operations skill's first step)
     "### 1. 生成密钥（如果还没有）\n\n```bash\nbash scripts/ssh-key-setup.sh gen\n```"],
)
def test_prose_that_needs_no_key_is_not_private(tmp_path, text):
    skill = skill_from(tmp_path, bash("curl https://api.example.com/v1/items") + "\n" + text + "\n")
    assert of_kind(evaluate(skill), PRIVATE) == []


def test_a_table_that_says_a_used_variable_is_not_required_makes_it_optional_everywhere(tmp_path):
    body = (bash('curl -H "Authorization: Bearer $SENTRY_AUTH_TOKEN" https://api.example.com/v1/issues') + "\n"
            "| Variable | Required | Notes |\n|---|---|---|\n| `SENTRY_AUTH_TOKEN` | no | private projects only |\n")
    skill = skill_from(tmp_path, body)
    assert of_kind(evaluate(skill), PRIVATE) == []
    [req] = requirements(skill).items
    assert (req.name, req.source, req.required) == ("SENTRY_AUTH_TOKEN", "code", False)
    assert req.optional_because == "its table row says it is not required"


def test_an_unnamed_key_is_optional_where_a_line_naming_a_key_says_so(tmp_path):
    # the shape of a real MCP skill: a keyless connection first, a key only for higher limits
    body = ("No other API keys are needed beyond the connection.\n\nConnect the server:\n\n```json\n{\"mcpServers\": {\"domains\": {\"baseUrl\": \"https://api.example.com/mcp\"}}}\n```\n\n"
            "With an API key (for higher limits):\n\n```json\n{\"headers\": {\"X-API-Key\": \"$env:DOMAINS_KEY\"}}\n```\n\n"
            "Get your API key at https://example.com/account.\n")
    skill = skill_from(tmp_path, bash("curl https://api.example.com/v1/check?d=example.org") + "\n" + body)
    assert of_kind(evaluate(skill), PRIVATE) == []
    [req] = requirements(skill).items
    assert (req.name, req.source, req.required) == ("API key", "prose", False)
    assert "for higher limits" in req.optional_because
    # a line that says a key is needed keeps it required, whatever another line says
    needed = skill_from(tmp_path, bash("curl https://api.example.com/v1/check") + "\n" + body
                        + "An API key is required for the bulk endpoint.\n", name="t")
    assert reasons(evaluate(needed), PRIVATE) == {"requires an API key (stated in prose)"}


def test_ids_an_api_calls_keys_are_not_credentials_but_a_token_the_skill_fetches_is(tmp_path):
    # Feishu names an uploaded image's id image_key; the access token fetched with gcloud still
    # needs the user's Google login, so it stays a requirement
    code = ('IMAGE_KEY=$(curl -s -X POST https://open.example.com/images -F "image=@/tmp/shot.png" | jq -r .key)\n'
            'curl -X POST https://open.example.com/messages -d "{\\"image\\": \\"$IMAGE_KEY\\", \\"file\\": \\"$FILE_KEY\\"}"\n'
            'ACCESS_TOKEN=$(gcloud auth application-default print-access-token)\n'
            'curl -H "Authorization: Bearer $ACCESS_TOKEN" https://www.googleapis.com/calendar/v3/users/me/calendarList')
    skill = skill_from(tmp_path, bash(code))
    assert reasons(evaluate(skill), PRIVATE) == {"requires secret ACCESS_TOKEN"}


def test_the_line_that_leads_into_a_block_speaks_for_the_key_in_it_when_it_is_about_a_key(tmp_path):
    keyed = ("The public endpoint needs nothing.\n\nWith an API key (for higher limits):\n\n"
             '```bash\nexport WEATHER_API_KEY="your_key"\n```\n')
    skill = skill_from(tmp_path, bash("curl https://api.weather.example/today") + "\n" + keyed, front=ENV_FRONT)
    assert of_kind(evaluate(skill), PRIVATE) == []
    [req] = requirements(skill).items
    assert (req.name, req.required) == ("WEATHER_API_KEY", False) and "for higher limits" in req.optional_because
    # a lead-in about a step, not a key, says nothing of the key
    step = ("Attach a radar layer if needed:\n\n"
            '```bash\ncurl -H "X-Key: $WEATHER_API_KEY" https://api.weather.example/radar\n```\n')
    other = skill_from(tmp_path, bash("curl https://api.weather.example/today") + "\n" + step, front=ENV_FRONT, name="t")
    assert reasons(evaluate(other), PRIVATE) == {"requires secret WEATHER_API_KEY"}


@pytest.mark.parametrize(
    "block, name",
    [
        # lower-case keys with a placeholder addressed to the user, in the shapes real skills use
        ('```json\n{"server_url": "https://media.example.com", "api_key": "your-api-key"}\n```\n', "api_key"),
        ("```bash\ntouch ~/.nas-credentials\n# username=<your-nas-user>\n# password=<your-nas-password>\n```\n", "password"),
        ('```python\nclient = Storage(secret_access_key="YOUR_SECRET_ACCESS_KEY")\n```\n', "secret_access_key"),
    ],
)
def test_a_lower_case_setting_given_a_placeholder_for_the_user_is_required(tmp_path, block, name):
    skill = skill_from(tmp_path, bash("curl https://api.example.com/v1/items") + "\n" + block)
    assert reasons(evaluate(skill), PRIVATE) == {f"requires secret {name}"}


def test_a_lower_case_setting_with_a_bare_ellipsis_is_a_pattern_not_a_requirement(tmp_path):
    # a secrets scanner lists what it looks for
    body = bash("grep -rnE 'password|secret' src/") + '\nPatterns to detect:\n\n```\npassword="..."\napi_key="..."\n```\n'
    assert of_kind(evaluate(skill_from(tmp_path, body)), PRIVATE) == []


def test_a_setup_step_that_exports_named_secrets_requires_them(tmp_path):
    body = bash("bank-cli balances") + "\nSetup\n- Export `BANK_CLIENT_ID`, `BANK_SECRET`, and `BANK_ENVIRONMENT` (sandbox or production).\n"
    assert reasons(evaluate(skill_from(tmp_path, body)), PRIVATE) == {"requires secret BANK_SECRET"}
    optional = bash("bank-cli balances") + "\n- Export `BANK_TOKEN` if you want higher rate limits.\n"
    skill = skill_from(tmp_path, optional, name="t")
    assert of_kind(evaluate(skill), PRIVATE) == []
    assert [(r.name, r.required) for r in requirements(skill).items] == [("BANK_TOKEN", False)]


@pytest.mark.parametrize(
    "lead, name",
    [
        ("**Required:**", "TUNNEL_AUTHTOKEN"),
        ("该技能必须在 `.env` 中配置以下参数才能运行：", "MAIL_SMTP_PASSWORD"),
        ("You need these environment variables:", "MAIL_SMTP_PASSWORD"),
        # the account rules' lead-in words are the same vocabulary (skill_requirements.NEEDS_LEAD_IN)
        ("**Prerequisites:**", "TUNNEL_AUTHTOKEN"),
    ],
)
def test_names_listed_under_a_line_that_says_they_are_needed_are_required(tmp_path, lead, name):
    items = {"TUNNEL_AUTHTOKEN": "- `TUNNEL_AUTHTOKEN` — the tunnel's auth token from its dashboard\n",
             "MAIL_SMTP_PASSWORD": "- `MAIL_TO`, `MAIL_FROM`: addresses\n- `MAIL_SMTP_USER`, `MAIL_SMTP_PASSWORD`: 认证信息\n"}
    body = bash("mail-report --today") + f"\n{lead}\n\n{items[name]}\nThen run it.\n"
    findings = of_kind(evaluate(skill_from(tmp_path, body)), PRIVATE)
    item_line = next(n for n, text in enumerate((FRONT + body).splitlines(), 1) if f"`{name}`" in text)
    assert [(f.reason, f.line) for f in findings] == [(f"requires secret {name}", item_line)]


@pytest.mark.parametrize(
    "lead",
    ["**Optional:**", "可选配置：", "No environment variables are needed:", "The script reads:"],
)
def test_names_listed_under_an_optional_or_neutral_line_are_not_required(tmp_path, lead):
    body = bash("mail-report --today") + f"\n{lead}\n\n- `MAIL_SMTP_PASSWORD`: for sending\n- `WEBHOOK_PORT` (default: 4040)\n"
    assert of_kind(evaluate(skill_from(tmp_path, body)), PRIVATE) == []


def test_a_comment_heading_settings_in_a_block_speaks_for_them_but_not_for_a_command(tmp_path):
    optional = bash("browser-mcp start") + "\n```bash\n# Optional: cloud provider\nexport CLOUD_PROVIDER=browserbase\nexport CLOUD_API_KEY=bb_...\n```\n"
    skill = skill_from(tmp_path, optional)
    assert of_kind(evaluate(skill), PRIVATE) == []
    assert [(r.name, r.required) for r in requirements(skill).items] == [("CLOUD_API_KEY", False)]
    # "if needed" over a command says when to run the step, not that the key can be left out
    step = bash('curl -s https://forum.example.com/api/v1/groups/x -H "Authorization: Bearer $FORUM_API_KEY"\n\n'
                '# Create if needed\ncurl -X POST https://forum.example.com/api/v1/groups -H "Authorization: Bearer $FORUM_API_KEY"')
    assert reasons(evaluate(skill_from(tmp_path, step, name="t")), PRIVATE) == {"requires secret FORUM_API_KEY"}


NOTIFY_BODY = "## Config\n\n```javascript\nskill.configure({ chatToken: process.env.CHAT_TOKEN });\n```\n" + bash("npm test")


@pytest.mark.parametrize(
    "files",
    [
        {".env.example": "# Project\nPROJECT_OWNER=your_name\n\n# Chat notifications (optional)\nCHAT_ENABLED=false\nCHAT_TOKEN=your_chat_token\n"},
        {"INSTALL.md": "## Environment\n\n```bash\n# Chat notifications (可选)\nCHAT_TOKEN=your_chat_token\n```\n"},
        {"README.md": "| Variable | Meaning |\n|---|---|\n| `CHAT_TOKEN` | chat token, optional: notifications only |\n"},
    ],
)
def test_the_skills_own_setup_documents_can_say_a_variable_is_optional(tmp_path, files):
    skill = skill_from(tmp_path, NOTIFY_BODY, files=files)
    assert of_kind(evaluate(skill), PRIVATE) == []
    [req] = requirements(skill).items
    assert (req.name, req.required, req.path) == ("CHAT_TOKEN", False, "SKILL.md")
    # without them the variable is required, and a document deeper in the tree does not count
    assert reasons(evaluate(skill_from(tmp_path, NOTIFY_BODY, name="t")), PRIVATE) == {"requires secret CHAT_TOKEN"}
    nested = {f"docs/{name}": text for name, text in files.items()}
    assert reasons(evaluate(skill_from(tmp_path, NOTIFY_BODY, files=nested, name="u")), PRIVATE) == {"requires secret CHAT_TOKEN"}


def test_setup_documents_add_no_requirement_and_no_no_key_path(tmp_path):
    readme = {"README.md": "Requires `OTHER_API_KEY`.\n\nWorks without an API key in free mode.\n"}
    assert of_kind(evaluate(skill_from(tmp_path, bash("ls"), files=readme)), PRIVATE) == []
    keyed = skill_from(tmp_path, bash('curl -H "X-Key: $SVC_API_KEY" https://api.example.com/v1'), files=readme, name="t")
    assert reasons(evaluate(keyed), PRIVATE) == {"requires secret SVC_API_KEY"}


@pytest.mark.parametrize(
    "line, private",
    [
        ("Node.js 18+. SQLGEN_API_KEY required.", True),
        ("`SQLGEN_API_KEY` is required.", True),
        ("GIFS_API_KEY required for `--source gifs`; the default source needs none.", False),
        ("SQLGEN_API_KEY not required.", False),
    ],
)
def test_a_credential_named_before_the_requirement_word(tmp_path, line, private):
    skill = skill_from(tmp_path, bash("npx sqlgen 'monthly totals'") + "\n## Notes\n\n" + line + "\n")
    assert bool(of_kind(evaluate(skill), PRIVATE)) is private


@pytest.mark.parametrize(
    "line, private",
    [
        ("- `RENTALS_TOKEN` must contain the token body only, without a `Bearer ` prefix.", True),
        ("1. Verify `RENTALS_TOKEN` is available in the environment without printing it.", True),
        ("Make sure RENTALS_API_KEY is set; if not, ask the user for it.", True),
        ("Check that RENTALS_TOKEN is set, otherwise skip the upload and print the listing.", False),
        ("`RENTALS_TOKEN` must be set when using `--sync`; listing works without it.", False),
        ("`RENTALS_TOKEN` must not be committed to the repository.", False),
    ],
)
def test_what_a_credential_must_hold_or_a_check_that_it_is_set_takes_it_as_given(tmp_path, line, private):
    skill = skill_from(tmp_path, bash("python3 scripts/rentals.py list") + "\n## Notes\n\n" + line + "\n")
    assert bool(of_kind(evaluate(skill), PRIVATE)) is private


def test_a_markdown_template_shown_for_other_skills_states_no_requirement_of_this_one(tmp_path):
    body = bash("python3 scripts/lint_skill.py path/to/skill") + (
        "\n## Documenting dependencies\n\nA skill that needs a key should say so:\n\n"
        "```markdown\n## Requirements\n- `jq`\n- Environment variable `SERVICE_API_KEY` must be set\n```\n"
    )
    skill = skill_from(tmp_path, body)
    assert of_kind(evaluate(skill), PRIVATE) == []
    same_words = skill_from(tmp_path, bash("python3 scripts/lint_skill.py path/to/skill")
                            + "\n## Requirements\n\n- Environment variable `SERVICE_API_KEY` must be set\n", name="t")
    assert reasons(evaluate(same_words), PRIVATE) == {"requires secret SERVICE_API_KEY"}


def test_secrets_listed_under_a_credentials_heading_are_required_but_not_under_environment_variables(tmp_path):
    steps = bash("python3 scripts/tickets.py list --state open")
    creds = skill_from(tmp_path, steps + "\n## Credentials\n\n- `TICKETS_INSTANCE` - your instance URL\n"
                       "- `TICKETS_USER`\n- `TICKETS_PASSWORD`\n")
    assert reasons(evaluate(creds), PRIVATE) == {"requires secret TICKETS_PASSWORD"}
    # a tool's reference list of what it reads: the token is there for clusters with ACLs, not for this skill
    env = skill_from(tmp_path, steps + "\n## Environment Variables\n\n- `TICKETS_ADDR` - API address\n"
                     "- `TICKETS_TOKEN` - ACL token for authentication\n- `TICKETS_REGION` - default region\n", name="t")
    assert of_kind(evaluate(env), PRIVATE) == []
    optional = skill_from(tmp_path, steps + "\n## Authentication\n\n- `TICKETS_TOKEN` (optional, for private queues)\n", name="u")
    assert of_kind(evaluate(optional), PRIVATE) == []


_RUN_SCRIPT = bash("python3 scripts/summarise.py --days 7")


@pytest.mark.parametrize(
    "script",
    [
        "import os, requests\nKEY = os.environ[\"DIGEST_API_KEY\"]\nrequests.get('https://api.example.com/v1', headers={'k': KEY})\n",
        "import os, sys\nkey = os.getenv('DIGEST_API_KEY')\nif not key:\n    sys.exit('DIGEST_API_KEY is not set')\n",
        "#!/usr/bin/env bash\n: \"${DIGEST_TOKEN:?set DIGEST_TOKEN first}\"\ncurl -s -H \"Authorization: Bearer $DIGEST_TOKEN\" https://api.example.com/v1\n",
    ],
)
def test_a_secret_the_skills_own_script_cannot_run_without_is_required(tmp_path, script):
    name = "scripts/summarise.sh" if script.startswith("#!") else "scripts/summarise.py"
    body = _RUN_SCRIPT.replace("python3 scripts/summarise.py", "bash scripts/summarise.sh") if name.endswith(".sh") else _RUN_SCRIPT
    skill = skill_from(tmp_path, body, files={name: script})
    [hit] = of_kind(evaluate(skill), PRIVATE)
    assert hit.reason.startswith("requires secret DIGEST_") and hit.path == name and hit.line >= 2


@pytest.mark.parametrize(
    "script, body",
    [
        # read with a default, or one provider's key among several: the script runs without it
        ("import os\nKEY = os.getenv('DIGEST_API_KEY', '')\nheaders = {'k': KEY} if KEY else {}\n", _RUN_SCRIPT),
        # a script SKILL.md never runs
        ("import os\nKEY = os.environ['DIGEST_API_KEY']\n", bash("jq '.items | length' feed.json")),
        # the skill says the key is optional
        ("import os, sys\nkey = os.getenv('DIGEST_API_KEY')\nif not key:\n    sys.exit('DIGEST_API_KEY is not set')\n",
         _RUN_SCRIPT + "\n`DIGEST_API_KEY` is optional: without it the digest uses the public feed.\n"),
    ],
)
def test_a_secret_a_script_can_do_without_is_not_required(tmp_path, script, body):
    skill = skill_from(tmp_path, body, files={"scripts/summarise.py": script})
    assert of_kind(evaluate(skill), PRIVATE) == []


def test_secrets_listed_under_a_prerequisites_heading_are_required_unless_the_item_names_a_condition(tmp_path):
    steps = bash("node scripts/calendar.js list")
    needed = skill_from(tmp_path, steps + "\n## Prerequisites\n\n- `chat-common` installed with valid `CHAT_APP_ID` "
                        "and `CHAT_APP_SECRET`.\n")
    assert reasons(evaluate(needed), PRIVATE) == {"requires secret CHAT_APP_SECRET"}
    conditional = skill_from(tmp_path, steps + "\n## Requirements\n\n- `calendar` CLI installed\n"
                             "- `CAL_TOKEN` if ACLs are enabled on your server\n", name="t")
    assert of_kind(evaluate(conditional), PRIVATE) == []


def test_chinese_accesskey_wording_is_a_key_requirement(tmp_path):
    body = bash("python3 scripts/ocr.py ./invoices") + "\n使用此技能需要阿里云 AccessKey ID 和 AccessKey Secret，请提供这两个凭证。\n"
    assert reasons(evaluate(skill_from(tmp_path, body)), PRIVATE) == {"requires an API key (stated in prose)"}


def test_a_licence_key_beside_a_free_tier_is_optional(tmp_path):
    # a real code auditor's free tier runs its static analysis with no key; the key unlocks paid tiers
    tiers = ("## Tiers\n\n| Tier | Price | Features |\n|------|-------|----------|\n| **FREE** | $0/mo | Static analysis |\n"
             "| **PRO** | $8/mo | ML analysis |\n\nAll paid tiers include a **14-day free trial**.\n\n")
    body = bash("auditor scan .") + "\n" + tiers + "```bash\nexport AUDITOR_LICENSE_KEY=<your-key>\nauditor status\n```\n"
    skill = skill_from(tmp_path, body)
    assert of_kind(evaluate(skill), PRIVATE) == []
    [req] = requirements(skill).items
    assert (req.name, req.required) == ("AUDITOR_LICENSE_KEY", False) and "free tier" in req.optional_because
    # a free trial is no free tier, and an API key is not unlocked by one
    paid = body.replace("| **FREE** | $0/mo | Static analysis |\n", "")
    assert reasons(evaluate(skill_from(tmp_path, paid, name="p")), PRIVATE) == {"requires secret AUDITOR_LICENSE_KEY"}
    api = body.replace("AUDITOR_LICENSE_KEY", "AUDITOR_API_KEY")
    assert reasons(evaluate(skill_from(tmp_path, api, name="a")), PRIVATE) == {"requires secret AUDITOR_API_KEY"}


def test_a_licence_key_beside_free_tools_is_optional(tmp_path):
    body = (bash("auditor scan .") + "\nThe free tools work out of the box; a licence adds ML analysis.\n\n"
            "```bash\nexport AUDITOR_LICENSE_KEY=<your-key>\n```\n")
    skill = skill_from(tmp_path, body)
    assert of_kind(evaluate(skill), PRIVATE) == []
    [req] = requirements(skill).items
    assert (req.name, req.required) == ("AUDITOR_LICENSE_KEY", False)


@pytest.mark.parametrize(("text", "word", "taken_back"), [
    ("Send WhatsApp messages to your contacts.", "Send", False),
    ("No Telegram account needed: messages go to a local file.", "Telegram", True),
    ("Posting to Slack (optional) after each run.", "Posting", True),
    # the negation belongs to another sentence
    ("It is not fast. Post to Slack after each run.", "Post", False),
    # only the line of the match counts
    ("optional extras below\nPost to Slack after each run.", "Post", False),
])
def test_what_a_line_takes_back(text, word, taken_back):
    assert skill_requirements.hedged(text, text.index(word)) is taken_back


def test_where_to_pick_up_once_the_key_is_had_does_not_make_it_optional(tmp_path):
    # a real music-bot skill: register for a key, and "If you have a `X` saved, skip to Step 4"
    body = (bash('curl -H "Authorization: Bearer $TRACKS_API_KEY" https://api.example.com/me')
            + "\n## Already registered?\n\nIf you have a `TRACKS_API_KEY` saved, skip to **Step 4**.\n")
    assert reasons(evaluate(skill_from(tmp_path, body)), PRIVATE) == {"requires secret TRACKS_API_KEY"}
    optional = body.replace("If you have a `TRACKS_API_KEY` saved, skip to **Step 4**.", "If you have a `TRACKS_API_KEY`, set it for higher limits.")
    assert of_kind(evaluate(skill_from(tmp_path, optional, name="o")), PRIVATE) == []


def test_a_camel_case_secret_with_a_placeholder_addressed_to_the_user_is_required(tmp_path):
    # a real telemetry plugin's config: {"apiKey": "your-kalibr-api-key", "tenantId": ...}
    body = '## Config\n\n```json\n{\n  "apiKey": "your-service-api-key",\n  "enableRouting": false\n}\n```\n' + bash("npm test")
    assert reasons(evaluate(skill_from(tmp_path, body)), PRIVATE) == {"requires secret apiKey"}
    default = body.replace('"your-service-api-key"', '"weather:v1"').replace('"apiKey"', '"cacheKey"')
    assert of_kind(evaluate(skill_from(tmp_path, default, name="d")), PRIVATE) == []


def test_keys_listed_under_a_heading_that_says_they_must_be_set_are_required(tmp_path):
    # a real cloud skill: "## AccessKey priority (must follow)" over "1) Environment variables: `X_ACCESS_KEY_ID` / ..."
    body = (bash("python scripts/call_api.py --action DescribeInstances")
            + "\n## AccessKey priority (must follow)\n\n1) Environment variables: `CLOUD_ACCESS_KEY_ID` / `CLOUD_ACCESS_KEY_SECRET` / `CLOUD_REGION_ID`\n"
            "2) Shared config file: `~/.cloud/credentials`\n")
    assert reasons(evaluate(skill_from(tmp_path, body)), PRIVATE) == {"requires secret CLOUD_ACCESS_KEY_ID", "requires secret CLOUD_ACCESS_KEY_SECRET"}
    neutral = body.replace("## AccessKey priority (must follow)", "## AccessKey lookup order")
    assert of_kind(evaluate(skill_from(tmp_path, neutral, name="n")), PRIVATE) == []


def test_a_script_helper_that_stops_without_a_key_requires_it(tmp_path):
    # a real story generator: build_client() calls require_env("STORY_LLM_API_KEY / ...", value), which exits
    script = ('import os, sys\n\nLLM_KEY = os.getenv("TALE_LLM_API_KEY", "")\n\n\ndef require_env(name, value):\n'
              '    if value:\n        return value\n    raise SystemExit(f"missing setting: {name}")\n\n\n'
              'def client():\n    return make_client(require_env("TALE_LLM_API_KEY", LLM_KEY))\n')
    skill = skill_from(tmp_path, bash("python scripts/tale.py --age 5"), files={"scripts/tale.py": script})
    [hit] = of_kind(evaluate(skill), PRIVATE)
    assert (hit.reason, hit.path, hit.line) == ("requires secret TALE_LLM_API_KEY", "scripts/tale.py", 13)
