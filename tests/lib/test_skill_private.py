"""Private-resource verdicts: private hosts, accounts and logins, payments, and the secrets in
frontmatter and bodies, each with look-alikes that stay accepted (required versus optional
credentials and prose requirements: test_skill_requirements.py)."""
from __future__ import annotations

import pytest

from facet_site.lib.skill_filters import PRIVATE, evaluate, requirements
from tests.lib.skill_filter_samples import bash, of_kind, reasons, skill_from


# --------------------------------------------------------------------------------------------
# private
# --------------------------------------------------------------------------------------------


def test_required_secret_from_frontmatter_points_at_its_line(tmp_path):
    front = ("---\nname: w\ndescription: weather\nmetadata:\n  openclaw:\n    requires:\n      env: [WEATHER_REGION, WEATHER_API_KEY]\n"
             "    primaryEnv: WEATHER_API_KEY\n---\n")
    skill = skill_from(tmp_path, bash("curl https://api.weather.example"), front=front)

    [hit] = of_kind(evaluate(skill), PRIVATE)

    assert (hit.reason, hit.evidence, hit.line) == ("requires secret WEATHER_API_KEY", "WEATHER_API_KEY", 7)


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "DB_PASSWORD", "CLIENT_SECRET", "AWS_SECRET_ACCESS_KEY", "MY_CREDENTIALS",
                                  "SERVICE_AUTH", "OPENAI_APIKEY"])
def test_declared_secret_names(tmp_path, name):
    front = f"---\nname: x\ndescription: d\nmetadata: {{\"openclaw\": {{\"requires\": {{\"env\": [\"{name}\"]}}}}}}\n---\n"
    skill = skill_from(tmp_path, bash("ls"), front=front)
    assert reasons(evaluate(skill), PRIVATE) == {f"requires secret {name}"}


def test_the_shells_working_directory_is_not_a_password(tmp_path):
    # a real later ClawHub upload was private for "walking up from `$PWD`"
    skill = skill_from(tmp_path, bash('cd "$PWD" && ls') + "\nThe server walks up from `$PWD` looking for a `skills/` directory.\n")
    assert of_kind(evaluate(skill), PRIVATE) == []
    skill = skill_from(tmp_path, bash('mysql -u app -p"$DB_PWD" shop'), name="db")
    assert reasons(evaluate(skill), PRIVATE) == {"requires secret DB_PWD"}


def test_declared_env_without_secret_name_is_not_private(tmp_path):
    front = "---\nname: x\ndescription: d\nmetadata: {\"openclaw\": {\"requires\": {\"env\": [\"TZ\", \"OUTPUT_DIR\"]}}}\n---\n"
    skill = skill_from(tmp_path, bash("ls"), front=front)
    assert of_kind(evaluate(skill), PRIVATE) == []


def test_secrets_used_in_the_body(tmp_path):
    body = bash('export NOTION_API_KEY="secret_xxx"\ncurl -H "Authorization: Bearer $GITHUB_TOKEN" https://api.github.com\n'
                'swap --from $BUY_TOKEN --to $SELL_TOKEN --sort $SORT_KEY')
    skill = skill_from(tmp_path, body)

    found = of_kind(evaluate(skill), PRIVATE)

    assert [(f.reason, f.line) for f in found] == [
        ("requires secret NOTION_API_KEY", 8), ("requires secret GITHUB_TOKEN", 9)
    ]


def test_api_key_placeholder(tmp_path):
    skill = skill_from(tmp_path, bash('curl -H "Authorization: Bearer YOUR_API_KEY" https://api.example.com/v1/me'))
    [hit] = of_kind(evaluate(skill), PRIVATE)
    assert (hit.reason, hit.evidence, hit.line) == ("requires an API key or token", "Bearer YOUR_API_KEY", 8)


@pytest.mark.parametrize(
    "url",
    ["http://192.168.1.20:8123/api", "https://10.0.0.5/v1", "http://172.20.1.1", "http://homeassistant.local:8123",
     "https://wiki.corp/page", "http://api.internal/status", "http://nas.lan/share", "http://localhost:11434/api/tags",
     "http://127.0.0.1:5000"],
)
def test_private_hosts(tmp_path, url):
    skill = skill_from(tmp_path, bash(f"curl {url}"))
    [hit] = of_kind(evaluate(skill), PRIVATE)
    assert hit.reason == "uses a private network host" and hit.line == 8 and url.split("/")[2] in hit.evidence


@pytest.mark.parametrize(
    "block, name",
    [
        ('```json\n{"mcpServers": {"m365": {"env": {"TENANT_ID": "your-tenant-id", "CLIENT_SECRET": "your-client-secret"}}}}\n```', "CLIENT_SECRET"),
        ("```yaml\nweather:\n  SERVICE_TOKEN: xxxxxxxx\n  units: metric\n```", "SERVICE_TOKEN"),
        ("Put this in `.env`:\n\n```\nMAIL_PASSWORD=<your mail password>\n```", "MAIL_PASSWORD"),
        ("```\nOPENAI_API_KEY=sk-...\n```", "OPENAI_API_KEY"),
    ],
)
def test_a_secret_set_to_a_placeholder_in_a_config_block_is_required(tmp_path, block, name):
    skill = skill_from(tmp_path, bash("ls") + "\nConfigure it:\n\n" + block + "\n")
    assert reasons(evaluate(skill), PRIVATE) == {f"requires secret {name}"}


@pytest.mark.parametrize(
    "block",
    [
        '```json\n{"CACHE_KEY": "weather:v1", "MAX_TOKENS": 1000, "LOG_LEVEL": "info"}\n```',  # settings, not secrets
        "```yaml\nSERVICE_TOKEN: your-token   # optional, for higher rate limits\n```",  # a placeholder said optional
        '```toml\nsort_key = "your-field"\nmax_tokens = 1000\n```',  # lower case, and not a secret's name
    ],
)
def test_config_values_that_are_not_required_secrets(tmp_path, block):
    skill = skill_from(tmp_path, bash("ls") + "\n" + block + "\n")
    assert of_kind(evaluate(skill), PRIVATE) == []


def test_a_requirement_named_in_the_frontmatter_prose_is_found_on_its_line(tmp_path):
    # The Agent Skills `compatibility` field says what the environment needs, in words.
    front = ("---\nname: pay\ndescription: Micropayments for agents.\ncompatibility: Requires network access and a "
             "thirdweb API key (THIRDWEB_SECRET_KEY environment variable)\n---\n")
    skill = skill_from(tmp_path, bash("node scripts/pay.js"), front=front)
    [hit] = of_kind(evaluate(skill), PRIVATE)
    assert (hit.reason, hit.line) == ("requires secret THIRDWEB_SECRET_KEY", 4)


@pytest.mark.parametrize("text, private", [
    ("Node.js 18+. Needs OPENAI_API_KEY environment variable.", {"requires secret OPENAI_API_KEY"}),
    ("This skill requires the `PARCEL_API_KEY` environment variable.", {"requires secret PARCEL_API_KEY"}),
    ("Requires Python 3.10 and FFMPEG on the PATH.", set()),
    ("This tool does not need GITHUB_TOKEN for public repositories.", set()),
    # a placeholder in a header is no variable of the skill's: the unnamed key is what is required
    ("Every call needs `Authorization: Bearer YOUR_API_KEY`.", {"requires an API key or token"}),
])
def test_a_requirement_word_and_a_credential_name_in_one_sentence(tmp_path, text, private):
    skill = skill_from(tmp_path, bash("npx example-tool") + "\n" + text + "\n")
    assert reasons(evaluate(skill), PRIVATE) == private


@pytest.mark.parametrize("body, line", [
    (bash("rbw login\nrbw get github"), 8),
    ("Sign in once:\n\n```\n$ gkeep login you@example.com\n```\n", 8),
    (bash("gh auth login\ngh repo list"), 8),
])
def test_a_login_command_in_a_code_block_needs_an_account(tmp_path, body, line):
    [hit] = of_kind(evaluate(skill_from(tmp_path, body)), PRIVATE)
    assert (hit.reason, hit.line) == ("requires an account or login", line)


@pytest.mark.parametrize("body", [
    "Optional, for your private lists:\n\n```bash\ngkeep login\n```\n",
    bash("# then: mytool login\nmytool search cats"),
    bash("mytool login --help"),
    bash("gkeep login   # optional: only to see private notes"),
])
def test_an_optional_or_documented_login_is_not_a_dependence(tmp_path, body):
    assert of_kind(evaluate(skill_from(tmp_path, body)), PRIVATE) == []


def test_a_declared_variable_naming_an_account_needs_that_account(tmp_path):
    front = ("---\nname: car\ndescription: Car status.\nmetadata: {\"openclaw\": {\"requires\": "
             "{\"env\": [\"TESLA_EMAIL\", \"OUTPUT_DIR\"]}}}\n---\n")
    [hit] = of_kind(evaluate(skill_from(tmp_path, bash("tesla status"), front=front)), PRIVATE)
    assert (hit.reason, hit.evidence, hit.line) == ("requires an account or login", "TESLA_EMAIL", 4)


@pytest.mark.parametrize("env,private", [
    ('"VIKUNJA_URL"', True), ('"OKTA_DOMAIN"', True), ('"JIRA_BASE_URL"', True), ('"HA_HOST"', True),
    ('"DATABASE_URL"', False), ('"REDIS_URL"', False), ('"OUTPUT_DIR"', False), ('"URL_SHORTENER_STYLE"', False),
])
def test_a_required_variable_holding_the_users_own_service_address_is_private(tmp_path, env, private):
    # A self-hosted service reached through an address only its user has; no key needs to be named.
    front = ("---\nname: todo\ndescription: Manage tasks.\nmetadata: {\"openclaw\": {\"requires\": "
             f"{{\"env\": [{env}]}}}}}}\n---\n")
    hits = of_kind(evaluate(skill_from(tmp_path, bash("todo list --done"), front=front)), PRIVATE)
    assert [(h.reason, h.evidence, h.line) for h in hits] == (
        [("needs the address of the user's own service", env.strip('"'), 4)] if private else [])


def test_an_optional_service_address_is_not_private(tmp_path):
    front = ("---\nname: todo\ndescription: Manage tasks.\nmetadata: {\"openclaw\": {\"envVars\": "
             "[{\"name\": \"VIKUNJA_URL\", \"required\": false, \"description\": \"defaults to the demo instance\"}]}}\n---\n")
    assert of_kind(evaluate(skill_from(tmp_path, bash("todo list --done"), front=front)), PRIVATE) == []


def test_a_local_oauth_redirect_is_a_sign_in_not_a_private_host(tmp_path):
    body = bash("example-cli tasks list") + "\n1. Register an app.\n2. Add redirect URI: `http://127.0.0.1:8765/callback`\n"
    skill = skill_from(tmp_path, body)
    [hit] = of_kind(evaluate(skill), PRIVATE)
    assert hit.reason == "signs in through a login redirect to a local port (OAuth)"
    assert "127.0.0.1:8765/callback" in hit.evidence and hit.line == 12


@pytest.mark.parametrize("url", ["https://172.32.0.1/", "https://api.example.com/local", "https://10.example.com", "https://localhost.example.com"])
def test_public_hosts_are_not_private(tmp_path, url):
    skill = skill_from(tmp_path, bash(f"curl {url}"))
    assert of_kind(evaluate(skill), PRIVATE) == []


@pytest.mark.parametrize(
    "body",
    [bash("npm run dev &\ncurl http://localhost:3000/health"),
     # a library that starts its own service (the shape of a published scientific skill)
     "```python\nfrom dask.distributed import Client, LocalCluster\ncluster = LocalCluster(n_workers=4)\n"
     "client = Client(cluster)  # dashboard at http://localhost:8787\n```\n",
     # the skill tells the user to run the (open-source) service themselves (a real state-engine skill)
     "## Prerequisites\n\n- Default: `http://localhost:3000` (local instance)\n\n1. Run Flux locally, see its repo\n"
     + bash("./scripts/state.sh health")],
)
def test_localhost_is_fine_when_the_skill_starts_the_server(tmp_path, body):
    skill = skill_from(tmp_path, body)
    assert of_kind(evaluate(skill), PRIVATE) == []


@pytest.mark.parametrize(
    "text, reason",
    [
        ("Requires a paid OpenAI account.", "requires an account or login"),
        ("- User must have a Hevy Pro subscription", "requires a paid account"),
        ("Spotify Premium account required.", "requires a paid account"),
        ("You must be logged in to the dashboard first.", "requires an account or login"),
        ("## Requirements\n\n- A Spotify Premium account", "requires a paid account"),
        ("## Prerequisites\n\n- GitHub account", "requires an account or login"),
        ("Run `example-cli login` and sign in with your Google account first.", "requires an account or login"),
    ],
)
def test_account_dependence(tmp_path, text, reason):
    skill = skill_from(tmp_path, bash("ls") + "\n" + text + "\n")
    assert reasons(evaluate(skill), PRIVATE) == {reason}


@pytest.mark.parametrize(
    "text",
    [
        "No API key required, no Luma Plus subscription needed.",
        "No account needed.",
        "## Pricing\n\n### Pro Tier ($12)\n\n- Paid Plans start at $5",
        "Option B: Zapier (if you have a paid account)",
        "Fetch account equity and buying power.",
        "Login is optional.",
    ],
)
def test_accounts_mentioned_without_dependence(tmp_path, text):
    skill = skill_from(tmp_path, bash("ls") + "\n" + text + "\n")
    assert of_kind(evaluate(skill), PRIVATE) == []


@pytest.mark.parametrize(
    "text, line",
    [
        ("# Weather pro\n\nEach forecast is paid via x402 micropayments (USDC on Base).\n", 13),
        ("## Setup\n\n1. Create a wallet with `npx paykit init`.\n2. Fund your wallet with USDC on Base.\n", 14),
        ("The agent pays per call: every request to the x402 endpoint costs $0.01 from its wallet.\n", 11),
        ("Pay for APIs and sell your own behind an x402 paywall, from one wallet.\n", 11),
        # the same in Chinese (a translated mirror's copy of an agent-services skill was accepted)
        ("所有付费端点均使用 **x402** 授权机制：收到402响应后，使用USDC支付即可完成交易。\n", 11),
        ("支持使用Base平台上的USDC进行支付，支付方式通过x402实现。\n", 11),
    ],
)
def test_paying_per_call_from_a_wallet_is_private(tmp_path, text, line):
    skill = skill_from(tmp_path, bash("paykit call https://api.example.com/forecast") + "\n" + text)
    found = [f for f in of_kind(evaluate(skill), PRIVATE) if f.reason == "pays per call from a funded wallet"]
    assert [f.line for f in found] == [line]  # the SKILL.md line, after 4 of frontmatter and 6 of the block


@pytest.mark.parametrize(
    "text",
    [
        # a free mode beside paid services
        "Premium readings are paid via x402 micropayments. Wallet optional: free tools work without configuration.\n",
        # a seller: the callers pay, the skill only needs an address to be paid at
        "Put an x402 paywall in front of your API: callers pay per request in USDC to your address.\n",
        # a wallet tracker spends nothing
        "Show the USDC balance of any wallet address and its last transfers.\n",
        # paying is not said to be needed
        "Payments over x402 are not required for the public endpoints.\n",
        # a free plan beside the paid calls: the same wording of a free offer as beside a licence key
        "Premium forecasts are paid via x402 micropayments from your wallet. The free plan covers 100 forecasts a day.\n",
        "| Plan | Price |\n|---|---|\n| **Free** | $0 |\n| Pro | pay per call via x402 from your wallet |\n",
    ],
)
def test_wallets_and_payments_that_cost_the_user_nothing_are_not_private(tmp_path, text):
    skill = skill_from(tmp_path, bash("paykit call https://api.example.com/forecast") + "\n" + text)
    assert of_kind(evaluate(skill), PRIVATE) == []


def test_keyless_because_paid_is_not_a_no_key_path(tmp_path):
    front = ("---\nname: s\ndescription: Scrape pages.\n"
             "compatibility: Requires network access and the SCRAPER_SECRET_KEY environment variable\n---\n")
    body = bash("scrape https://example.com") + "\nThe x402 endpoints are fully keyless - no API key needed, just pay and use.\n"
    reqs = requirements(skill_from(tmp_path, body, front=front))
    assert not reqs.no_key_path
    assert [r.name for r in reqs.required] == ["SCRAPER_SECRET_KEY"]


@pytest.mark.parametrize(
    "text",
    [
        "## 使用前准备\n\n使用前需要登录你的账号。\n",
        "发布文章前请先扫码登录（用 App 扫描二维码）。\n",
        "1. 启动服务后，在手机上完成账号配对。\n",
        "事前に GitHub アカウントが必要です。\n",
        "最初にログインしてください。\n",
    ],
)
def test_account_dependence_in_chinese_and_japanese(tmp_path, text):
    skill = skill_from(tmp_path, bash("ls") + "\n" + text)
    assert reasons(evaluate(skill), PRIVATE) == {"requires an account or login"}


@pytest.mark.parametrize(
    "text",
    [
        "无需登录，无需账号，直接使用。\n",
        "需要登录吗？不需要。\n",
        "ログインは不要です。\n",
        "统计每个账号的发帖数量并生成表格。\n",
    ],
)
def test_chinese_and_japanese_account_words_without_dependence(tmp_path, text):
    skill = skill_from(tmp_path, bash("ls") + "\n" + text)
    assert of_kind(evaluate(skill), PRIVATE) == []


BINS_FRONT = ('---\nname: bid-tracker\ndescription: Track bids.\n'
              'metadata: {"openclaw": {"requires": {"bins": ["bid-tracker"]}}}\n---\n')


@pytest.mark.parametrize(
    "body",
    [
        "## 首次初始化\n\n系统首次使用时，必须先注册管理员账号，否则其他命令会报错。\n\n```bash\nbid-tracker init --name \"王经理\"\n```\n",
        "## First run\n\nAn admin account is required. Create it once:\n\n```bash\n$ python3 scripts/add_user.py --role admin\n```\n",
    ],
)
def test_an_account_the_skills_own_command_creates_is_not_an_outside_account(tmp_path, body):
    skill = skill_from(tmp_path, body + bash("bid-tracker list"), front=BINS_FRONT)
    assert of_kind(evaluate(skill), PRIVATE) == []


@pytest.mark.parametrize(
    "body",
    [
        # signing in, even with the skill's own command, is to someone's service
        "使用前必须先登录账号：\n\n```bash\nbid-tracker login\n```\n",
        # an account created with another service's tool
        "You must first create an account on the portal:\n\n```bash\ncurl -X POST https://portal.example.com/signup\n```\n",
        # no command follows
        "系统首次使用时，必须先注册平台账号。\n\n然后即可使用。\n",
    ],
)
def test_an_account_not_created_by_the_skills_own_command_stays_private(tmp_path, body):
    skill = skill_from(tmp_path, bash("bid-tracker list") + "\n" + body, front=BINS_FRONT)
    assert reasons(evaluate(skill), PRIVATE) == {"requires an account or login"}


@pytest.mark.parametrize(
    "line, private",
    [
        ("Requires the Codex CLI, authenticated with your ChatGPT account.", True),
        ("Make sure you are logged in: run `codex login` first.", True),
        ("Prerequisite: `gh auth login` completed.", True),
        ("`gh auth login` is optional: public repositories work without it.", False),
        ("The `login` subcommand of `codex` exists; this skill never calls it.", False),
    ],
)
def test_a_sign_in_stated_in_prose_or_an_inline_login_command_is_a_login(tmp_path, line, private):
    skill = skill_from(tmp_path, bash("codex exec 'fix the failing test'") + "\n" + line + "\n")
    assert bool(of_kind(evaluate(skill), PRIVATE)) is private


@pytest.mark.parametrize(
    "text, private",
    [
        ("## Setup\n\n1. Ensure you have a Shortly account or are ready to sign in via Google.\n", True),
        ("## Getting Your API Key\n\n1. Go to https://dash.example.com\n2. Sign up\n", True),
        ("## Setup\n\n1. Open the dashboard.\n2. Copy your API key from the settings page.\n", True),
        ("## Setup\n\nEnsure you have `jq` installed.\n", False),
        ("## Getting started\n\nRun the command below.\n", False),
    ],
)
def test_an_account_to_have_ready_or_a_key_to_get_or_copy_is_required(tmp_path, text, private):
    skill = skill_from(tmp_path, bash("node scripts/shorten.js https://example.com/a") + "\n" + text)
    assert bool(of_kind(evaluate(skill), PRIVATE)) is private


def test_a_script_that_approves_its_own_payment_spends_the_users_money(tmp_path):
    script = "#!/bin/bash\ncurl -s -X POST \"${MINT_API}/api/mint\" -d \"{\\\"request\\\": \\\"$*\\\", \\\"auto_pay\\\": true}\"\n"
    skill = skill_from(tmp_path, bash("bash scripts/mint.sh deploy MOON"), files={"scripts/mint.sh": script})
    [hit] = of_kind(evaluate(skill), PRIVATE)
    assert (hit.reason, hit.path, hit.line) == ("pays per call from a funded wallet", "scripts/mint.sh", 2)
    asks = skill_from(tmp_path, bash("bash scripts/mint.sh deploy MOON"), name="t",
                      files={"scripts/mint.sh": script.replace("true", "false")})
    assert of_kind(evaluate(asks), PRIVATE) == []


@pytest.mark.parametrize(
    "text, private",
    [
        ("## Prerequisites\n\n- `aws` CLI configured with IAM permissions for `ecs:ListServices`\n", True),
        ("Requires the gcloud CLI, authenticated to your project.\n", True),
        ("## Troubleshooting\n\n```json\n{\"fallback_action\": \"Verify the AWS CLI is configured\"}\n```\n", False),
        ("The scanner finds AWS credentials and SSH keys left in a repository.\n", False),
    ],
)
def test_a_cloud_cli_set_up_with_the_users_credentials_is_an_account(tmp_path, text, private):
    skill = skill_from(tmp_path, bash("./scripts/health.sh --cluster prod") + "\n" + text)
    assert bool(of_kind(evaluate(skill), PRIVATE)) is private


def test_the_skills_own_server_mode_and_ssrf_test_urls_are_no_private_hosts(tmp_path):
    own_server = skill_from(tmp_path, bash("python run.py --serve\n# listens on http://127.0.0.1:8080 (local only)"))
    assert of_kind(evaluate(own_server), PRIVATE) == []
    ssrf = skill_from(tmp_path, bash("python run.py -a info -i '{\"url\": \"https://example.com/a.mp4\"}'")
                      + "\n```bash\n# security checks (should be rejected)\npython run.py -a info -i '{\"url\": \"http://192.168.1.1/config\"}'\n```\n",
                      name="t")
    assert of_kind(evaluate(ssrf), PRIVATE) == []
    uses_lan = skill_from(tmp_path, bash("curl http://192.168.1.20:8123/api/states"), name="u")
    assert reasons(evaluate(uses_lan), PRIVATE) == {"uses a private network host"}
    # a service the user already runs, which the skill neither starts nor says to run
    users_own = skill_from(tmp_path, "Your Jellyfin server must be reachable.\n" + bash("curl http://localhost:8096/Items"), name="v")
    assert reasons(evaluate(users_own), PRIVATE) == {"uses a private network host"}


@pytest.mark.parametrize(
    "text",
    [
        "```json\n{\"name\": \"Living Room\", \"ip\": \"192.168.x.x\"}\n```\n",
        "```bash\nexport PRINTER_IP=192.168.1.50\n```\n",
        "Check it with `./run status --device 192.168.4.64 --port 5555`.\n",
        "```bash\nadb connect 10.0.0.7:5555\n```\n",
    ],
)
def test_a_device_on_the_users_network_given_by_address_is_a_private_host(tmp_path, text):
    skill = skill_from(tmp_path, bash("./run play --title 'News'") + "\n" + text)
    assert reasons(evaluate(skill), PRIVATE) == {"uses a private network host"}


@pytest.mark.parametrize(
    "text",
    [
        "```bash\nnmap -sn 192.168.1.0/24\n```\n",
        "Allow the office range in the firewall: `ufw allow from 10.0.0.0/8`.\n",
        "```bash\n# security checks (should be rejected)\n./run fetch --host 192.168.1.1\n```\n",
    ],
)
def test_network_ranges_and_refused_addresses_are_not_devices(tmp_path, text):
    skill = skill_from(tmp_path, bash("./run play --title 'News'") + "\n" + text)
    assert of_kind(evaluate(skill), PRIVATE) == []


def test_an_account_listed_under_a_lead_in_that_says_it_is_needed_is_required(tmp_path):
    lead = "\n**You'll need:**\n- **macOS 13 or later** with Keychain access\n- **Active Claude subscription** (Pro or Max)\n"
    skill = skill_from(tmp_path, bash("./refresh-token.sh") + lead)
    assert reasons(evaluate(skill), PRIVATE) == {"requires an account or login"}
    optional = lead.replace("**You'll need:**", "**Nice to have:**")
    assert of_kind(evaluate(skill_from(tmp_path, bash("./refresh-token.sh") + optional, name="t")), PRIVATE) == []


MAIL = "works in the user's own mail or chats (Mail.app, Messages)"


@pytest.mark.parametrize(
    "body, files",
    [
        ("Fast search of your Apple Mail.app mailboxes.\n" + bash("fruitmail search 'invoice'"), None),
        (bash("scripts/mail-list.sh INBOX 20"),
         {"scripts/mail-list.sh": '#!/bin/bash\nosascript -e \'tell application "Mail" to get subject of messages of inbox\'\n'}),
        (bash("python3 scripts/recent_chats.py"),
         {"scripts/recent_chats.py": "import sqlite3, os\ndb = sqlite3.connect(os.path.expanduser('~/Library/Messages/chat.db'))\n"}),
    ],
)
def test_the_users_own_mailbox_or_chats_on_their_mac_are_private(tmp_path, body, files):
    # a round-two blind check skill worked in the user's Mail.app accounts and was accepted
    [hit] = [f for f in of_kind(evaluate(skill_from(tmp_path, body, files=files)), PRIVATE) if f.reason == MAIL]
    assert hit.path.endswith(("SKILL.md", ".sh", ".py"))


@pytest.mark.parametrize(
    "body",
    [
        "Write the report as an .eml file; no Mail.app needed.\n" + bash("python3 make_eml.py report.md"),
        "Send the summary with `msmtp` (optional: open it in Mail.app afterwards).\n" + bash("msmtp -t < summary.eml"),
        bash("python3 parse_mbox.py ~/exports/archive.mbox"),
    ],
)
def test_mail_files_and_optional_mentions_of_the_mail_app_are_not_the_users_mailbox(tmp_path, body):
    assert MAIL not in reasons(evaluate(skill_from(tmp_path, body)), PRIVATE)


def test_an_account_named_in_bold_after_need_wording_is_required(tmp_path):
    body = "To post tasks you need a **Forum account** and a funded budget.\n" + bash("forum-cli post task.json")
    assert reasons(evaluate(skill_from(tmp_path, body)), PRIVATE) == {"requires an account or login"}


SERVICE = "works in the user's account on a service (messages, posts or documents there)"


@pytest.mark.parametrize(
    "front",
    [
        "---\nname: chat-cli\ndescription: Send Signal messages to other people or search your Signal history via the sigcli CLI.\n---\n",
        "---\nname: tasks\ndescription: Manage Todoist tasks and projects. Use when the user wants to interact with their Todoist account.\n---\n",
        "---\nname: price-alerts\ndescription: Watch price-drop feeds and send Telegram notifications when an item is on sale.\n---\n",
        # a translated mirror's Feishu skills: no key named, the agent's own Feishu channel does the sending
        "---\nname: doc-writer\ndescription: |\n  Feishu/Lark Smart Document Writer - 飞书智能文档写入器，自动分块写入长文档。\n---\n",
    ],
)
def test_a_skill_whose_job_is_acting_in_the_users_account_on_a_service_is_private(tmp_path, front):
    [hit] = [f for f in of_kind(evaluate(skill_from(tmp_path, bash("svc-cli run"), front=front)), PRIVATE) if f.reason == SERVICE]
    assert hit.path == "SKILL.md" and 2 <= hit.line <= 4


@pytest.mark.parametrize(
    "front, body",
    [
        # naming a service is not acting there
        ("---\nname: chat-video\ndescription: Create animated WhatsApp-style chat videos for social posts.\n---\n", ""),
        ("---\nname: x-trends\ndescription: Fetch trending topics on Twitter for any country from public aggregators.\n---\n", ""),
        ("---\nname: styler\ndescription: Keep messages sent to WhatsApp in the platform's formatting syntax.\n---\n", ""),
        # a side feature deep in the body, not the stated job
        ("---\nname: release-check\ndescription: Check for new releases of a tool and print the changelog.\n---\n",
         "\n## Daily check\n\n```bash\n# Add a daily check at 9am, notify via Telegram\n```\n"),
    ],
)
def test_a_service_named_without_acting_in_the_users_account_there_is_not_private(tmp_path, front, body):
    assert SERVICE not in reasons(evaluate(skill_from(tmp_path, bash("tool run") + body, front=front)), PRIVATE)


def test_a_site_that_may_require_a_subscription_is_no_account_the_skill_needs(tmp_path):
    # a real news-briefing skill's troubleshooting: "WSJ/Barron's may require subscription cookies for some content"
    body = bash("python3 briefing.py --feeds rss.txt") + "\n### Feeds timing out\n- Some papers may require subscription cookies for some content\n"
    assert of_kind(evaluate(skill_from(tmp_path, body)), PRIVATE) == []
    assert reasons(evaluate(skill_from(tmp_path, body.replace("may require", "require"), name="r")), PRIVATE) == {"requires an account or login"}


def test_a_loopback_proxy_given_as_an_options_example_is_no_host_the_skill_uses(tmp_path):
    # a real text-to-speech CLI: "--proxy, -p: Proxy URL (e.g., http://localhost:7890)"
    body = bash("tts-cli say 'hello' -o out.mp3") + "\n- `--proxy, -p`: Proxy URL (e.g., http://localhost:7890)\n"
    assert of_kind(evaluate(skill_from(tmp_path, body)), PRIVATE) == []
    # a URL whose path says proxy is still the user's own service (kubectl proxy's dashboard)
    dash = bash("kubectl get pods") + '\n```python\nbrowser_open(url="http://localhost:8001/api/v1/namespaces/x/services/https:dash:/proxy/")\n```\n'
    assert reasons(evaluate(skill_from(tmp_path, dash, name="k")), PRIVATE) == {"uses a private network host"}


def test_service_names_that_are_everyday_words_count_only_as_names(tmp_path):
    front = "---\nname: forum-helper\ndescription: Post a summary in threads on the team forum and send a signal to the worker.\n---\n"
    assert SERVICE not in reasons(evaluate(skill_from(tmp_path, bash("forum post"), front=front)), PRIVATE)
    named = front.replace("in threads on the team forum", "on Threads")
    assert SERVICE in reasons(evaluate(skill_from(tmp_path, bash("forum post"), front=named, name="n")), PRIVATE)
