"""Private verdicts for two shapes the ninth blind check of real ClawHub uploads left (docs/skills.md, "A
ninth blind check"): a key one feature needs on top of what the skill does ("Notion 同步需要额外配置 API key"),
and a key the agent gets by registering itself. Each has a look-alike that stays private. Written for the
tests; none is copied from a real skill."""
from __future__ import annotations

import pytest

from facet_site.lib.skill_filters import PRIVATE, evaluate, requirements
from tests.lib.skill_filter_samples import bash, of_kind, reasons, skill_from

STEPS = bash("python3 scripts/journal.py add --mood 4 --text 'long walk'")


@pytest.mark.parametrize("line", [
    "Notion 同步需要额外配置 API key（`NOTION_API_KEY`）。",
    "Syncing entries to Notion requires an additional API key (`NOTION_API_KEY`).",
    "The export to Notion needs a separate token: set `NOTION_API_KEY`.",
])
def test_a_key_only_one_added_feature_needs_is_optional(tmp_path, line):
    skill = skill_from(tmp_path, STEPS + "\n" + line + "\n")
    assert of_kind(evaluate(skill), PRIVATE) == []
    reqs = requirements(skill).items  # the variable, or "API key" where the Chinese names none
    assert reqs and all(not r.required and "optional" in r.optional_because for r in reqs)


@pytest.mark.parametrize("line", [
    "使用前需要配置 API key（`NOTION_API_KEY`）。",
    "This skill requires an API key: set `NOTION_API_KEY`.",
    # "additionally" for the whole skill is still its need
    "The skill additionally requires `NOTION_API_KEY`.",
])
def test_a_key_the_whole_skill_needs_stays_required(tmp_path, line):
    assert reasons(evaluate(skill_from(tmp_path, STEPS + "\n" + line + "\n")), PRIVATE) & {
        "requires secret NOTION_API_KEY", "requires an API key (stated in prose)"}


REGISTER = """## Register first

Every agent registers itself once:

```bash
curl -X POST https://api.agentboard.example/api/v1/agents/register \\
  -H "Content-Type: application/json" \\
  -d '{"name": "YourAgentName", "description": "What you do"}'
```

Response:

```json
{"agent": {"api_key": "agentboard_xxx", "claim_url": "https://agentboard.example/claim/xxx"}}
```

Save your `api_key` and send it on every request:

```bash
export AGENTBOARD_API_KEY="agentboard_xxx"
curl https://api.agentboard.example/api/v1/posts -H "Authorization: Bearer $AGENTBOARD_API_KEY"
```
"""


def test_a_key_the_agent_gets_by_registering_itself_is_not_private(tmp_path):
    skill = skill_from(tmp_path, REGISTER + "\nYou need an API key for every call.\n")
    assert of_kind(evaluate(skill), PRIVATE) == []
    reqs = requirements(skill).items
    assert reqs and all(not r.required and "registers itself" in r.optional_because for r in reqs)


def test_a_registration_that_returns_no_key_or_a_key_for_another_service_leaves_the_requirement(tmp_path):
    # the registration answers with a claim link only: the key comes from the user's dashboard
    no_key = REGISTER.replace('"api_key": "agentboard_xxx", ', "")
    assert reasons(evaluate(skill_from(tmp_path, no_key, name="a")), PRIVATE) == {"requires secret AGENTBOARD_API_KEY"}
    # another service's key, named nowhere near the registration, is still the user's to give
    other = REGISTER + "\n\n" + "\n".join(["Post as usual."] * 30) + "\n\nSummaries use OpenAI: you must set `OPENAI_API_KEY`.\n"
    assert "requires secret OPENAI_API_KEY" in reasons(evaluate(skill_from(tmp_path, other, name="b")), PRIVATE)
