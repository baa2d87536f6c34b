"""This process as task construction's workers see it: its Docker Engine client, the owner label its
sandboxes carry (so a worker's clean-up finds what it left) and the folders under DATA_DIR where it
keeps logs."""
from __future__ import annotations

import os
import socket
from pathlib import Path

from django.conf import settings

from facet_site.lib import docker_engine as de


def docker_client(*, timeout_s: float = 60):
    """A client for the engine settings.DOCKER_HOST names. Raises de.EngineUnavailable."""
    return de.connect(settings.DOCKER_HOST, timeout_s=timeout_s)


def worker_owner() -> str:
    """The owner label prefix of every sandbox this process starts."""
    return f"{socket.gethostname()}:{os.getpid()}:tasks"


def data_dir(*parts) -> Path:
    """DATA_DIR/<parts>, created when missing."""
    path = Path(settings.DATA_DIR).joinpath(*[str(p) for p in parts])
    path.mkdir(parents=True, exist_ok=True)
    return path
