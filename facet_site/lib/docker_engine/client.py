"""Reaching an engine: its URL, a pinged client, what it supports, and image look-ups."""
from __future__ import annotations

import os

import docker
import requests
from docker.errors import DockerException, ImageNotFound

from facet_site.lib.docker_engine.errors import EngineUnavailable, engine_call, classify_error

DEFAULT_ENGINE_URL = "unix:///var/run/docker.sock"

# Disk quota support per engine (base_url -> bool), found by the first sandbox that asks.
DISK_QUOTA: dict[str, bool] = {}


def engine_url(docker_host: str | None) -> str:
    """The engine `docker_host` names (settings.DOCKER_HOST), or the local socket when it is empty."""
    return docker_host or DEFAULT_ENGINE_URL


def connect(docker_host: str | None, *, timeout_s: float = 60) -> docker.DockerClient:
    """A client for the engine at `docker_host` (settings.DOCKER_HOST), or the local socket.

    The TLS variables (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) apply either way; ssh:// hosts go
    through the `ssh` command. Raises EngineUnavailable when the engine does not answer a ping.
    """
    url = engine_url(docker_host)
    # The SDK reads its TLS variables from an environment mapping, as a docker CLI subprocess
    # would: that is the client library's own environment, not a facet setting. DOCKER_HOST in it
    # is overridden so the engine is always the one the caller named.
    environment = {**os.environ, "DOCKER_HOST": url}
    try:
        client = docker.from_env(
            environment=environment, timeout=int(timeout_s),
            use_ssh_client=url.startswith("ssh://"),
        )
        client.ping()
    except (DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise EngineUnavailable(url, str(exc)) from exc
    return client


def engine_info(client: docker.DockerClient) -> dict:
    """The facts about an engine that decide which limits hold (see docs/docker.md)."""
    with engine_call("engine info"):
        info = client.info()
        version = client.version()
    driver_status = dict(info.get("DriverStatus") or [])
    return {
        "server_version": version.get("Version"),
        "api_version": version.get("ApiVersion"),
        "storage_driver": info.get("Driver"),
        "backing_filesystem": driver_status.get("Backing Filesystem"),
        "cgroup_version": info.get("CgroupVersion"),
        "cgroup_driver": info.get("CgroupDriver"),
        "security_options": info.get("SecurityOptions"),
        "ncpu": info.get("NCPU"),
        "mem_total": info.get("MemTotal"),
        "disk_quota": DISK_QUOTA.get(client.api.base_url),
    }


def find_image(client: docker.DockerClient, ref: str) -> docker.models.images.Image | None:
    try:
        return client.images.get(ref)
    except ImageNotFound:
        return None
    except (DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise classify_error(exc, f"look up image {ref}") from exc
