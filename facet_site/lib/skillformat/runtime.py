"""Runtime metadata (`metadata.openclaw` and its aliases): required binaries, environment,
config, install steps and OS, and `allowed-tools`."""
from __future__ import annotations

import json
import re

from facet_site.lib.skillformat.normalise import _dedupe, _dedupe_dicts, _scalar_text
from facet_site.lib.skillformat.records import OPENCLAW_ALIASES


_LIST_SPLIT = re.compile(r"[,\s]+")
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")


def _runtime(fm: dict, warnings: list[str], md_name: str) -> dict:
    blocks = _openclaw_blocks(fm, warnings, md_name)
    bins: list[str] = []
    any_bins: list[str] = []
    env: list[str] = []
    config: list[str] = []
    os_list: list[str] = []
    install: list[dict] = []
    env_vars: list[dict] = []
    primary_env = homepage = version = ""
    for block in blocks:
        req = block.get("requires")
        if isinstance(req, str):
            req = _maybe_json(req)
        if isinstance(req, list):  # `requires: [jq, curl]` reads as bins
            req = {"bins": req}
        req = req if isinstance(req, dict) else {}
        bins += _str_list(req.get("bins")) + _str_list(req.get("bin"))
        any_bins += _str_list(req.get("anyBins")) + _str_list(req.get("any_bins"))
        env += _str_list(req.get("env"))
        # `requires.credentials` / `requires.secrets`, and the same keys at the top of the frontmatter
        # (`credentials: [HUMANOD_API_KEY]`): variable names the skill says it runs with
        env += [n for key in ("credentials", "secrets") for n in _str_list(req.get(key)) if _ENV_NAME.match(n)]
        config += _str_list(req.get("config"))
        os_list += [o.lower() for o in _str_list(block.get("os"))]
        install += _install_list(block.get("install"))
        primary_env = primary_env or _scalar_text(block.get("primaryEnv"))
        env_vars += _env_var_list(block.get("envVars"))
        homepage = homepage or _scalar_text(block.get("homepage"))
        version = version or _scalar_text(block.get("version"))
    required_env = env + ([primary_env] if primary_env else []) + [v["name"] for v in env_vars if v["required"]]
    return {
        "bins": _dedupe(bins),
        "any_bins": _dedupe(any_bins),
        "env": _dedupe(required_env),
        "config": _dedupe(config),
        "os": _dedupe(os_list),
        "install": install,
        "env_vars": _dedupe_dicts(env_vars),
        "primary_env": primary_env,
        "homepage": homepage,
        "version": version,
    }


def _openclaw_blocks(fm: dict, warnings: list[str], md_name: str) -> list[dict]:
    blocks: list[dict] = []
    metadata = fm.get("metadata")
    if isinstance(metadata, str) and metadata.strip():
        parsed = _maybe_json(metadata)
        if isinstance(parsed, dict):
            metadata = parsed
        else:
            warnings.append(f"{md_name}: `metadata` is a string but not a JSON object; ignored")
    if isinstance(metadata, dict):
        for alias in OPENCLAW_ALIASES:
            block = metadata.get(alias)
            if isinstance(block, str):  # strict spec wants string values, so some encode JSON
                block = _maybe_json(block)
            if isinstance(block, dict):
                blocks.append(block)
    for alias in OPENCLAW_ALIASES:  # `metadata.openclaw:` written as one dotted key
        block = fm.get(f"metadata.{alias}")
        if isinstance(block, dict):
            blocks.append(block)
    top = {k: fm[k] for k in ("requires", "install", "os", "primaryEnv", "envVars") if k in fm}
    if "bins" in fm and "requires" not in fm:
        top["requires"] = {"bins": fm["bins"]}
    for key in ("credentials", "secrets"):
        if key in fm and not isinstance(top.get("requires", {}), (str, list)):
            top["requires"] = {**(top.get("requires") or {}), key: fm[key]}
    if top:
        blocks.append(top)
    return blocks


def _maybe_json(text: str):
    text = text.strip()
    if not text or text[0] not in "{[":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _str_list(value) -> list[str]:
    """Names from a list, a single string ("jq, curl" or "jq curl"), or objects with a name."""
    if value is None or value is False:
        return []
    if isinstance(value, str):
        return [s for s in _LIST_SPLIT.split(value.strip()) if s]
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return [str(value)]
    out = []
    for item in value:
        if isinstance(item, dict):
            item = item.get("name") or item.get("id") or item.get("bin")
        if isinstance(item, (str, int, float)) and not isinstance(item, bool):
            text = str(item).strip()
            if text:
                out.append(text)
    return out


def _install_list(value) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        value = [value]
    out = []
    for item in value:
        if isinstance(item, str):
            if item.strip():
                out.append({"kind": "", "package": "", "bins": [], "command": item.strip()})
        elif isinstance(item, dict):
            entry = dict(item)
            entry["kind"] = _scalar_text(item.get("kind") or item.get("type") or item.get("id"))
            package = ""
            for k in ("package", "formula", "module", "pkg", "cask", "name", "url"):
                package = _scalar_text(item.get(k))
                if package:
                    break
            entry["package"] = package
            entry["bins"] = _str_list(item.get("bins"))
            out.append(entry)
    return out


def _env_var_list(value) -> list[dict]:
    if value is None:
        return []
    if isinstance(value, dict):
        # {"FOO_KEY": "description"} or a single {"name": ...} object
        if "name" in value:
            value = [value]
        else:
            value = [{"name": k, "description": v if isinstance(v, str) else ""} for k, v in value.items()]
    if isinstance(value, str):
        value = _str_list(value)
    if not isinstance(value, list):
        return []
    out = []
    for item in value:
        if isinstance(item, str) and item.strip():
            out.append({"name": item.strip(), "required": True, "description": ""})
        elif isinstance(item, dict):
            name = _scalar_text(item.get("name") or item.get("key") or item.get("env"))
            if not name:
                continue
            required = not (item.get("required") is False or item.get("optional") is True)
            out.append({"name": name, "required": required, "description": _scalar_text(item.get("description"))})
    return out


_ALLOWED_TOKEN = re.compile(r"[^\s,(]+(?:\([^)]*\))?")
_BASH_PATTERN = re.compile(r"^(?:Bash|Shell|Terminal)\(\s*([^\s:*()]+)", re.I)


def _allowed_tools(value) -> list[str]:
    if isinstance(value, str):
        return _dedupe(_ALLOWED_TOKEN.findall(value))
    if isinstance(value, list):
        return _dedupe([str(v).strip() for v in value if isinstance(v, (str, int)) and str(v).strip()])
    return []


def _tool_of_allowed(token: str) -> str:
    # `Bash(git status:*)` grants one CLI; the CLI is the useful tool name.
    m = _BASH_PATTERN.match(token)
    return m.group(1) if m else token

