"""The named LLM endpoints a run or rollout batch may choose (docs/security.md, "LLM endpoints"):
the operator's from settings (`default` and FACET_LLM_ENDPOINTS) and those admins define in the
Django admin (models.NamedEndpoint). The one place both are looked up by name.

An admin's endpoint takes its key by name from what the operator set up: a FACET_LLM_KEY_<NAME>
variable (settings.FACET_LLM_KEYS) or a file of FACET_LLM_KEY_DIR. Nobody types a key or a path
into a page, the key is never stored in the database, and like every named endpoint it never
inherits the default's key, so no key goes to another endpoint's URL.
"""
from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

from facet_site.lib.llm.settings import LLMEndpoint, LLMSettings

from .models import NamedEndpoint

# a key's name: a variable's suffix or a file's name, never a path
KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def _key_dir() -> Path | None:
    return Path(settings.FACET_LLM_KEY_DIR).resolve() if settings.FACET_LLM_KEY_DIR else None


def _key_file(name: str) -> Path | None:
    folder = _key_dir()
    if folder is None or not KEY_NAME.match(name):
        return None
    path = (folder / name).resolve()
    return path if path.parent == folder and path.is_file() else None


def key_names() -> list[str]:
    """The keys an admin may choose for an endpoint, by name (never their values)."""
    names = set(settings.FACET_LLM_KEYS)
    folder = _key_dir()
    if folder is not None and folder.is_dir():
        names |= {p.name for p in folder.iterdir() if p.is_file() and KEY_NAME.match(p.name)}
    return sorted(names)


def _key_settings(name: str) -> dict:
    if not name:
        return {}
    if name in settings.FACET_LLM_KEYS:
        return {"api_key": settings.FACET_LLM_KEYS[name]}
    path = _key_file(name)
    # a key the operator removed since: the endpoint is called without one and the server says so
    return {"api_key_file": str(path)} if path is not None else {}


def as_endpoint(record: NamedEndpoint) -> LLMEndpoint:
    llm = LLMSettings().overlaid({"base_url": record.base_url, "model": record.model, "timeout": record.timeout_s,
                                  **_key_settings(record.key_name)}, source=f"endpoint {record.name!r}")
    return LLMEndpoint(record.name, llm, record.model_names, record.max_tokens_cap)


def configured() -> dict[str, LLMEndpoint]:
    """Every endpoint by name: the operator's first (they win on a name both use), then the
    enabled ones admins defined."""
    endpoints = dict(settings.FACET_LLM_ENDPOINTS)
    for record in NamedEndpoint.objects.filter(enabled=True):
        endpoints.setdefault(record.name, as_endpoint(record))
    return endpoints


def find(name: str) -> LLMEndpoint | None:
    """The endpoint called `name` ("" is "default"), or None."""
    name = name or "default"
    if name in settings.FACET_LLM_ENDPOINTS:
        return settings.FACET_LLM_ENDPOINTS[name]
    record = NamedEndpoint.objects.filter(name=name, enabled=True).first()
    return as_endpoint(record) if record is not None else None
