"""The engine's errors, split the way the jobs need them: `TransientEngineError` (retry later:
engine down or restarting, connection reset, API 5xx) and `PermanentEngineError` (record and
stop: lint or build failure, a sandbox that untrusted code got killed), and the mapping of SDK
exceptions onto that split."""
from __future__ import annotations

import contextlib
import socket
from typing import Iterator, Sequence

import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound


class DockerEngineError(Exception):
    """Anything that went wrong talking to or inside the Docker engine."""


class TransientEngineError(DockerEngineError):
    """Retry later: the engine is down or restarting, the connection broke, the API said 5xx."""


class PermanentEngineError(DockerEngineError):
    """Record and stop: retrying the same input gives the same failure."""


class EngineUnavailable(TransientEngineError):
    def __init__(self, url: str, detail: str = ""):
        self.url = url
        self.detail = detail
        super().__init__(f"Docker engine not reachable at {url}; see README (Docker)")


class DockerfileLintError(PermanentEngineError):
    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("Dockerfile rejected: " + "; ".join(self.problems))


class BuildFailed(PermanentEngineError):
    def __init__(self, message: str, log_text: str = "", seconds: float = 0.0):
        self.log = log_text
        self.seconds = seconds
        super().__init__(message)


class BuildTimeout(BuildFailed):
    pass


class BaseImageMissing(PermanentEngineError):
    pass


class BaseImageBuildFailed(PermanentEngineError):
    pass


class SandboxGone(PermanentEngineError):
    """The sandbox container was killed (by a limit watchdog) or disappeared."""


_TRANSIENT_MARKERS = (
    "is restarting", "connection reset", "connection refused", "broken pipe", "i/o timeout",
    "context deadline exceeded", "timeout", "unexpected eof", "try again", "temporarily",
)
# 500s that say something about the request rather than the engine's health.
_PERMANENT_500_MARKERS = (
    "oci runtime", "executable file not found", "invalid", "not supported", "no such",
    "is not running", "is already in progress", "unknown", "supported only",
)


def classify_error(exc: BaseException, what: str = "Docker API call") -> DockerEngineError:
    """Map an SDK/requests exception to our transient/permanent split."""
    if isinstance(exc, DockerEngineError):
        return exc
    if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                        ConnectionError, socket.timeout, TimeoutError)):
        return TransientEngineError(f"{what}: {exc}")
    if isinstance(exc, (NotFound, ImageNotFound)):
        return PermanentEngineError(f"{what}: {exc}")
    if isinstance(exc, APIError):
        status = exc.status_code or 0
        text = str(exc.explanation or exc).lower()
        if status in (502, 503, 504) or any(m in text for m in _TRANSIENT_MARKERS):
            return TransientEngineError(f"{what}: {exc}")
        if status >= 500 and not any(m in text for m in _PERMANENT_500_MARKERS):
            return TransientEngineError(f"{what}: {exc}")
        return PermanentEngineError(f"{what}: {exc}")
    if isinstance(exc, DockerException):
        return PermanentEngineError(f"{what}: {exc}")
    if isinstance(exc, OSError):
        return TransientEngineError(f"{what}: {exc}")
    return PermanentEngineError(f"{what}: {exc!r}")


@contextlib.contextmanager
def engine_call(what: str) -> Iterator[None]:
    try:
        yield
    except DockerEngineError:
        raise
    except (DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise classify_error(exc, what) from exc


