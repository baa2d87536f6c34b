"""Private verdicts for the shapes the eighth blind check of real ClawHub uploads found (docs/skills.md,
"An eighth blind check"): a Required column whose cell qualifies its yes, and a program that stops when
a secret it read is empty. Each has a look-alike. Written for the tests; none is copied from a real skill."""
from __future__ import annotations

from facet_site.lib.skill_filters import PRIVATE, evaluate
from tests.lib.skill_filter_samples import bash, reasons, skill_from

STEPS = bash("npm run signal")


def _table(cell: str) -> str:
    return ("## Environment Variables\n\n| Variable | Required | Description |\n|---|---|---|\n"
            f"| `MARKET_PRIVATE_KEY` | {cell} | Wallet private key |\n| `ORDER_SIZE` | No (default 5) | Shares |\n\n" + STEPS)


def test_a_required_cell_that_qualifies_its_yes_still_says_required(tmp_path):
    for cell in ("Yes (trading)", "**Yes** (live mode)", "是（交易）"):
        found = reasons(evaluate(skill_from(tmp_path, _table(cell), name=f"s{len(cell)}")), PRIVATE)
        assert "requires secret MARKET_PRIVATE_KEY" in found, cell
    for cell in ("No (read-only mode works without it)", "Optional (trading)"):
        assert not reasons(evaluate(skill_from(tmp_path, _table(cell), name=f"t{len(cell)}")), PRIVATE), cell


SCRIPT = ('#!/usr/bin/env bash\nCONFIG_FILE="$HOME/.openclaw/openclaw.json"\n'
          "BOT_TOKEN=$(jq -r '.channels.telegram.botToken // empty' \"$CONFIG_FILE\")\n"
          'if [ -z "$BOT_TOKEN" ]; then\n  echo "ERROR: Bot token not found in $CONFIG_FILE" >&2\n  exit 1\nfi\n'
          'curl -s "https://api.telegram.org/bot${BOT_TOKEN}/getMe"\n')


def test_a_program_that_stops_when_its_token_is_empty_requires_it(tmp_path):
    body = "## Use\n\n```bash\nscripts/topic.sh <chat_id> <message_id>\n```\n"
    skill = skill_from(tmp_path, body, files={"scripts/topic.sh": SCRIPT})
    assert "requires secret BOT_TOKEN" in reasons(evaluate(skill), PRIVATE)
    # a program that goes on without it (a warning, no exit) does not
    lenient = SCRIPT.replace('  echo "ERROR: Bot token not found in $CONFIG_FILE" >&2\n  exit 1\n',
                             '  BOT_TOKEN=""\nfi\nif false; then :\n')
    skill = skill_from(tmp_path, body, files={"scripts/topic.sh": lenient}, name="t")
    assert "requires secret BOT_TOKEN" not in reasons(evaluate(skill), PRIVATE)
