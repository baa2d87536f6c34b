"""The base image every environment starts FROM: debootstrapped here (no registry is reachable)
and `docker import`ed, built once per engine."""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO, Any, Sequence

import docker

from facet_site.lib.docker_engine.client import find_image
from facet_site.lib.docker_engine.constants import BASE_IMAGE_TAG, LABEL_BASE, LABEL_BASE_PACKAGES
from facet_site.lib.docker_engine.errors import BaseImageBuildFailed, engine_call

log = logging.getLogger(__name__)

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"

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
        # debootstrap's own environment (so apt never prompts), not a facet setting.
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
        with engine_call("docker import of the base image"):
            client.api.import_image(src=tar_proc.stdout, repository=repository, tag=image_tag,
                                    changes=changes, stream_src=True)
    finally:
        assert tar_proc.stdout is not None
        tar_proc.stdout.close()
        tar_err = tar_proc.stderr.read().decode(errors="replace") if tar_proc.stderr else ""
        tar_rc = tar_proc.wait()
    if tar_rc != 0:
        raise BaseImageBuildFailed(f"tar of the root filesystem failed: {tar_err[-2000:]}")
    with engine_call("inspect the imported base image"):
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
    data_dir: Path,
    rootfs_dir: Path | None = None,
    force: bool = False,
    **build_kwargs: Any,
) -> docker.models.images.Image:
    """The base image, built first if the engine lacks it. Cheap when it exists.

    A lock file under `data_dir` (settings.DATA_DIR) keeps two workers on one machine from
    building it at once; the debootstrap work directory and its log go there too.
    """
    if not force and (image := find_image(client, tag)) is not None:
        return image
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "base-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (image := find_image(client, tag)) is not None:
            return image
        return build_base_image(
            client, tag, rootfs_dir=Path(rootfs_dir or data_dir / "base-rootfs"),
            log_file=build_kwargs.pop("log_file", data_dir / "base-image.log"), **build_kwargs)
