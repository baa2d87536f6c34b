"""Where a skill came from: `_meta.json` of a ClawHub backup, or the commit and remote of a git
checkout (read from .git without running git)."""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache

from facet_site.lib.skillformat.files import _TooLarge, _read_regular
from facet_site.lib.skillformat.normalise import _dict, _rel, _scalar_text
from facet_site.lib.skillformat.records import META_NAME


def _load_meta(data: bytes | None, warnings: list[str]) -> dict | None:
    if data is None:
        warnings.append(f"{META_NAME} is too large to read; ignored")
        return None
    try:
        meta = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        warnings.append(f"{META_NAME} is not valid JSON ({exc}); owner/slug taken from directory names")
        return None
    if not isinstance(meta, dict):
        warnings.append(f"{META_NAME} is not a JSON object; owner/slug taken from directory names")
        return None
    return meta


def _meta_version(meta: dict | None) -> str:
    latest = _dict((meta or {}).get("latest"))
    return _scalar_text(latest.get("version"))


def _provenance(source_kind, rel_dir, meta, git, root, parent_key, md_name) -> dict:
    latest = _dict((meta or {}).get("latest"))
    published = latest.get("publishedAt")
    if isinstance(published, (int, float)) and not isinstance(published, bool):
        try:
            # ClawHub stores milliseconds since the epoch.
            published = _dt.datetime.fromtimestamp(published / 1000, tz=_dt.timezone.utc).isoformat().replace("+00:00", "Z")
        except (OverflowError, OSError, ValueError):
            published = str(published)
    history = (meta or {}).get("history")
    commit = _scalar_text(latest.get("commit")) if source_kind == "clawhub" else ""
    prov = {
        "source_kind": source_kind,
        "path": rel_dir,
        "skill_md": md_name,
        "meta": meta,
        "display_name": _scalar_text((meta or {}).get("displayName")) or None,
        "published_at": published if published not in (None, "") else None,
        "commit": commit or (git.commit if git else None) or None,
        "history_count": len(history) if isinstance(history, list) else None,
        "git_remote": git.remote if git else None,
        "git_commit": git.commit if git else None,
        "git_root": _rel(git.root, root) if git else None,
    }
    if parent_key:
        prov["parent_key"] = parent_key
    return prov


@dataclass(frozen=True)
class _GitInfo:
    root: str
    commit: str | None
    remote: str | None
    owner: str


_HEX_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_REF_NAME = re.compile(r"^refs/[A-Za-z0-9._/\-]+$")
_REMOTE_OWNER = re.compile(r"[:/]([^/:]+)/[^/]+?/?$")
_URL_USERINFO = re.compile(r"^([a-z][a-z0-9+.\-]*://)[^/@]*@", re.I)


def _git_info_upwards(start: str, root: str) -> _GitInfo | None:
    root_abs = os.path.abspath(root)
    current = os.path.abspath(start)
    while True:
        if os.path.lexists(os.path.join(current, ".git")):
            return _read_git_info(current)
        if current == root_abs or os.path.dirname(current) == current:
            return None
        current = os.path.dirname(current)


@lru_cache(maxsize=256)
def _read_git_info(repo_dir: str) -> _GitInfo | None:
    """Commit and origin URL read straight from .git files.

    Never runs `git`: checkouts come from untrusted uploads and a crafted .git/config can make
    git execute commands.
    """
    dotgit = os.path.join(repo_dir, ".git")
    gitdir = dotgit
    if os.path.isfile(dotgit) and not os.path.islink(dotgit):  # worktree or submodule pointer
        text = _read_small(dotgit)
        if not text or not text.startswith("gitdir:"):
            return None
        gitdir = os.path.normpath(os.path.join(repo_dir, text[7:].strip()))
    elif not os.path.isdir(dotgit) or os.path.islink(dotgit):
        return None
    common = gitdir
    common_rel = _read_small(os.path.join(gitdir, "commondir"))
    if common_rel:
        common = os.path.normpath(os.path.join(gitdir, common_rel.strip()))
    commit = None
    head = (_read_small(os.path.join(gitdir, "HEAD")) or "").strip()
    if head.startswith("ref:"):
        ref = head[4:].strip()
        if _REF_NAME.match(ref) and ".." not in ref:
            for base in (gitdir, common):
                value = (_read_small(os.path.join(base, *ref.split("/"))) or "").strip()
                if _HEX_SHA.match(value):
                    commit = value
                    break
            if commit is None:
                commit = _packed_ref(common, ref)
    elif _HEX_SHA.match(head):
        commit = head
    remote = _origin_url(_read_small(os.path.join(common, "config"), 1 << 20) or "")
    owner = ""
    if remote:
        m = _REMOTE_OWNER.search(remote.removesuffix(".git"))
        owner = m.group(1) if m else ""
    return _GitInfo(root=repo_dir, commit=commit, remote=remote, owner=owner)


def _packed_ref(common: str, ref: str) -> str | None:
    text = _read_small(os.path.join(common, "packed-refs"), 16 << 20) or ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref and _HEX_SHA.match(parts[0]):
            return parts[0]
    return None


def _origin_url(config: str) -> str | None:
    section = None
    urls: dict[str, str] = {}
    for line in config.splitlines():
        line = line.strip()
        m = re.match(r'^\[\s*remote\s+"([^"]+)"\s*\]', line)
        if m:
            section = m.group(1)
            continue
        if line.startswith("["):
            section = None
            continue
        if section and section not in urls:
            m = re.match(r"^url\s*=\s*(.+)$", line)
            if m:
                # Tokens sometimes sit in the URL's userinfo; they must not reach the database.
                urls[section] = _URL_USERINFO.sub(r"\1", m.group(1).strip())
    return urls.get("origin") or next(iter(urls.values()), None)


def _read_small(path: str, limit: int = 4096) -> str | None:
    try:
        return _read_regular(path, limit).decode("utf-8", "replace")
    except (OSError, _TooLarge):
        return None

