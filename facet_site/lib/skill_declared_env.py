"""What a skill's declared environment variables say it depends on besides secrets, Django-free:
whose account it works in (`M365_TENANT_ID`, `TESLA_EMAIL`) and where the user's own instance of a
service runs (`VIKUNJA_URL`, `OKTA_DOMAIN`). Neither is a secret, and a task has neither. Secrets
are `skill_private`'s and `skill_requirements`' concern; this module is called from there.
"""
from __future__ import annotations

import re

from facet_site.lib.skill_findings import PRIVATE, Finding, SkillDoc
from facet_site.lib.skillformat import ParsedSkill

__all__ = ["dependencies"]

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
    return out
