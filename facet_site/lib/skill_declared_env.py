"""What a skill's declared settings say it depends on besides secrets, Django-free: whose account it
works in (`M365_TENANT_ID`, `TESLA_EMAIL`) and where the user's own instance of a service runs
(`VIKUNJA_URL`, `OKTA_DOMAIN`). Neither is a secret, and a task has neither. Secrets are
`skill_private`'s and `skill_requirements`' concern; this module is called from there.

Settings are declared in SKILL.md's frontmatter (environment variables) or in a JSON manifest beside
it (`skill.json`, `plugin.json`, `openclaw.plugin.json`, `manifest.json`): a `config` object whose
entries say `"required": true` (and `"secret": true` for a key), or a JSON Schema `configSchema` with
its `required` list and `uiHints` marking `sensitive` fields. `manifest_settings` reads those; a
required secret there is a requirement as much as one in `requires.env` (the seventh blind check: a
family of knowledge-base skills whose `skill.json` requires the user's instance URL and MCP token).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from facet_site.lib.skill_findings import PRIVATE, Finding, SkillDoc
from facet_site.lib.skillformat import ParsedSkill

__all__ = ["dependencies", "manifest_settings", "ManifestSetting", "MANIFEST_NAMES"]

MANIFEST_NAMES = frozenset({"skill.json", "plugin.json", "openclaw.plugin.json", "manifest.json"})


@dataclass(frozen=True)
class ManifestSetting:
    name: str  # upper-cased as an environment variable would be: api_key -> API_KEY
    required: bool
    secret: bool  # the manifest says so (secret, sensitive); the name may say so too (skill_private judges)
    path: str
    line: int
    evidence: str


def manifest_settings(skill: ParsedSkill) -> list[ManifestSetting]:
    """The settings a JSON manifest at the skill's root declares. A manifest that is not valid JSON
    or not shaped so declares nothing (it is read for these facts only, never rejected here)."""
    out: list[ManifestSetting] = []
    for f in skill.files:
        if "/" in f.path or f.path.lower() not in MANIFEST_NAMES or not f.text:
            continue
        try:
            data = json.loads(f.text)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        for key, required, secret in _declared(data):
            pos = f.text.find(f'"{key}"')
            end = f.text.find("\n", pos)
            line = f.text.count("\n", 0, pos) + 1 if pos >= 0 else 0
            evidence = f.text[pos:end if end >= 0 else len(f.text)].strip()[:120] if pos >= 0 else key
            name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).upper().replace("-", "_")
            out.append(ManifestSetting(name, required, secret, f.path, line, evidence))
    return out


def _declared(data: dict) -> list[tuple[str, bool, bool]]:
    found = []
    config = data.get("config")
    if isinstance(config, dict):
        for key, spec in config.items():
            if isinstance(spec, dict):
                found.append((str(key), spec.get("required") is True,
                              spec.get("secret") is True or spec.get("sensitive") is True))
    schema = data.get("configSchema")
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        hints = data.get("uiHints") if isinstance(data.get("uiHints"), dict) else {}
        for key in schema["properties"]:
            hint = hints.get(key) if isinstance(hints.get(key), dict) else {}
            found.append((str(key), key in required, hint.get("sensitive") is True))
    return found

# A declared variable that names whose account the skill works in (M365_TENANT_ID, TESLA_EMAIL): a
# task cannot have that account, though the variable is no secret.
_ACCOUNT_ID_NAME = re.compile(r"(?:^|_)(?:TENANT|ACCOUNT|ORG|ORGANIZATION|WORKSPACE|CLIENT)_?ID$|(?:^|_)(?:USERNAME|EMAIL|LOGIN)$")
# A required variable that holds where the user's own instance of a service runs (VIKUNJA_URL,
# OKTA_DOMAIN, JIRA_BASE_URL): a task has no such instance and no address for one. A database or
# cache address is not one: a task can start its own PostgreSQL or Redis.
_SERVICE_ADDRESS_NAME = re.compile(r"(?:^|_)(?:URL|URI|HOST|HOSTNAME|ENDPOINT|SERVER|INSTANCE|DOMAIN|API_BASE)$")
_LOCAL_SERVICE_NAME = re.compile(r"^(?:DATABASE|DB|POSTGRES(?:QL)?|PG|MYSQL|MARIADB|MONGO(?:DB)?|REDIS|SQLITE|AMQP|RABBITMQ|"
                                 r"BROKER|CELERY_BROKER|MEMCACHED?)(?:_|$)")


def dependencies(skill: ParsedSkill, front: SkillDoc) -> list[Finding]:
    """PRIVATE findings for declared variables naming an account (required or not: the name says
    whose account) and required ones holding the address of the user's own service (an optional
    one has a default or a way round it). `front` is SKILL.md's frontmatter, where they are named."""
    out = []
    names = list(skill.required_env) + [v.get("name", "") for v in skill.env_vars if isinstance(v, dict)]
    found = [(n, "requires an account or login") for n in dict.fromkeys(n for n in names if n and _ACCOUNT_ID_NAME.search(n))]
    found += [(n, "needs the address of the user's own service") for n in dict.fromkeys(
        n for n in skill.required_env if n and _SERVICE_ADDRESS_NAME.search(n) and not _LOCAL_SERVICE_NAME.match(n))]
    for name, reason in found:
        pos = front.text.find(name)
        out.append(Finding(PRIVATE, reason, name, front.line_no(pos) if pos >= 0 else 0, front.path))
    for setting in manifest_settings(skill):
        if setting.required and _SERVICE_ADDRESS_NAME.search(setting.name) and not _LOCAL_SERVICE_NAME.match(setting.name):
            out.append(Finding(PRIVATE, "needs the address of the user's own service", setting.evidence, setting.line, setting.path))
    return out
