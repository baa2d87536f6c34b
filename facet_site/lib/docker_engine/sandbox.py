"""Sandboxes: containers for untrusted code with limits by default (no network, bounded CPU,
memory, pids, disk and time), the commands run in them and files in and out. Removing the
sandboxes a dead worker left behind is leftovers.py's."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import posixpath
import re
import select
import socket
import struct
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import docker
import requests
from docker.errors import APIError, DockerException, NotFound
from docker.types import LogConfig, Ulimit

from facet_site.lib.docker_engine.capture import FileSink, HeadTail, IterReader, Tee
from facet_site.lib.docker_engine.client import DISK_QUOTA
from facet_site.lib.docker_engine.constants import (
    LABEL_CREATED, LABEL_OWNER, LABEL_SANDBOX, SANDBOX_INIT, GiB, KiB, MiB,
)
from facet_site.lib.docker_engine.errors import (
    DockerEngineError, PermanentEngineError, SandboxGone, TransientEngineError, engine_call,
    classify_error,
)
from facet_site.lib.docker_engine.snapshots import (
    ProcessEntry, Snapshot, diff_snapshots, read_files, running_processes,
)

log = logging.getLogger(__name__)

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
            entrypoint=["/bin/sh", "-c", SANDBOX_INIT],
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
        if DISK_QUOTA.get(key, True):
            try:
                with engine_call("create sandbox"):
                    try:
                        container = self.client.containers.create(
                            storage_opt={"size": str(self.limits.disk_bytes)}, **kwargs)
                    except APIError as exc:
                        if not _QUOTA_UNSUPPORTED.search(str(exc.explanation or exc)):
                            raise
                        raise _NoDiskQuota(str(exc.explanation or exc)) from exc
                DISK_QUOTA[key] = True
                self.disk_quota = True
            except _NoDiskQuota as exc:
                log.info("engine %s cannot limit a container's disk (%s); using RLIMIT_FSIZE "
                         "and a size watchdog", key, exc)
                DISK_QUOTA[key] = False
        if container is None:
            kwargs["ulimits"] = kwargs["ulimits"] + [
                Ulimit(name="fsize", soft=self.limits.disk_bytes, hard=self.limits.disk_bytes)]
            with engine_call("create sandbox"):
                container = self.client.containers.create(**kwargs)
        self.container_id = container.id
        try:
            with engine_call("start sandbox"):
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
            with engine_call(what):
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
        capture = HeadTail(self.limits.output_bytes)
        started = time.monotonic()
        with self._call("exec in sandbox"):
            exec_id = self.client.api.exec_create(
                cid, wrapped, stdout=True, stderr=True, stdin=False, tty=False,
                environment=dict(env) if env else None, workdir=workdir, user=user or "",
            )["Id"]
            sock = self.client.api.exec_start(exec_id, socket=True)
        file_sink = FileSink(output_path, output_path_max_bytes) if output_path is not None else None
        try:
            killed_by = self._pump(sock, Tee(capture, file_sink) if file_sink else capture,
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

    def _pump(self, sock: Any, capture: HeadTail, started: float, timeout_s: float) -> str:
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
                with engine_call("download a file from the sandbox"):
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
            with tarfile.open(fileobj=io.BufferedReader(IterReader(iter(chunks))),
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
        max_previews: int = 0,
        with_processes: bool = True,
    ) -> Snapshot:
        """Files under `paths` (size, mode, owner, sha256, heads of text files) and the running
        processes. Read through the engine (archive and top APIs), so nothing that runs in the
        sandbox can lie about it. Paths under /tmp read the image layer, not the tmpfs.

        with_processes=False leaves `processes` None, for a caller that listed them itself
        before running anything of its own in the sandbox (processes())."""
        snap = read_files(self.client, self._require_alive(), paths, max_text_head=max_text_head,
                          max_files=max_files, max_bytes=max_bytes, max_previews=max_previews)
        if with_processes:
            snap.processes = self.processes()
        return snap

    def processes(self) -> list[ProcessEntry] | None:
        """The processes running now, the sandbox's init loop left out; None when the engine
        cannot tell."""
        return running_processes(self.client, self.id)

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
