"""The realized state of a sandbox (files under some roots, running processes), read through the
engine's archive and top APIs, and the difference between two such snapshots."""
from __future__ import annotations

import contextlib
import hashlib
import io
import posixpath
import stat
import tarfile
import time
from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

import docker
import requests
from docker.errors import DockerException, NotFound

from facet_site.lib.docker_engine import previews
from facet_site.lib.docker_engine.capture import IterReader
from facet_site.lib.docker_engine.constants import SANDBOX_INIT, MiB
from facet_site.lib.docker_engine.errors import PermanentEngineError, engine_call


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
    # path -> structure-aware preview (docker_engine.previews), when the snapshot was asked for them
    previews: dict[str, dict] = field(default_factory=dict)

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
            previews=dict(data.get("previews") or {}),
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


def _text_head(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    for cut in range(4):  # the head may end inside a multi-byte character
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def read_files(
    client: docker.DockerClient,
    container_id: str,
    paths: Sequence[str],
    *,
    max_text_head: int,
    max_files: int,
    max_bytes: int,
    max_previews: int = 0,
) -> Snapshot:
    """A snapshot of the files under `paths` (its `processes` left unset), read through the
    engine's archive API; see `Sandbox.snapshot`. With `max_previews`, up to that many regular
    files outside machinery directories (.git, node_modules, ...) also get a structure-aware
    preview (docker_engine.previews), made from the same read."""
    snap = Snapshot(roots=list(paths), taken_at=time.time())
    hashed = 0
    for root in paths:
        root = posixpath.normpath(root)
        try:
            with engine_call("archive sandbox files"):
                chunks, _ = client.api.get_archive(container_id, root)
        except PermanentEngineError as exc:
            if isinstance(exc.__cause__, NotFound):
                snap.missing.append(root)
                continue
            raise
        parent = posixpath.dirname(root)
        reader = io.BufferedReader(IterReader(iter(chunks)), buffer_size=1 * MiB)
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
                        preview = len(snap.previews) < max_previews and not previews.in_machinery(path)
                        keep = min(member.size, previews.PREVIEW_MAX_BYTES) if preview else 0
                        whole = bytearray()
                        while fh is not None and (block := fh.read(1 * MiB)):
                            if len(head) < max_text_head:
                                head += block[: max_text_head - len(head)]
                            if len(whole) < keep:
                                whole += block[: keep - len(whole)]
                            digest.update(block)
                        entry.sha256 = digest.hexdigest()
                        entry.text_head = _text_head(head) if max_text_head else None
                        if preview and member.size:
                            snap.previews[path] = previews.preview_file(path, bytes(whole), member.size)
                snap.files[path] = entry
        with contextlib.suppress(Exception):
            chunks.close()
    return snap


def running_processes(client: docker.DockerClient, container_id: str) -> list[ProcessEntry] | None:
    """The processes in the container but the sandbox's init loop, from the engine's top API;
    None when the engine cannot tell."""
    try:
        top = client.api.top(container_id, ps_args="-eo pid,ppid,uid,args")
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
    init_pids = {p.pid for p in procs if SANDBOX_INIT in p.args}
    return [p for p in procs
            if p.pid not in init_pids
            and not (p.ppid in init_pids and p.args.startswith("sleep 2147483647"))]
