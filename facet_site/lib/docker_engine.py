"""The Docker engine as facet uses it, Django-free: base image, environment builds, sandboxes.

facet runs untrusted generated code (solutions, verifiers) here, so everything that touches a
container applies limits by default. The engine is reached through the Docker SDK for Python;
DOCKER_HOST (and DOCKER_TLS_VERIFY / DOCKER_CERT_PATH) select a remote one. docs/docker.md says
how the engine is started on our machines and which limits hold on which storage driver.

Errors are split the way the jobs need them: `TransientEngineError` (retry later: engine down or
restarting, connection reset, API 5xx) and `PermanentEngineError` (record and stop: lint or build
failure, a sandbox that untrusted code got killed).

`python -m facet_site.lib.docker_engine base-image|cleanup|info` is the command-line entry point.
"""
from __future__ import annotations

import argparse
import codecs
import contextlib
import fcntl
import fnmatch
import hashlib
import io
import json
import logging
import os
import posixpath
import re
import select
import shlex
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Mapping, Sequence

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import LogConfig, Ulimit

log = logging.getLogger(__name__)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

BASE_IMAGE_TAG = "facet-base:bookworm"
ENV_IMAGE_REPOSITORY = "facet-env"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"

LABEL_BASE = "facet.base"
LABEL_BASE_PACKAGES = "facet.base.packages"
LABEL_CONTEXT_SHA256 = "facet.context.sha256"
LABEL_SANDBOX = "facet.sandbox"
LABEL_OWNER = "facet.owner"
LABEL_CREATED = "facet.created"

# What generated tasks may rely on without installing anything: the harbor runtime contract
# (bash, pytest for tests/test.sh) plus the everyday tools a terminal task touches. Each name was
# checked against bookworm main; Recommends are not installed by debootstrap.
BASE_PACKAGES: tuple[str, ...] = (
    "bash", "coreutils", "findutils", "grep", "sed", "gawk", "diffutils", "patch", "procps",
    "psmisc", "less", "file", "bsdextrautils", "tree",
    "tar", "gzip", "bzip2", "xz-utils", "zip", "unzip",
    "ca-certificates", "curl", "wget", "git", "jq", "sqlite3", "make", "vim-tiny", "nano-tiny",
    "python3", "python3-pytest", "python3-yaml", "python3-venv", "python3-pip",
)

# The legacy builder prints this for every RUN step; those are the containers a timed-out build
# may leave behind.
_RUNNING_IN = re.compile(r"Running in ([0-9a-f]{12,64})")

# The PID 1 of every sandbox: a shell that sleeps and, being init, reaps the orphans that
# untrusted code leaves behind (a bare `sleep infinity` as PID 1 never reaps, so zombies from a
# killed fork bomb would hold the pids limit forever). `kill -9 -1` from an exec spares PID 1,
# kills the sleep, and the loop starts a new one, so the sandbox survives a straggler cleanup.
_SANDBOX_INIT = "trap 'exit 0' TERM INT; while :; do sleep 2147483647 & wait $!; done"

# All capabilities are dropped and only these come back: each is what some everyday shell work as
# root fails without (MKNOD, NET_RAW, SYS_CHROOT, SETFCAP... from Docker's defaults stay off).
SANDBOX_CAPABILITIES: tuple[str, ...] = (
    "CHOWN",  # chown in solutions, `cp -a`/tar extraction as root, useradd's home dir
    "DAC_OVERRIDE",  # root writing files it does not own (e.g. a 0444 config a task asks to fix)
    "FOWNER",  # chmod/utime on files owned by other users
    "SETUID", "SETGID",  # su/runuser/setpriv to a task user, apt's privilege drop to _apt
    "KILL",  # root killing other users' processes, including our straggler cleanup
    "NET_BIND_SERVICE",  # servers on ports < 1024 on the sandbox's own loopback
)


# --------------------------------------------------------------------------------------------
# Errors


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
def _engine_call(what: str) -> Iterator[None]:
    try:
        yield
    except DockerEngineError:
        raise
    except (DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise classify_error(exc, what) from exc


# --------------------------------------------------------------------------------------------
# Connecting


def _default_data_dir() -> Path:
    return Path(os.environ.get("FACET_DATA_DIR") or Path(__file__).resolve().parents[2] / "var")


def engine_url(docker_host: str | None = None) -> str:
    return docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect(docker_host: str | None = None, *, timeout_s: float = 60) -> docker.DockerClient:
    """A client for the engine at docker_host, else DOCKER_HOST, else the local socket.

    The TLS variables (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) apply either way; ssh:// hosts go
    through the `ssh` command. Raises EngineUnavailable when the engine does not answer a ping.
    """
    url = engine_url(docker_host)
    environment = dict(os.environ)
    if docker_host:
        environment["DOCKER_HOST"] = docker_host
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
    with _engine_call("engine info"):
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
        "disk_quota": _DISK_QUOTA.get(client.api.base_url),
    }


def find_image(client: docker.DockerClient, ref: str) -> docker.models.images.Image | None:
    try:
        return client.images.get(ref)
    except ImageNotFound:
        return None
    except (DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise classify_error(exc, f"look up image {ref}") from exc


# --------------------------------------------------------------------------------------------
# Bounded capture of output and logs


class _HeadTail:
    """Keeps the first and last `limit // 2` bytes of a stream, counting what it drops."""

    def __init__(self, limit: int):
        self.head_limit = max(limit // 2, 0)
        self.tail_limit = max(limit - self.head_limit, 0)
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if len(self.head) < self.head_limit:
            take = self.head_limit - len(self.head)
            self.head += data[:take]
            data = data[take:]
        if not data or not self.tail_limit:
            return
        if len(data) >= self.tail_limit:
            self.tail.clear()
            self.tail.append(bytes(data[-self.tail_limit:]))
            self.tail_len = self.tail_limit
            return
        self.tail.append(bytes(data))
        self.tail_len += len(data)
        while self.tail_len - len(self.tail[0]) >= self.tail_limit:
            self.tail_len -= len(self.tail.popleft())
        if self.tail_len > self.tail_limit:
            extra = self.tail_len - self.tail_limit
            self.tail[0] = self.tail[0][extra:]
            self.tail_len = self.tail_limit

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - self.tail_len

    def getvalue(self) -> bytes:
        tail = b"".join(self.tail)
        if self.dropped:
            note = f"\n[facet: {self.dropped} bytes of output dropped here]\n".encode()
            return bytes(self.head) + note + tail
        return bytes(self.head) + tail

    def text(self) -> str:
        return self.getvalue().decode("utf-8", errors="replace")


class _FileSink:
    """Streams output to a file, up to `max_bytes`; the rest is counted and a marker at the end
    says how much was cut. The full log a reviewer downloads, where _HeadTail keeps only 1 MiB."""

    def __init__(self, path: Path, max_bytes: int):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max(int(max_bytes), 0)
        self.fh: IO[bytes] | None = open(self.path, "wb")
        self.written = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if self.fh is None or self.written >= self.max_bytes:
            return
        take = data[: self.max_bytes - self.written]
        self.fh.write(take)
        self.written += len(take)

    @property
    def truncated(self) -> bool:
        return self.total > self.written

    def close(self) -> None:
        if self.fh is None:
            return
        if self.truncated:
            self.fh.write(f"\n[facet: log truncated at {self.max_bytes} bytes; the command printed "
                          f"{self.total} bytes in all]\n".encode())
        self.fh.close()
        self.fh = None


class _Tee:
    def __init__(self, *sinks: Any):
        self.sinks = sinks

    def feed(self, data: bytes) -> None:
        for sink in self.sinks:
            sink.feed(data)


# --------------------------------------------------------------------------------------------
# Base image


def _require_root_tools(*tools: str) -> None:
    if os.geteuid() != 0:
        raise BaseImageBuildFailed("building the base image needs root (debootstrap, chroot)")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise BaseImageBuildFailed(
            f"missing {', '.join(missing)}: run scripts/start-dockerd (installs docker.io and "
            "debootstrap) or `apt-get install debootstrap`")


_ROOTFS_MARKER = ".facet-base-rootfs"


def _prepare_rootfs_dir(rootfs_dir: Path) -> None:
    # Only a directory we made ourselves (or an empty one) is ever deleted: rootfs_dir may be
    # given on the command line.
    if rootfs_dir.exists() and any(rootfs_dir.iterdir()):
        if not (rootfs_dir / _ROOTFS_MARKER).exists():
            raise BaseImageBuildFailed(
                f"{rootfs_dir} is not empty and was not made by facet; refusing to delete it")
        shutil.rmtree(rootfs_dir)
    rootfs_dir.mkdir(parents=True, exist_ok=True)
    (rootfs_dir / _ROOTFS_MARKER).write_text("facet base image root filesystem; safe to delete\n")


def _finish_rootfs(rootfs: Path, suite: str, mirror: str, packages: Sequence[str]) -> None:
    security = mirror.rstrip("/").removesuffix("/debian") + "/debian-security"
    (rootfs / "etc/apt/sources.list").write_text(
        f"deb {mirror} {suite} main\n"
        f"deb {mirror} {suite}-updates main\n"
        f"deb {security} {suite}-security main\n")
    # Task Dockerfiles run `pip install` as in the python:3 images; Debian's PEP 668 marker would
    # refuse every one of them.
    for marker in (rootfs / "usr/lib").glob("python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    # Stale package lists and downloaded .debs only make the image bigger: builds that install
    # anything start with `apt-get update` anyway.
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*"):
        for p in rootfs.glob(pattern):
            p.unlink()
    (rootfs / "etc/facet-base-packages").write_text("\n".join(packages) + "\n")


def build_base_image(
    client: docker.DockerClient,
    tag: str = BASE_IMAGE_TAG,
    *,
    rootfs_dir: Path,
    packages: Sequence[str] = BASE_PACKAGES,
    suite: str = DEBIAN_SUITE,
    mirror: str = DEBIAN_MIRROR,
    keep_rootfs: bool = False,
    log_file: Path | None = None,
) -> docker.models.images.Image:
    """debootstrap a minbase Debian with `packages`, and `docker import` it as `tag`.

    There is no registry to pull from here, so this is the only way an image comes to exist.
    Takes a few minutes and needs root; `ensure_base_image` skips it when the tag exists.
    """
    _require_root_tools("debootstrap", "tar")
    rootfs_dir = Path(rootfs_dir)
    _prepare_rootfs_dir(rootfs_dir)
    started = time.monotonic()
    cmd = ["debootstrap", "--variant=minbase", "--components=main",
           "--include=" + ",".join(packages), suite, str(rootfs_dir), mirror]
    log.info("base image: %s", shlex.join(cmd))
    with contextlib.ExitStack() as stack:
        out: IO[str] | int = subprocess.PIPE
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            out = stack.enter_context(open(log_file, "a"))
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if proc.returncode != 0:
        tail = (proc.stdout or "")[-4000:] if log_file is None else f"see {log_file}"
        raise BaseImageBuildFailed(f"debootstrap failed (exit {proc.returncode}): {tail}")
    _finish_rootfs(rootfs_dir, suite, mirror, packages)
    debootstrap_s = time.monotonic() - started

    changes = [
        f"LABEL {LABEL_BASE}=1",
        f"LABEL {LABEL_BASE_PACKAGES}={json.dumps(' '.join(packages))}",
        f"LABEL facet.base.suite={suite}",
        "ENV LANG=C.UTF-8",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        'CMD ["/bin/bash"]',
    ]
    repository, _, image_tag = tag.rpartition(":") if ":" in tag else (tag, "", "latest")
    tar_cmd = ["tar", "-C", str(rootfs_dir), "--numeric-owner", f"--exclude=./{_ROOTFS_MARKER}",
               "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*", "-c", "."]
    tar_proc = subprocess.Popen(tar_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with _engine_call("docker import of the base image"):
            client.api.import_image(src=tar_proc.stdout, repository=repository, tag=image_tag,
                                    changes=changes, stream_src=True)
    finally:
        assert tar_proc.stdout is not None
        tar_proc.stdout.close()
        tar_err = tar_proc.stderr.read().decode(errors="replace") if tar_proc.stderr else ""
        tar_rc = tar_proc.wait()
    if tar_rc != 0:
        raise BaseImageBuildFailed(f"tar of the root filesystem failed: {tar_err[-2000:]}")
    with _engine_call("inspect the imported base image"):
        image = client.images.get(tag)
    if not keep_rootfs:
        shutil.rmtree(rootfs_dir, ignore_errors=True)
    log.info("base image %s built in %.0f s (debootstrap %.0f s), %d MB", tag,
             time.monotonic() - started, debootstrap_s, image.attrs.get("Size", 0) // 10**6)
    return image


def ensure_base_image(
    client: docker.DockerClient,
    tag: str = BASE_IMAGE_TAG,
    *,
    rootfs_dir: Path | None = None,
    force: bool = False,
    **build_kwargs: Any,
) -> docker.models.images.Image:
    """The base image, built first if the engine lacks it. Cheap when it exists.

    A lock file under FACET_DATA_DIR keeps two workers on one machine from building it at once.
    """
    if not force and (image := find_image(client, tag)) is not None:
        return image
    data_dir = _default_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "base-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (image := find_image(client, tag)) is not None:
            return image
        return build_base_image(
            client, tag, rootfs_dir=Path(rootfs_dir or data_dir / "base-rootfs"),
            log_file=build_kwargs.pop("log_file", data_dir / "base-image.log"), **build_kwargs)


# --------------------------------------------------------------------------------------------
# Dockerfile lint


_SECRET_NAME_PARTS = {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL",
                      "CREDENTIALS"}
_SECRET_NAME_WORDS = ("SECRET", "PASSWORD", "PASSWD", "TOKEN", "APIKEY", "API_KEY")
_SECRET_VALUE_PATTERNS = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "an AWS access key id"),
    (re.compile(r"\b(?:ghp|gho|ghs|ghu)_[A-Za-z0-9]{30,}\b|\bgithub_pat_[A-Za-z0-9_]{30,}"),
     "a GitHub token"),
    (re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"), "an API secret key (sk-...)"),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), "a Slack token"),
)
_VARIABLE_ONLY = re.compile(
    r"^\$(\{[A-Za-z_][A-Za-z0-9_]*(:?[-+][^}]*)?\}|[A-Za-z_][A-Za-z0-9_]*)$")
_REMOTE_SOURCE = re.compile(r"^(https?|ftp|git|ssh)://|^git@", re.IGNORECASE)
_FORBIDDEN_DIRS = ("solution", "tests")
_FORBIDDEN_NAMES = ("solve.sh", "test.sh", "test_*.py")


def _is_secret_name(name: str) -> bool:
    upper = name.upper()
    if upper == "PWD":
        return False
    parts = [p for p in upper.split("_") if p]
    if parts and parts[-1] in _SECRET_NAME_PARTS:
        return True
    return any(word in upper for word in _SECRET_NAME_WORDS)


def _dockerfile_instructions(text: str) -> list[tuple[int, str, str]]:
    """(first line number, INSTRUCTION, arguments) with continuations joined and comments gone."""
    escape = "\\"
    lines = text.splitlines()
    for raw in lines:  # parser directives must come first
        m = re.match(r"^\s*#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$", raw)
        if not m:
            break
        if m.group(1).lower() == "escape" and m.group(2) in ("\\", "`"):
            escape = m.group(2)
    result: list[tuple[int, str, str]] = []
    current: list[str] = []
    start = 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped by Docker too
        if not current:
            start = number
        if stripped.endswith(escape):
            current.append(stripped[: -len(escape)])
            continue
        current.append(stripped)
        joined = " ".join(part for part in current if part)
        current = []
        instruction, _, args = joined.partition(" ")
        result.append((start, instruction.upper(), args.strip()))
    if current:
        joined = " ".join(part for part in current if part)
        instruction, _, args = joined.partition(" ")
        result.append((start, instruction.upper(), args.strip()))
    return result


def _split_copy_args(args: str) -> tuple[list[str], list[str]]:
    """(flags, paths) of a COPY/ADD, in either the JSON or the whitespace form."""
    flags: list[str] = []
    rest = args
    while rest.startswith("--"):
        flag, _, rest = rest.partition(" ")
        flags.append(flag)
        rest = rest.lstrip()
    if rest.startswith("["):
        try:
            paths = json.loads(rest)
            if isinstance(paths, list) and all(isinstance(p, str) for p in paths):
                return flags, paths
        except ValueError:
            pass
    return flags, rest.split()


def _env_pairs(instruction: str, args: str) -> list[tuple[str, str | None]]:
    try:
        tokens = shlex.split(args, posix=True)
    except ValueError:
        tokens = args.split()
    if not tokens:
        return []
    if instruction == "ARG":
        name, eq, value = tokens[0].partition("=")
        return [(name, value if eq else None)]
    if "=" not in tokens[0]:  # legacy `ENV NAME value with spaces`
        return [(tokens[0], " ".join(tokens[1:]))]
    return [(t.partition("=")[0], t.partition("=")[2]) for t in tokens]


def _is_forbidden_source(source: str) -> bool:
    normalized = posixpath.normpath(source.lstrip("/")) if source.strip("/") else "."
    if normalized.startswith("./"):
        normalized = normalized[2:]
    first = normalized.split("/", 1)[0]
    if first in _FORBIDDEN_DIRS:
        return True
    base = posixpath.basename(normalized.rstrip("/"))
    return any(fnmatch.fnmatchcase(base, pattern) for pattern in _FORBIDDEN_NAMES)


def lint_dockerfile(text: str, base_image: str = BASE_IMAGE_TAG) -> list[str]:
    """Problems that make a generated Dockerfile unacceptable, each naming its line.

    The rules keep tasks honest and buildable here: every stage starts from our base image
    (nothing can be pulled), answers (solution/, tests/) never enter the image, no credentials
    are baked in, and nothing is fetched by ADD from a URL (not reproducible, not linted).
    """
    problems: list[str] = []
    instructions = _dockerfile_instructions(text)
    stages: list[str] = []
    seen_from = False
    for line, instruction, args in instructions:
        where = f"line {line}"
        if instruction == "FROM":
            tokens = [t for t in args.split() if not t.startswith("--")]
            image = tokens[0] if tokens else ""
            if "$" in image:
                problems.append(f"{where}: FROM {image}: the image must be named literally "
                                f"({base_image}), not through a variable")
            elif image.lower() not in [s.lower() for s in stages] and image != base_image:
                what = "the first FROM" if not seen_from else "every stage"
                problems.append(f"{where}: FROM {image or '(nothing)'}: {what} must start from "
                                f"{base_image} (no registry is reachable; build on the base image)")
            if len(tokens) >= 3 and tokens[1].upper() == "AS":
                stages.append(tokens[2])
            seen_from = True
            continue
        if not seen_from and instruction not in ("ARG",):
            problems.append(f"{where}: {instruction} before the first FROM")
        if instruction in ("COPY", "ADD"):
            flags, paths = _split_copy_args(args)
            sources = paths[:-1]
            for source in sources:
                if instruction == "ADD" and _REMOTE_SOURCE.search(source):
                    problems.append(f"{where}: ADD {source}: remote URLs are not allowed; "
                                    "download in a RUN step or ship the file in the context")
                elif _is_forbidden_source(source):
                    problems.append(f"{where}: {instruction} {source}: solution and test files "
                                    "must not be copied into the image (they are uploaded at "
                                    "trial time)")
        if instruction in ("ENV", "ARG"):
            for name, value in _env_pairs(instruction, args):
                if value and _is_secret_name(name) and not _VARIABLE_ONLY.match(value.strip()):
                    problems.append(f"{where}: {instruction} {name}: looks like a secret with a "
                                    "literal value; images must not carry credentials")
    if not seen_from:
        problems.append(f"no FROM instruction (the first stage must be FROM {base_image})")
    for number, raw in enumerate(text.splitlines(), 1):
        for pattern, what in _SECRET_VALUE_PATTERNS:
            if pattern.search(raw):
                problems.append(f"line {number}: contains what looks like {what}")
    return problems


def _lint_context(relpaths: Iterable[str]) -> list[str]:
    # A context holding the task's own solution/ or tests/ means it is the task directory rather
    # than its environment/: any `COPY . ...` would put the answers into the image.
    problems = []
    for rel in relpaths:
        if rel in ("solution/solve.sh", "tests/test.sh"):
            problems.append(f"build context contains {rel}: the context must be the task's "
                            "environment/ directory, not the task directory")
    return problems


# --------------------------------------------------------------------------------------------
# Environment image builds


@dataclass(frozen=True)
class BuildResult:
    image_tag: str
    image_id: str
    log: str
    seconds: float
    cached: bool


_BUILD_HASH_VERSION = b"facet-build-context-v1\n"


def _context_entries(context_dir: Path) -> list[tuple[str, Path, os.stat_result]]:
    entries = []
    for dirpath, dirnames, filenames in os.walk(context_dir, followlinks=False):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            full = Path(dirpath) / name
            entries.append((full.relative_to(context_dir).as_posix(), full, full.lstat()))
    entries.sort(key=lambda e: e[0])
    return entries


def _build_context(context_dir: Path, base_image_id: str, max_bytes: int,
                   spool: IO[bytes]) -> str:
    """Write the context as a tar into `spool` and return its sha256 digest.

    The digest covers each entry's path, type, permission bits and content (or link target), plus
    the base image's id: a rebuilt base image must not be answered from the old environment
    image. mtimes and owners are left out so a fresh checkout hashes the same.
    """
    digest = hashlib.sha256(_BUILD_HASH_VERSION)
    digest.update(f"base {base_image_id}\n".encode())
    total = 0
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, full, st in _context_entries(context_dir):
            info = tarfile.TarInfo(rel)
            info.mode = stat.S_IMODE(st.st_mode)
            info.mtime = int(st.st_mtime)
            info.uid = info.gid = 0
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                digest.update(f"d {rel} {info.mode:o}\n".encode())
                tar.addfile(info)
            elif stat.S_ISLNK(st.st_mode):
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(full)
                digest.update(f"l {rel} {info.linkname}\n".encode())
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                data = full.read_bytes()
                total += len(data)
                if total > max_bytes:
                    raise BuildFailed(f"build context is larger than {max_bytes} bytes")
                info.size = len(data)
                digest.update(f"f {rel} {info.mode:o} {len(data)} ".encode())
                digest.update(hashlib.sha256(data).digest())
                digest.update(b"\n")
                tar.addfile(info, io.BytesIO(data))
            # sockets, fifos and devices cannot be sent to the builder; they are left out
    spool.seek(0)
    return digest.hexdigest()


class _BuildStream:
    """Reads the engine's JSON build messages on a thread, so the caller can enforce a deadline."""

    def __init__(self, response: requests.Response, log_limit: int):
        self.response = response
        self.log = _HeadTail(log_limit)
        self.error: str | None = None
        self.container_ids: set[str] = set()
        self.broken: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="facet-build-stream", daemon=True)

    def _handle(self, message: dict) -> None:
        if "stream" in message:
            text = str(message["stream"])
            self.log.feed(text.encode())
            self.container_ids.update(_RUNNING_IN.findall(text))
        elif "status" in message:
            self.log.feed((str(message["status"]) + "\n").encode())
        if "error" in message:
            self.error = str(message.get("error"))
            self.log.feed(("ERROR: " + self.error + "\n").encode())

    def _run(self) -> None:
        decoder = json.JSONDecoder()
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        buffer = ""
        try:
            for chunk in self.response.iter_content(chunk_size=None):
                buffer += text.decode(chunk)
                while True:
                    buffer = buffer.lstrip()
                    if not buffer:
                        break
                    try:
                        message, end = decoder.raw_decode(buffer)
                    except ValueError:
                        break  # incomplete message: wait for more bytes
                    buffer = buffer[end:]
                    if isinstance(message, dict):
                        self._handle(message)
        except Exception as exc:  # reported to the waiting thread
            self.broken = exc

    def cancel(self) -> None:
        # Shutting the socket down wakes the reader; closing it is what the engine notices: it
        # then cancels the build and kills the step's container.
        with contextlib.suppress(Exception):
            self.response.raw.shutdown()
        with contextlib.suppress(Exception):
            self.response.close()


def _remove_containers(client: docker.DockerClient, ids: Iterable[str]) -> None:
    for cid in ids:
        with contextlib.suppress(NotFound, APIError, requests.exceptions.RequestException):
            client.api.remove_container(cid, force=True, v=True)


def build_image(
    client: docker.DockerClient,
    context_dir: Path,
    *,
    base_image: str = BASE_IMAGE_TAG,
    timeout_s: float = 600,
    labels: Mapping[str, str] | None = None,
    dockerfile: str = "Dockerfile",
    memory_bytes: int = 4 * GiB,
    max_context_bytes: int = 256 * MiB,
    log_limit: int = 256 * KiB,
) -> BuildResult:
    """Build the environment image of `context_dir`, or find it already built.

    The tag is facet-env:<sha256 of the context and the base image id>, so an unchanged
    context is never rebuilt. The Dockerfile is linted first (DockerfileLintError). RUN steps get
    host networking (apt/pip reach the registries) and `memory_bytes`. On timeout the build's
    connection is closed, which makes the engine cancel the build; the step containers it
    announced are then force-removed, and BuildTimeout is raised with the log so far.
    """
    context_dir = Path(context_dir)
    dockerfile_path = context_dir / dockerfile
    if not dockerfile_path.is_file():
        raise BuildFailed(f"no {dockerfile} in {context_dir}")
    problems = lint_dockerfile(dockerfile_path.read_text(errors="replace"), base_image)
    problems += _lint_context(rel for rel, _, _ in _context_entries(context_dir))
    if problems:
        raise DockerfileLintError(problems)
    base = find_image(client, base_image)
    if base is None:
        raise BaseImageMissing(
            f"base image {base_image} is missing: run `python -m facet_site.lib.docker_engine "
            "base-image`")

    started = time.monotonic()
    with tempfile.SpooledTemporaryFile(max_size=32 * MiB) as spool:
        digest = _build_context(context_dir, base.id, max_context_bytes, spool)
        tag = f"{ENV_IMAGE_REPOSITORY}:{digest}"
        if (image := find_image(client, tag)) is not None:
            return BuildResult(tag, image.id, "", time.monotonic() - started, cached=True)
        all_labels = {**(labels or {}), LABEL_CONTEXT_SHA256: digest}
        params = {
            "t": tag, "dockerfile": dockerfile, "rm": "1", "forcerm": "1", "pull": "0",
            "networkmode": "host", "labels": json.dumps(all_labels),
            "memory": str(memory_bytes), "memswap": str(memory_bytes),
        }
        api = client.api
        url = f"{api.base_url}/v{api.api_version}/build"
        with _engine_call("start the build"):
            response = api.post(url, params=params, data=spool,
                                headers={"Content-Type": "application/tar"}, stream=True,
                                timeout=None)
        try:
            if response.status_code >= 400:
                try:
                    message = str(response.json().get("message") or response.text)
                except ValueError:
                    message = response.text
                if response.status_code >= 500:
                    raise TransientEngineError(f"build refused ({response.status_code}): {message}")
                raise BuildFailed(f"build refused ({response.status_code}): {message}")
            stream = _BuildStream(response, log_limit)
            stream.thread.start()
            stream.thread.join(max(timeout_s - (time.monotonic() - started), 0))
            if stream.thread.is_alive():
                stream.cancel()
                stream.thread.join(10)
                _remove_containers(client, stream.container_ids)
                seconds = time.monotonic() - started
                stream.log.feed(f"\n[facet: build timed out after {timeout_s:g} s]\n".encode())
                raise BuildTimeout(f"build timed out after {timeout_s:g} s", stream.log.text(),
                                   seconds)
        finally:
            response.close()

    seconds = time.monotonic() - started
    if stream.error is not None:
        raise BuildFailed(f"build failed: {stream.error.strip()}", stream.log.text(), seconds)
    if stream.broken is not None:
        raise TransientEngineError(f"build stream broke: {stream.broken}") from stream.broken
    try:
        with _engine_call("inspect the built image"):
            image = client.images.get(tag)
    except PermanentEngineError as exc:
        raise TransientEngineError(f"build ended without an image: {exc}") from exc
    return BuildResult(tag, image.id, stream.log.text(), seconds, cached=False)


# --------------------------------------------------------------------------------------------
# Sandboxes


@dataclass(frozen=True)
class SandboxLimits:
    cpus: float = 1.0
    memory_bytes: int = 2 * GiB  # swap is off: memswap equals this
    pids: int = 1024
    # Writable layer: enforced by the storage driver where it can (overlay2 on xfs+pquota,
    # btrfs, zfs); elsewhere by RLIMIT_FSIZE per file and a watchdog polling the layer size.
    disk_bytes: int = 4 * GiB
    tmp_bytes: int = 512 * MiB  # /tmp is a tmpfs; it counts against memory_bytes too
    output_bytes: int = 1 * MiB  # per exec, head and tail kept
    # How often the watchdog reads the writable layer's size while an exec runs (a ~2 ms API
    # call; slower answers, e.g. for a layer of many files, space the polls out). A writer at
    # page-cache speed (~300 MB/s here) overshoots disk_bytes by about one interval of writes.
    disk_poll_s: float = 0.2


@dataclass
class ExecResult:
    exit_code: int | None  # None when the process could not be waited for (sandbox killed)
    output: str  # stdout and stderr interleaved, capped at limits.output_bytes
    timed_out: bool
    seconds: float
    output_bytes: int = 0  # produced in total
    dropped_bytes: int = 0
    oom_killed: bool = False
    killed_by: str = ""  # "", "timeout", "memory", "disk"
    output_path: str | None = None  # where the whole output went (exec's output_path)
    output_path_truncated: bool = False  # that file hit its cap and ends with a marker

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass
class FileEntry:
    path: str
    kind: str  # "file", "dir", "symlink", "other"
    size: int
    mode: int  # permission bits (incl. setuid/setgid/sticky)
    uid: int = 0
    gid: int = 0
    sha256: str = ""
    link: str = ""
    text_head: str | None = None  # the first bytes of a UTF-8 text file


@dataclass
class ProcessEntry:
    pid: int  # the engine host's pid
    ppid: int
    uid: int
    args: str


@dataclass
class Snapshot:
    """The realized state of a sandbox: files under some roots and the processes running."""

    roots: list[str]
    files: dict[str, FileEntry] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    processes: list[ProcessEntry] | None = None
    truncated: bool = False
    taken_at: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> Snapshot:
        processes = data.get("processes")
        return cls(
            roots=list(data["roots"]),
            files={k: FileEntry(**v) for k, v in data.get("files", {}).items()},
            missing=list(data.get("missing", [])),
            processes=None if processes is None else [ProcessEntry(**p) for p in processes],
            truncated=bool(data.get("truncated")),
            taken_at=float(data.get("taken_at", 0.0)),
        )


@dataclass
class SnapshotDiff:
    added: list[str]
    removed: list[str]
    modified: dict[str, list[str]]  # path -> what changed: "content", "mode", "kind", "link", ...
    processes_started: list[str]
    processes_ended: list[str]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.modified or self.processes_started
                    or self.processes_ended)

    def to_dict(self) -> dict:
        return asdict(self)


def diff_snapshots(before: Snapshot, after: Snapshot) -> SnapshotDiff:
    added = sorted(set(after.files) - set(before.files))
    removed = sorted(set(before.files) - set(after.files))
    modified: dict[str, list[str]] = {}
    for path in sorted(set(before.files) & set(after.files)):
        a, b = before.files[path], after.files[path]
        changes = [name for name, x, y in (
            ("kind", a.kind, b.kind), ("content", a.sha256, b.sha256), ("size", a.size, b.size),
            ("mode", a.mode, b.mode), ("owner", (a.uid, a.gid), (b.uid, b.gid)),
            ("link", a.link, b.link)) if x != y]
        if changes:
            modified[path] = changes
    started: list[str] = []
    ended: list[str] = []
    if before.processes is not None and after.processes is not None:
        before_args = [p.args for p in before.processes]
        after_args = [p.args for p in after.processes]
        for args in after_args:
            if args in before_args:
                before_args.remove(args)
            else:
                started.append(args)
        ended = before_args
    return SnapshotDiff(added, removed, modified, started, ended)


class _IterReader(io.RawIOBase):
    """A file object over an iterator of byte chunks (what get_archive returns)."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def _text_head(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    for cut in range(4):  # the head may end inside a multi-byte character
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


# Disk quota support per engine (base_url -> bool), found by the first sandbox that asks.
_DISK_QUOTA: dict[str, bool] = {}
_QUOTA_UNSUPPORTED = re.compile(r"storage-?opt|storage option|quota", re.I)


class _NoDiskQuota(DockerEngineError):
    pass


def _default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Sandbox:
    """A container for running untrusted code: no network, bounded CPU/memory/pids/disk/time.

    Used as a context manager; the container is force-removed on exit, exception or not.
    Files go in with `put_files`, commands run with `exec` (each with its own wall-clock timeout
    and output cap), and `snapshot`/`diff` describe what a run changed.
    """

    def __init__(
        self,
        client: docker.DockerClient,
        image: str,
        *,
        owner: str | None = None,
        limits: SandboxLimits | None = None,
        labels: Mapping[str, str] | None = None,
        environment: Mapping[str, str] | None = None,
        workdir: str | None = None,
        name: str | None = None,
    ):
        self.client = client
        self.image = image
        self.owner = owner or _default_owner()
        self.limits = limits or SandboxLimits()
        self.labels = dict(labels or {})
        self.environment = dict(environment or {})
        self.workdir = workdir
        self.name = name
        self.container_id: str | None = None
        self.disk_quota = False
        self.gone_reason = ""
        self._oom_kills_seen = 0

    # -- lifecycle

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _create_kwargs(self) -> dict:
        lim = self.limits
        labels = {**self.labels, LABEL_SANDBOX: "1", LABEL_OWNER: self.owner,
                  LABEL_CREATED: str(int(time.time()))}
        return dict(
            image=self.image,
            entrypoint=["/bin/sh", "-c", _SANDBOX_INIT],
            command=[],
            name=self.name,
            labels=labels,
            environment=self.environment or None,
            working_dir=self.workdir,
            network_mode="none",
            nano_cpus=int(lim.cpus * 1e9),
            mem_limit=lim.memory_bytes,
            memswap_limit=lim.memory_bytes,
            pids_limit=lim.pids,
            cap_drop=["ALL"],
            cap_add=list(SANDBOX_CAPABILITIES),
            security_opt=["no-new-privileges"],
            privileged=False,
            tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={lim.tmp_bytes},mode=1777"},
            # The init loop writes nothing; untrusted code must not be able to fill the
            # engine's log directory through PID 1's stdout either.
            log_config=LogConfig(type="none"),
            ulimits=[Ulimit(name="core", soft=0, hard=0)],
            detach=True,
        )

    def start(self) -> None:
        if self.container_id is not None:
            return
        kwargs = self._create_kwargs()
        key = self.client.api.base_url
        container = None
        if _DISK_QUOTA.get(key, True):
            try:
                with _engine_call("create sandbox"):
                    try:
                        container = self.client.containers.create(
                            storage_opt={"size": str(self.limits.disk_bytes)}, **kwargs)
                    except APIError as exc:
                        if not _QUOTA_UNSUPPORTED.search(str(exc.explanation or exc)):
                            raise
                        raise _NoDiskQuota(str(exc.explanation or exc)) from exc
                _DISK_QUOTA[key] = True
                self.disk_quota = True
            except _NoDiskQuota as exc:
                log.info("engine %s cannot limit a container's disk (%s); using RLIMIT_FSIZE "
                         "and a size watchdog", key, exc)
                _DISK_QUOTA[key] = False
        if container is None:
            kwargs["ulimits"] = kwargs["ulimits"] + [
                Ulimit(name="fsize", soft=self.limits.disk_bytes, hard=self.limits.disk_bytes)]
            with _engine_call("create sandbox"):
                container = self.client.containers.create(**kwargs)
        self.container_id = container.id
        try:
            with _engine_call("start sandbox"):
                container.start()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.container_id is None:
            return
        try:
            self.client.api.remove_container(self.container_id, force=True, v=True)
        except NotFound:
            pass
        except (DockerException, requests.exceptions.RequestException, OSError) as exc:
            # Never mask the with-block's own exception; cleanup_leftovers gets it later.
            log.warning("could not remove sandbox %s: %s", self.container_id[:12], exc)
        self.container_id = None

    @property
    def id(self) -> str:
        if self.container_id is None:
            raise SandboxGone("sandbox is not running")
        return self.container_id

    def _require_alive(self) -> str:
        if self.gone_reason:
            raise SandboxGone(f"sandbox was killed: {self.gone_reason}")
        return self.id

    @contextlib.contextmanager
    def _call(self, what: str) -> Iterator[None]:
        # A container that vanished or stopped under us is the sandbox's end, not an engine fault.
        try:
            with _engine_call(what):
                yield
        except DockerEngineError as exc:
            cause = exc.__cause__
            if isinstance(cause, NotFound) or (
                    isinstance(cause, APIError) and cause.status_code == 409
                    and "not running" in str(cause.explanation or "")):
                self.gone_reason = self.gone_reason or f"container disappeared ({cause})"
                raise SandboxGone(f"{what}: sandbox container is gone: {cause}") from cause
            raise

    def _kill_container(self, reason: str) -> None:
        self.gone_reason = reason
        with contextlib.suppress(DockerException, requests.exceptions.RequestException, OSError):
            self.client.api.kill(self.id)

    def kill_processes(self) -> bool:
        """Kill every process but the sandbox's init, as root. False if that could not run
        (e.g. a fork bomb holds every pid); callers then kill the whole container."""
        try:
            result = self.client.api.exec_create(self.id, ["/bin/sh", "-c", "kill -9 -1"],
                                                 user="0")
            self.client.api.exec_start(result["Id"])
            return self.client.api.exec_inspect(result["Id"]).get("ExitCode") in (0, 1, 137)
        except (DockerException, requests.exceptions.RequestException, OSError):
            return False

    # -- running commands

    def _layer_size(self) -> int | None:
        try:
            rows = self.client.api.containers(all=True, size=True, filters={"id": self.id})
        except (DockerException, requests.exceptions.RequestException, OSError):
            return None
        return int(rows[0].get("SizeRw") or 0) if rows else None

    def _simple_exec(self, argv: list[str], timeout_s: float = 10) -> tuple[int | None, bytes]:
        result = self.exec(argv, timeout_s=timeout_s, user="0")
        return result.exit_code, result.output.encode()

    def exec(
        self,
        cmd: Sequence[str] | str,
        *,
        timeout_s: float = 60,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        output_path: Path | None = None,
        output_path_max_bytes: int = 64 * MiB,
    ) -> ExecResult:
        """Run a command (a string goes through `bash -c`) and wait for it, at most timeout_s.

        Inside, `timeout -s KILL` kills the command's process group at the deadline. Outside, a
        watchdog kills every process but init a few seconds later if output still flows, and
        kills the container (SandboxGone afterwards) if even that does not end the exec.
        Output is read as it comes and capped, so a command printing gigabytes costs time, not
        memory; with `output_path` the whole output also streams to that file, up to
        `output_path_max_bytes` and then a marker. Background processes a command leaves running
        keep running.

        An exec whose stream ends because the engine went away (daemon restart, connection
        lost) raises TransientEngineError: that is not the command's doing.
        """
        cid = self._require_alive()
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        wrapped = ["timeout", "-s", "KILL", f"{timeout_s:.3f}", *argv]
        capture = _HeadTail(self.limits.output_bytes)
        started = time.monotonic()
        with self._call("exec in sandbox"):
            exec_id = self.client.api.exec_create(
                cid, wrapped, stdout=True, stderr=True, stdin=False, tty=False,
                environment=dict(env) if env else None, workdir=workdir, user=user or "",
            )["Id"]
            sock = self.client.api.exec_start(exec_id, socket=True)
        file_sink = _FileSink(output_path, output_path_max_bytes) if output_path is not None else None
        try:
            killed_by = self._pump(sock, _Tee(capture, file_sink) if file_sink else capture,
                                   started, timeout_s)
        finally:
            if file_sink is not None:
                file_sink.close()
        seconds = time.monotonic() - started
        exit_code = self._exec_exit_code(exec_id)
        if not killed_by and exit_code == 137 and seconds >= timeout_s:
            killed_by = "timeout"
        oom = False
        if exit_code == 137 and not killed_by and not self.gone_reason:
            oom = self._new_oom_kill()
            if oom:
                killed_by = "memory"
        return ExecResult(
            exit_code=exit_code, output=capture.text(), timed_out=killed_by == "timeout",
            seconds=seconds, output_bytes=capture.total, dropped_bytes=capture.dropped,
            oom_killed=oom, killed_by=killed_by,
            output_path=str(output_path) if output_path is not None else None,
            output_path_truncated=bool(file_sink and file_sink.truncated),
        )

    def _exec_exit_code(self, exec_id: str) -> int | None:
        """The finished exec's exit code. The engine forgets exec instances when it restarts and
        stops answering while it is down: either means the command's end was not its own, so
        it is raised as transient, unless our own watchdog killed the container."""
        try:
            info = self.client.api.exec_inspect(exec_id)
        except NotFound as exc:
            if self.gone_reason:
                return None
            raise TransientEngineError(
                "the exec instance vanished before it was inspected: the Docker daemon restarted "
                "or the sandbox was removed under us") from exc
        except (DockerException, requests.exceptions.RequestException, OSError) as exc:
            if self.gone_reason:
                return None
            error = classify_error(exc, "inspect the finished exec")
            if isinstance(error, TransientEngineError):
                raise error from exc
            return None
        return None if info.get("Running") else info.get("ExitCode")

    def _pump(self, sock: Any, capture: _HeadTail, started: float, timeout_s: float) -> str:
        """Read the multiplexed exec stream into `capture` until EOF or the watchdog gives up."""
        raw = getattr(sock, "_sock", sock)
        grace = 3.0
        deadline = started + timeout_s + grace
        next_disk_poll = started + self.limits.disk_poll_s
        killed_by = ""
        stage = 0  # 1: stragglers killed, 2: container killed
        header = b""  # an incomplete frame header carried to the next read
        frame_left = 0
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    if stage == 0:
                        killed_by = killed_by or "timeout"
                        stage = 1
                        deadline = now + 5
                        if not self.kill_processes():
                            stage = 2
                            self._kill_container(f"exec exceeded {timeout_s:g} s")
                    elif stage == 1:
                        stage = 2
                        deadline = now + 5
                        self._kill_container(f"exec exceeded {timeout_s:g} s")
                    else:
                        break  # the engine does not end the stream even with the container dead
                if not self.disk_quota and now >= next_disk_poll and stage < 2:
                    size = self._layer_size()
                    # The engine walks the layer to size it: back off when that gets slow.
                    took = time.monotonic() - now
                    next_disk_poll = now + max(self.limits.disk_poll_s, 20 * took)
                    if size is not None and size > self.limits.disk_bytes:
                        killed_by = "disk"
                        stage = 2
                        deadline = now + 5
                        self._kill_container(
                            f"writable layer grew to {size} bytes (limit {self.limits.disk_bytes})")
                wait = min(0.5, deadline - now)
                if not self.disk_quota and stage < 2:
                    wait = min(wait, next_disk_poll - now)  # a silent writer is polled too
                if not _wait_readable(raw, max(wait, 0.01)):
                    continue
                chunk = raw.recv(256 * KiB) if hasattr(raw, "recv") else raw.read(256 * KiB)
                if not chunk:
                    break
                # Frames are an 8-byte header (stream, size) and a payload; payloads are fed as
                # they arrive so one huge frame never sits in memory whole.
                data = header + chunk if header else chunk
                header = b""
                offset = 0
                while offset < len(data):
                    if frame_left:
                        take = min(frame_left, len(data) - offset)
                        capture.feed(data[offset:offset + take])
                        offset += take
                        frame_left -= take
                    elif len(data) - offset >= 8:
                        frame_left = struct.unpack(">BxxxL", data[offset:offset + 8])[1]
                        offset += 8
                    else:
                        header = data[offset:]
                        break
        except (OSError, ValueError) as exc:
            if not killed_by:
                raise TransientEngineError(f"exec stream broke: {exc}") from exc
        finally:
            with contextlib.suppress(Exception):
                raw.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(Exception):
                sock.close()
        return killed_by

    def _new_oom_kill(self) -> bool:
        # cgroup v1 counts OOM kills in memory.oom_control, v2 in memory.events; both only for
        # this container's cgroup, so a rising count means our command was the victim.
        code, out = self._simple_exec(
            ["cat", "/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"])
        m = re.search(rb"^oom_kill (\d+)", out, re.M)
        if not m:
            return False
        count = int(m.group(1))
        new = count > self._oom_kills_seen
        self._oom_kills_seen = count
        return new

    def peak_memory_bytes(self) -> int | None:
        """The container's peak memory use since it started (cgroup max_usage/memory.peak)."""
        cid = self._require_alive()
        # With a local engine the host's cgroup files answer in microseconds and can't be faked
        # from inside the container; the stats API waits for the engine's ~1 s collection cycle.
        if str(getattr(self.client.api, "base_url", "")) in ("http+docker://localhost", "http+docker://localunixsocket"):
            for path in (f"/sys/fs/cgroup/memory/docker/{cid}/memory.max_usage_in_bytes",
                         f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.peak"):
                try:
                    return int(Path(path).read_text().strip())
                except (OSError, ValueError):
                    continue
        with self._call("sandbox stats"):
            try:
                stats = self.client.api.stats(cid, stream=False, one_shot=True)
            except docker.errors.InvalidVersion:  # API < 1.41 samples twice, ~1 s slower
                stats = self.client.api.stats(cid, stream=False)
        peak = (stats.get("memory_stats") or {}).get("max_usage")
        if peak:
            return int(peak)
        code, out = self._simple_exec(["cat", "/sys/fs/cgroup/memory.peak"])
        return int(out.strip()) if code == 0 and out.strip().isdigit() else None

    # -- files

    def put_files(self, mapping: Mapping[str, bytes | str | Path], mode: int | None = None) -> None:
        """Write files into the sandbox, owned by root. Values: bytes, text, or a host Path
        (a directory is copied recursively). `mode` applies to every file; by default bytes and
        text get 0644 and host files keep their permission bits."""
        cid = self._require_alive()
        buffer = io.BytesIO()
        now = time.time()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for target, value in mapping.items():
                dest = posixpath.normpath(target)
                if not dest.startswith("/") or dest == "/":
                    raise ValueError(f"put_files needs absolute file paths, got {target!r}")
                if dest == "/tmp" or dest.startswith("/tmp/"):
                    raise ValueError(f"{target}: /tmp is a tmpfs, which the engine's archive "
                                     "upload does not reach; use another directory")
                if isinstance(value, Path):
                    self._add_host_path(tar, dest, value, mode)
                    continue
                data = value.encode() if isinstance(value, str) else bytes(value)
                info = tarfile.TarInfo(dest.lstrip("/"))
                info.size, info.mode, info.mtime = len(data), 0o644 if mode is None else mode, now
                tar.addfile(info, io.BytesIO(data))
        with self._call("upload files to sandbox"):
            if not self.client.api.put_archive(cid, "/", buffer.getvalue()):
                raise PermanentEngineError("the engine refused the upload")

    @staticmethod
    def _add_host_path(tar: tarfile.TarFile, dest: str, source: Path, mode: int | None) -> None:
        if source.is_dir():
            for root, dirnames, filenames in os.walk(source):
                dirnames.sort()
                rel_root = Path(root).relative_to(source).as_posix()
                base = dest if rel_root == "." else f"{dest}/{rel_root}"
                info = tarfile.TarInfo(base.lstrip("/"))
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                info.mtime = int(Path(root).stat().st_mtime)
                tar.addfile(info)
                for name in sorted(filenames):
                    Sandbox._add_host_path(tar, f"{base}/{name}", Path(root) / name, mode)
            return
        info = tar.gettarinfo(str(source), arcname=dest.lstrip("/"))
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        if mode is not None and info.isfile():
            info.mode = mode
        if info.isfile():
            with open(source, "rb") as fh:
                tar.addfile(info, fh)
        else:
            tar.addfile(info)

    def get_file(self, path: str, *, max_bytes: int = 64 * MiB) -> bytes | None:
        """The content of a regular file in the sandbox, or None if it does not exist.
        Symlinks are followed (a few hops); a directory raises IsADirectoryError."""
        cid = self._require_alive()
        for _ in range(8):
            try:
                with _engine_call("download a file from the sandbox"):
                    chunks, st = self.client.api.get_archive(cid, path)
            except PermanentEngineError as exc:
                if isinstance(exc.__cause__, NotFound):
                    return None
                raise
            if st.get("mode", 0) & (1 << 31):  # Go's os.ModeDir
                raise IsADirectoryError(path)
            if st.get("linkTarget") and (st.get("mode", 0) & (1 << 27)):  # os.ModeSymlink
                target = st["linkTarget"]
                path = target if target.startswith("/") else posixpath.join(
                    posixpath.dirname(path), target)
                with contextlib.suppress(Exception):
                    chunks.close()
                continue
            if st.get("size", 0) > max_bytes:
                raise ValueError(f"{path} is {st['size']} bytes, more than max_bytes={max_bytes}")
            with tarfile.open(fileobj=io.BufferedReader(_IterReader(iter(chunks))),
                              mode="r|") as tar:
                for member in tar:
                    if member.isfile():
                        fh = tar.extractfile(member)
                        return fh.read() if fh else b""
                    if member.issym():
                        break
                else:
                    return None
        return None

    # -- realized state

    def snapshot(
        self,
        paths: Sequence[str] = ("/app",),
        *,
        max_text_head: int = 2048,
        max_files: int = 20000,
        max_bytes: int = 512 * MiB,
    ) -> Snapshot:
        """Files under `paths` (size, mode, owner, sha256, heads of text files) and the running
        processes. Read through the engine (archive and top APIs), so nothing that runs in the
        sandbox can lie about it. Paths under /tmp read the image layer, not the tmpfs."""
        cid = self._require_alive()
        snap = Snapshot(roots=list(paths), taken_at=time.time())
        hashed = 0
        for root in paths:
            root = posixpath.normpath(root)
            try:
                with _engine_call("archive sandbox files"):
                    chunks, _ = self.client.api.get_archive(cid, root)
            except PermanentEngineError as exc:
                if isinstance(exc.__cause__, NotFound):
                    snap.missing.append(root)
                    continue
                raise
            parent = posixpath.dirname(root)
            reader = io.BufferedReader(_IterReader(iter(chunks)), buffer_size=1 * MiB)
            with tarfile.open(fileobj=reader, mode="r|") as tar:
                for member in tar:
                    if len(snap.files) >= max_files:
                        snap.truncated = True
                        break
                    path = posixpath.normpath(posixpath.join(parent, member.name))
                    entry = FileEntry(
                        path=path, size=member.size, mode=stat.S_IMODE(member.mode), uid=member.uid,
                        gid=member.gid,
                        kind=("file" if member.isfile() else "dir" if member.isdir()
                              else "symlink" if member.issym() else "other"),
                        link=member.linkname if (member.issym() or member.islnk()) else "",
                    )
                    if member.islnk():
                        entry.kind = "file"
                        target = posixpath.normpath(posixpath.join(parent, member.linkname))
                        if target in snap.files:
                            entry.sha256 = snap.files[target].sha256
                            entry.text_head = snap.files[target].text_head
                        entry.link = ""
                    elif member.isfile():
                        if hashed + member.size > max_bytes:
                            snap.truncated = True
                        else:
                            hashed += member.size
                            fh = tar.extractfile(member)
                            digest = hashlib.sha256()
                            head = b""
                            while fh is not None and (block := fh.read(1 * MiB)):
                                if len(head) < max_text_head:
                                    head += block[: max_text_head - len(head)]
                                digest.update(block)
                            entry.sha256 = digest.hexdigest()
                            entry.text_head = _text_head(head) if max_text_head else None
                    snap.files[path] = entry
            with contextlib.suppress(Exception):
                chunks.close()
        snap.processes = self._processes()
        return snap

    def _processes(self) -> list[ProcessEntry] | None:
        try:
            top = self.client.api.top(self.id, ps_args="-eo pid,ppid,uid,args")
        except (DockerException, requests.exceptions.RequestException, OSError):
            return None
        titles = [t.upper() for t in top.get("Titles") or []]
        if not {"PID", "PPID", "UID"} <= set(titles):
            return None
        rows = [dict(zip(titles, row)) for row in top.get("Processes") or []]
        procs = [ProcessEntry(int(r["PID"]), int(r["PPID"]), int(r["UID"]),
                              r.get("COMMAND") or r.get("ARGS") or r.get("CMD") or "")
                 for r in rows]
        # The init loop and its sleep are ours, not part of the task's state.
        init_pids = {p.pid for p in procs if _SANDBOX_INIT in p.args}
        return [p for p in procs
                if p.pid not in init_pids
                and not (p.ppid in init_pids and p.args.startswith("sleep 2147483647"))]

    diff = staticmethod(diff_snapshots)


def _wait_readable(sock: Any, timeout_s: float) -> bool:
    if hasattr(sock, "pending") and sock.pending():  # TLS may hold decrypted bytes already
        return True
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN | select.POLLPRI | select.POLLHUP)
        return bool(poller.poll(timeout_s * 1000))
    except (AttributeError, OSError, ValueError):
        return True  # not pollable: fall back to a blocking read


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
    with _engine_call("list sandboxes"):
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
            with _engine_call("remove a leftover sandbox"):
                client.api.remove_container(row["Id"], force=True, v=True)
            removed += 1
        except PermanentEngineError as exc:
            if not isinstance(exc.__cause__, NotFound):
                raise
    return removed


# --------------------------------------------------------------------------------------------
# Command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m facet_site.lib.docker_engine",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--docker-host", help="engine URL (default: DOCKER_HOST or local socket)")
    sub = parser.add_subparsers(dest="command", required=True)
    base = sub.add_parser("base-image", help=f"build the base image ({BASE_IMAGE_TAG}) if missing")
    base.add_argument("--tag", default=BASE_IMAGE_TAG)
    base.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    base.add_argument("--rootfs-dir", type=Path, help="work directory for debootstrap")
    clean = sub.add_parser("cleanup", help="remove leftover sandbox containers")
    clean.add_argument("--older-than", type=float, default=0, metavar="SECONDS")
    clean.add_argument("--owner")
    sub.add_parser("info", help="print what the engine supports, as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        client = connect(args.docker_host)
        if args.command == "base-image":
            started = time.monotonic()
            image = ensure_base_image(client, args.tag, rootfs_dir=args.rootfs_dir,
                                      force=args.force)
            print(json.dumps({"tag": args.tag, "id": image.id,
                              "size_bytes": image.attrs.get("Size"),
                              "seconds": round(time.monotonic() - started, 1)}))
        elif args.command == "cleanup":
            print(cleanup_leftovers(client, args.older_than, owner=args.owner))
        elif args.command == "info":
            print(json.dumps(engine_info(client), indent=2))
    except DockerEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 75 if isinstance(exc, TransientEngineError) else 1  # 75: EX_TEMPFAIL
    return 0


if __name__ == "__main__":
    sys.exit(main())
