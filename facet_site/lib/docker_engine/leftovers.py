"""Removing the sandbox containers a dead worker or a daemon restart left behind, found by the
labels every sandbox carries."""
from __future__ import annotations

import time

import docker
from docker.errors import NotFound

from facet_site.lib.docker_engine.constants import LABEL_OWNER, LABEL_SANDBOX
from facet_site.lib.docker_engine.errors import PermanentEngineError, engine_call


def cleanup_leftovers(client: docker.DockerClient, older_than_s: float = 0, *,
                      owner: str | None = None, owner_prefix: str | None = None,
                      stopped_only: bool = False) -> int:
    """Remove sandbox containers (label facet.sandbox=1) older than older_than_s, optionally
    only one owner's (`owner`: exactly, `owner_prefix`: every owner label starting with it) or
    only stopped ones. Returns how many were removed. Run at worker start, when waiting work
    resumes and by the cleanup command: a worker that died mid-trial, or a daemon restart (it
    stops every container), leaves sandboxes behind. A sandbox never stops by itself (its init
    only ends on a signal), so a stopped one is nobody's any more."""
    filters: dict[str, list[str]] = {
        "label": [f"{LABEL_SANDBOX}=1"] + ([f"{LABEL_OWNER}={owner}"] if owner else [])}
    if stopped_only:
        filters["status"] = ["exited", "dead"]
    with engine_call("list sandboxes"):
        rows = client.api.containers(all=True, filters=filters)
    now = time.time()
    removed = 0
    for row in rows:
        if now - float(row.get("Created") or 0) < older_than_s:
            continue
        if owner_prefix and not str((row.get("Labels") or {}).get(LABEL_OWNER, "")).startswith(
                owner_prefix):
            continue
        try:
            with engine_call("remove a leftover sandbox"):
                client.api.remove_container(row["Id"], force=True, v=True)
            removed += 1
        except PermanentEngineError as exc:
            if not isinstance(exc.__cause__, NotFound):
                raise
    return removed


# --------------------------------------------------------------------------------------------
