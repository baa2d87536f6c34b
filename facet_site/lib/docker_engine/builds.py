"""Environment image builds: a content-addressed tag per build context, a deadline the engine
honours, and the step containers a cancelled build leaves behind removed."""
from __future__ import annotations

import codecs
import contextlib
import hashlib
import io
import json
import os
import re
import stat
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable, Mapping

import docker
import requests
from docker.errors import APIError, NotFound

from facet_site.lib.docker_engine.capture import HeadTail
from facet_site.lib.docker_engine.client import find_image
from facet_site.lib.docker_engine.constants import (
    BASE_IMAGE_TAG, ENV_IMAGE_REPOSITORY, LABEL_CONTEXT_SHA256, GiB, KiB, MiB,
)
from facet_site.lib.docker_engine.dockerfile_lint import lint_build_context, lint_dockerfile
from facet_site.lib.docker_engine.errors import (
    BaseImageMissing, BuildFailed, BuildTimeout, DockerfileLintError, PermanentEngineError,
    TransientEngineError, engine_call,
)

# The legacy builder prints this for every RUN step; those are the containers a timed-out build
# may leave behind.
_RUNNING_IN = re.compile(r"Running in ([0-9a-f]{12,64})")


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
        self.log = HeadTail(log_limit)
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


def _remove_containers(client: docker.DockerClient, ids: Iterable[str], *, wait_s: float = 20) -> None:
    """Force-remove the build's step containers and wait until they are gone. The engine starts
    removing a cancelled step's container itself: our remove then answers 409 ("removal already in
    progress") at once, and the container lingers as "Removal In Progress" for seconds on a loaded
    machine, so returning then would leave it behind for the caller to see."""
    ids = list(ids)
    for cid in ids:
        with contextlib.suppress(NotFound, APIError, requests.exceptions.RequestException):
            client.api.remove_container(cid, force=True, v=True)
    deadline = time.monotonic() + wait_s
    for cid in ids:
        while time.monotonic() < deadline:
            try:
                client.api.inspect_container(cid)
            except NotFound:
                break
            except (APIError, requests.exceptions.RequestException):
                break  # the engine cannot tell; the leftover sweep (docker_engine.leftovers) has the last word
            time.sleep(0.2)


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
    problems += lint_build_context(rel for rel, _, _ in _context_entries(context_dir))
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
        with engine_call("start the build"):
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
        with engine_call("inspect the built image"):
            image = client.images.get(tag)
    except PermanentEngineError as exc:
        raise TransientEngineError(f"build ended without an image: {exc}") from exc
    return BuildResult(tag, image.id, stream.log.text(), seconds, cached=False)


# --------------------------------------------------------------------------------------------
