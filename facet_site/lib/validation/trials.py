"""Running validation's trials (nop, oracle, partial) in fresh sandboxes, the way Harbor runs a
trial (harbor-format.md §3), reading what the verifier left in /logs/verifier, and judging each
trial; plus the environment's initial state e0. Django-free.

The trials of one validation may run in threads at once (TrialRunner.run is thread-safe): e0 is
captured once, under a lock, by whichever trial starts first, before anything runs in it.

What a trial record keeps of what task code can inflate is in trial_bounds.py. The rest stays in
one file: one trial's sandbox, its log capture, its verifier reading and the image scan that runs
beside the first trial share the TrialRunner's lock and state.
"""
from __future__ import annotations

import json
import posixpath
import re
import shlex
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import docker
import requests

from facet_site.lib import docker_engine as de
from facet_site.lib import task_defects, verifier_output
from facet_site.lib.validation.report import (INFRA_ERROR, NOP_UNEXPECTED_PASS, ORACLE_FAILED,
                                              PARTIAL_UNEXPECTED_PASS, SOLUTION_FAILED, SOLUTION_TIMEOUT,
                                              VERIFIER_NO_REWARD, VERIFIER_TIMEOUT, TrialOutcome, cap_text)
from facet_site.lib.validation.trial_bounds import MAX_COMMAND_CHARS, MAX_PROCESSES, bound_outcome, count_commands
from facet_site.lib.validation.task_checks import (DEFAULT_LIMITS, DEFAULT_WORKDIR, LOG_DIRS, VERIFIER_LOGS,
                                                   TaskFiles, finding)

# Small reports come inline with the directory listing; bigger ones are downloaded one by one.
_INLINE_RESULT_BYTES = 256 * 1024
# Text files up to this size are read whole from e0 and from the oracle's outputs, for the
# leaked-answer check (task_defects.find_leaked_answers); what is stored keeps only a head.
LEAK_TEXT_BYTES = 1 * de.MiB
_STORED_HEAD = 2048

# The rest of the image, for the leaked-answer check: one exec in the first trial, before any
# solution, hashes every regular file that the task's own build steps wrote (newer than the base
# image; a RUN step that hides an answer anywhere) and that could hold an answer (more than 23
# bytes, the least a non-trivial output has, and at most LEAK_TEXT_BYTES), outside the snapshot
# roots read whole already, the pseudo filesystems, the sandbox's own mounts and /tmp's tmpfs
# (-xdev). Compiled bytecode is never an answer. Bounded in files and time; it runs while the
# e0 snapshot's archive reads are in flight, so it adds little to the first trial
# (docs/tasks.md gives the measured cost).
IMAGE_SCAN_MAX_FILES = 5000
IMAGE_SCAN_TIMEOUT_S = 20.0
_IMAGE_SCAN_OUTPUT_BYTES = 4 * de.MiB
_IMAGE_SCAN_SKIP = ("/proc", "/sys", "/dev", "/tmp", "/logs", "/tests", "/solution",
                    "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/.dockerenv")
_SHA256_LINE = re.compile(r"^(\\?)([0-9a-f]{64}) [ *](.*)$")


def _texts(snap: de.Snapshot, paths=None) -> dict[str, str]:
    """path -> whole text of the snapshot's text files read in full (size ≤ LEAK_TEXT_BYTES)."""
    out = {}
    for path in (snap.files if paths is None else paths):
        entry = snap.files.get(path)
        if (entry is not None and entry.kind == "file" and entry.text_head is not None
                and entry.size <= LEAK_TEXT_BYTES
                and len(entry.text_head.encode("utf-8", "surrogatepass")) == entry.size):
            out[path] = entry.text_head
    return out


def _trim_heads(snap: de.Snapshot) -> None:
    for entry in snap.files.values():
        if entry.text_head is not None and len(entry.text_head) > _STORED_HEAD:
            entry.text_head = entry.text_head[:_STORED_HEAD]


def _find_path_pattern(path: str) -> str:
    return re.sub(r"([\\*?\[])", r"\\\1", posixpath.normpath(path))


def image_scan_command(newer_than: float, skip: Sequence[str] = (), *,
                       max_files: int = IMAGE_SCAN_MAX_FILES, skip_old_dirs: bool = False) -> str:
    """The shell command of the image scan: `sha256sum` lines for the regular files of the root
    filesystem modified after `newer_than` (epoch seconds: the base image's creation), sized
    24 bytes to LEAK_TEXT_BYTES, outside `skip` and _IMAGE_SCAN_SKIP, at most `max_files`.

    skip_old_dirs (overlayfs storage only, see acceptance.LAYERED_DRIVERS): directories whose
    ctime is older than `newer_than` are not entered, and files count by ctime. On overlayfs
    every directory on the path to a file the task's layers add or change exists in those
    layers with their ctime, so this skips only the base image's own trees, and the walk drops
    from the whole base (~16,000 entries, ~0.1 s) to the few directories the task touched."""
    at = f"@{newer_than:.6f}"
    pruned = " -o ".join(f"-path {shlex.quote(_find_path_pattern(p))}"
                         for p in dict.fromkeys([*_IMAGE_SCAN_SKIP, *skip]) if p.startswith("/"))
    newer = "-newermt"  # modified after the base: what a build step writes
    if skip_old_dirs:
        pruned += f" -o -type d ! -newerct {at}"
        # and there, a file's ctime: also files a layer brought with old times (ADD of an archive)
        newer = "-newerct"
    return (f"find / -xdev \\( {pruned} \\) -prune -o -type f {newer} {at} "
            f"-size +23c -size -{LEAK_TEXT_BYTES + 1}c ! -name '*.pyc' -print0 2>/dev/null"
            f" | head -z -n {int(max_files)} | xargs -0 -r sha256sum -- 2>/dev/null")


def parse_sha256sum(text: str) -> dict[str, list[str]]:
    """digest -> paths from `sha256sum` output (a name with a newline or backslash comes escaped,
    its line starting with a backslash). Lines that do not parse (a cut-off last line) are
    skipped."""
    found: dict[str, list[str]] = {}
    for line in text.split("\n"):
        m = _SHA256_LINE.match(line)
        if not m:
            continue
        path = m.group(3)
        if m.group(1):
            path = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else
                          "\r" if e.group(1) == "r" else e.group(1), path)
        found.setdefault(m.group(2), []).append(path)
    return found


def image_workdir_of(client: docker.DockerClient, image_tag: str) -> str:
    image = de.find_image(client, image_tag)
    workdir = ((image.attrs.get("Config") or {}).get("WorkingDir") if image else "") or ""
    return workdir


def snapshot_roots(workdir: str | None, extra: Sequence[str] = ()) -> list[str]:
    root = workdir if workdir and workdir != "/" else DEFAULT_WORKDIR
    return list(dict.fromkeys([posixpath.normpath(root), *extra]))


def _only_under(snap: de.Snapshot, roots: Sequence[str]) -> de.Snapshot:
    keep = [posixpath.normpath(r) for r in roots]
    files = {p: e for p, e in snap.files.items()
             if any(p == r or p.startswith(r.rstrip("/") + "/") for r in keep)}
    return de.Snapshot(roots=list(keep), files=files,
                       missing=[m for m in snap.missing if m in keep],
                       processes=snap.processes, truncated=snap.truncated,
                       taken_at=snap.taken_at)


def _summarize_diff(before: de.Snapshot, after: de.Snapshot, max_files: int = 200) -> dict:
    diff = de.diff_snapshots(before, after).to_dict()
    files = {}
    for path in [*diff["added"], *diff["modified"]][:max_files]:
        entry = after.files.get(path)
        if entry is not None:
            files[path] = {"kind": entry.kind, "size": entry.size, "mode": entry.mode,
                           "sha256": entry.sha256,
                           "text_head": (entry.text_head or "")[:512] or None}
    diff["files"] = files
    diff["truncated"] = before.truncated or after.truncated
    return diff


# --------------------------------------------------------------------------------------------
# Initial state e0


def _initial_state_from(image_tag: str, roots: Sequence[str], workdir: str | None,
                        snapshot: de.Snapshot) -> dict:
    return {
        "image_tag": image_tag,
        "workdir": workdir,
        "roots": list(roots),
        "snapshot": {**snapshot.to_dict(), "processes": None if snapshot.processes is None else [
            {"pid": p.pid, "ppid": p.ppid, "uid": p.uid, "args": p.args[:MAX_COMMAND_CHARS]}
            for p in snapshot.processes[:MAX_PROCESSES]]},
        # the environment's own processes; a start command that forks many copies counts them
        "services": [p["args"] if p["count"] == 1 else f"{p['args']} (×{p['count']})"
                     for p in count_commands([p.args for p in snapshot.processes or []])[0]],
    }


def capture_initial_state(client: docker.DockerClient, image_tag: str, *,
                          paths: Sequence[str] = (DEFAULT_WORKDIR,),
                          limits: de.SandboxLimits = DEFAULT_LIMITS,
                          owner: str | None = None, max_previews: int = 0,
                          tool_versions: bool = False) -> dict:
    """e0, the realized initial state of an environment image: every file under `paths`
    (size, mode, owner, sha256, head of text files) and the processes running in a fresh
    sandbox. validate_task captures it in its nop sandbox instead, to save a container.

    For the construction prompts (the build step): `max_previews` files get a structure-aware
    preview from the same archive read, and `tool_versions` adds, from one exec in the same
    sandbox, the OS, the tools found and the Python packages (docker_engine.previews)."""
    with de.Sandbox(client, image_tag, owner=owner, limits=limits) as sb:
        snap = sb.snapshot(list(paths), max_previews=max_previews)
        state = _initial_state_from(image_tag, paths, None, snap)
        if tool_versions:
            result = sb.exec(de.TOOL_VERSIONS_COMMAND, timeout_s=60)
            state["tools"] = de.parse_tool_versions(result.output)
        return state


# --------------------------------------------------------------------------------------------
# Trials


@dataclass
class TrialPlan:
    kind: str
    index: int = 0
    solve_sh: bytes | None = None  # replaces solution/solve.sh (partial trials)
    repeat: int = 0  # which run of a repeated nop or oracle trial


class TrialRunner:
    """One validate_task call: the settings every trial shares."""

    def __init__(self, client: docker.DockerClient, task: TaskFiles, image_tag: str, *,
                 owner: str, limits: de.SandboxLimits, workdir: str | None,
                 snapshot_roots: Sequence[str], solution_timeout_s: float,
                 verifier_timeout_s: float, report_output_bytes: int,
                 keep_logs_dir: Path | None, measure_memory: bool,
                 trial_log_max_bytes: int = 64 * de.MiB, leak_roots: Sequence[str] = (),
                 image_newer_than: float | None = None, image_scan_skips_old_dirs: bool = False):
        self.client = client
        self.task = task
        self.image_tag = image_tag
        self.owner = owner
        self.limits = limits
        self.workdir = workdir
        self.roots = list(snapshot_roots)
        # read (not stored) for the leaked-answer check: where else the image keeps task files
        self.leak_roots = [r for r in leak_roots
                           if not any(r == k or r.startswith(k.rstrip("/") + "/") for k in self.roots)]
        # and the rest of the image by digest: files newer than this (the base image's creation)
        self.image_newer_than = image_newer_than
        self.image_scan_skips_old_dirs = image_scan_skips_old_dirs
        self.image_digests: dict[str, list[str]] = {}  # sha256 -> paths (image_scan_command)
        self.image_scan: dict[str, Any] | None = None  # what the scan covered, stored with e0
        self.solution_timeout_s = solution_timeout_s
        self.verifier_timeout_s = verifier_timeout_s
        self.report_output_bytes = report_output_bytes
        self.keep_logs_dir = keep_logs_dir
        self.measure_memory = measure_memory
        self.trial_log_max_bytes = trial_log_max_bytes
        self.container_env = task.env("environment")
        self.findings: list[dict] = []
        self.e0: de.Snapshot | None = None
        self.e0_texts: dict[str, str] = {}  # e0's text files, whole (the leaked-answer check)
        self.oracle_outputs: dict[str, dict[str, str]] = {}  # trial name -> files it wrote, whole
        self.initial_state: dict | None = None
        self._e0_lock = threading.Lock()
        self._findings_lock = threading.Lock()
        self._local = threading.local()  # per trial thread: phase
        self._log_dirs_tmp = tempfile.TemporaryDirectory(prefix="facet-logs-")
        self.log_dirs = Path(self._log_dirs_tmp.name)
        for d in LOG_DIRS:
            (self.log_dirs / posixpath.basename(d)).mkdir()

    def close(self) -> None:
        self._log_dirs_tmp.cleanup()

    @property
    def phase(self) -> str:
        """Whose code the calling thread's trial runs: "setup", "solution" or "verifier"."""
        return getattr(self._local, "phase", "setup")

    @phase.setter
    def phase(self, value: str) -> None:
        self._local.phase = value

    def add_finding(self, new: dict) -> None:
        # One finding per check and message: repeated trials see the same trouble again.
        with self._findings_lock:
            if not any(f["check"] == new["check"] and f["message"] == new["message"]
                       for f in self.findings):
                self.findings.append(new)

    def run(self, plan: TrialPlan) -> TrialOutcome:
        started = time.monotonic()
        result = TrialOutcome(kind=plan.kind, reward=None, passed=False, index=plan.index,
                              repeat=plan.repeat)
        logs = self._logs_dir(result)
        self.phase = "setup"
        sb: de.Sandbox | None = None
        try:
            sb = de.Sandbox(self.client, self.image_tag, owner=self.owner, limits=self.limits,
                            environment=self.container_env,
                            labels={"facet.validation.trial": result.name})
            with sb:
                self._trial(sb, plan, result, logs)
        except de.TransientEngineError:
            raise
        except de.SandboxGone as exc:
            # A watchdog killed the container (time or disk limit): the task's doing. The
            # exec returned first, so the phase says whose code it was.
            gone = (sb.gone_reason if sb is not None else "") or str(exc)
            if self.phase == "solution":
                result.failure = SOLUTION_TIMEOUT if "exceeded" in gone else SOLUTION_FAILED
                result.reason = f"solve.sh: the sandbox was killed ({gone})"
            else:
                result.failure = VERIFIER_TIMEOUT if "exceeded" in gone else VERIFIER_NO_REWARD
                result.reason = f"test.sh: the sandbox was killed ({gone})"
            result.passed = False
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            # Not wrapped by docker_engine (should not happen): classify it the same way.
            raise de.classify_error(exc, f"trial {result.name}") from exc
        except de.PermanentEngineError as exc:
            # The engine refused something we asked for: not the task's fault.
            result.failure, result.reason = INFRA_ERROR, f"{type(exc).__name__}: {exc}"
            result.passed = False
        result.total_seconds = time.monotonic() - started
        bound_outcome(result)
        if logs is not None:
            (logs / "result.json").write_text(json.dumps(result.to_dict(), indent=2))
        return result

    def _logs_dir(self, result: TrialOutcome) -> Path | None:
        if self.keep_logs_dir is None:
            return None
        path = Path(self.keep_logs_dir) / f"trial_{result.name}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _trial(self, sb: de.Sandbox, plan: TrialPlan, result: TrialOutcome,
               logs: Path | None) -> None:
        scan: Future | None = None
        with self._e0_lock:
            if self.e0 is None:
                scan = self._capture_e0(sb)
        try:
            self._phases(sb, plan, result, logs, scan)
        finally:
            if scan is not None:
                futures_wait([scan])  # never outlives the sandbox, whatever went wrong
                if self.initial_state is not None and self.image_scan is not None:
                    self.initial_state["image_scan"] = self.image_scan

    @staticmethod
    def _scan_done(scan: Future | None) -> None:
        # The image scan, started with e0, ends before the first command of the task's own runs
        # (uploads to /logs, /solution and /tests, which it skips, may overlap it).
        if scan is not None:
            scan.result()

    def _phases(self, sb: de.Sandbox, plan: TrialPlan, result: TrialOutcome,
                logs: Path | None, scan: Future | None) -> None:
        # /logs/{verifier,agent,artifacts} travel in the first upload (an exec costs as much
        # as an upload); they must be writable by everyone when a phase runs as another user.
        files: dict[str, Any] = {"/logs": self.log_dirs}
        solution = None
        if plan.kind != "nop":
            files["/solution"] = self.task.dir / "solution"
            if plan.solve_sh is not None:
                files["/solution/solve.sh"] = plan.solve_sh
            sb.put_files(files)
            self._open_log_dirs(sb)
            if logs is not None and plan.solve_sh is not None:
                (logs / "solve.sh").write_bytes(plan.solve_sh)
            env = {"DEBIAN_FRONTEND": "noninteractive", **self.task.env("solution")}
            self._scan_done(scan)
            self.phase = "solution"
            solution = sb.exec(["bash", "/solution/solve.sh"],
                               timeout_s=self.solution_timeout_s, workdir=self.workdir,
                               env=env, user=self.task.user("agent"),
                               **self._full_log(logs, "solution.log"))
            result.solution_exit_code = solution.exit_code
            result.solution_seconds = solution.seconds
            result.solution_output = cap_text(solution.output, self.report_output_bytes)
            reads_whole = plan.kind == "oracle"
            after = sb.snapshot(self.roots + [VERIFIER_LOGS],
                                **({"max_text_head": LEAK_TEXT_BYTES} if reads_whole else {}))
            assert self.e0 is not None
            result.fs_diff = _summarize_diff(self.e0, _only_under(after, self.roots))
            if reads_whole:
                changed = [*result.fs_diff["added"], *result.fs_diff["modified"]]
                self.oracle_outputs[result.name] = _texts(after, changed)
            left = sorted(p for p in after.files if p.startswith(VERIFIER_LOGS + "/"))
            if left:
                self._clear_verifier_logs(sb, plan, left)
            files = {}

        self.phase = "verifier"
        files["/tests"] = self.task.dir / "tests"
        sb.put_files(files)
        if plan.kind == "nop":
            self._open_log_dirs(sb)
        self._scan_done(scan)
        verifier = sb.exec(["bash", "/tests/test.sh"], timeout_s=self.verifier_timeout_s,
                           workdir=self.workdir, env=self.task.env("verifier") or None,
                           user=self.task.user("verifier"), **self._full_log(logs, "verifier.log"))
        result.verifier_exit_code = verifier.exit_code
        result.verifier_seconds = verifier.seconds
        result.verifier_output = cap_text(verifier.output, self.report_output_bytes)
        if network := task_defects.verifier_network_finding(verifier.output, result.kind):
            self.add_finding(network)
        self._read_verifier_logs(sb, result, logs)
        if self.measure_memory:
            result.peak_memory_bytes = sb.peak_memory_bytes()
        self._judge(result, solution=solution, verifier=verifier)

    def _capture_e0(self, sb: de.Sandbox) -> Future | None:
        # The first trial's untouched sandbox is e0: no extra container for it. Text files are
        # read whole here (one archive read) for the leaked-answer check; e0 as stored keeps
        # heads only. The image scan (an exec) starts first and runs meanwhile; the trial waits
        # for it before running anything of the task's (_scan_done). The processes are listed
        # before the scan starts: e0's services are the environment's, never the scan's own
        # find | sha256sum (which a listing taken during the archive read would catch).
        e0_processes = sb.processes()
        scan = None
        if self.image_newer_than is not None:
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="facet-image-scan")
            scan = pool.submit(self._scan_image, sb)
            pool.shutdown(wait=False)  # the thread ends with the scan
        try:
            probe = sb.snapshot(self.roots + ["/tests", "/solution"], max_text_head=LEAK_TEXT_BYTES,
                                with_processes=False)
            probe.processes = e0_processes
            e0 = _only_under(probe, self.roots)
            self.e0_texts = _texts(e0)
            if self.leak_roots:
                # Bounded: a big tree outside the workspace (a toolchain in /opt) is read only so far.
                extra = sb.snapshot(self.leak_roots, max_text_head=LEAK_TEXT_BYTES, max_files=5000,
                                    max_bytes=64 * de.MiB, with_processes=False)
                self.e0_texts.update(_texts(extra))
        except BaseException:
            if scan is not None:
                futures_wait([scan])
            raise
        _trim_heads(e0)
        self.initial_state = _initial_state_from(self.image_tag, self.roots, self.workdir, e0)
        self.e0 = e0
        for leaked in ("/tests", "/solution"):
            if leaked not in probe.missing:
                self.add_finding(finding(
                    "answers_in_image", "error",
                    f"the image already contains {leaked}; it must be uploaded only at "
                    "trial time", file=leaked))
        return scan

    def _scan_image(self, sb: de.Sandbox) -> None:
        """sha256 of the files the task's build steps wrote outside the roots read whole, into
        image_digests (the leaked-answer check matches oracle outputs against them)."""
        assert self.image_newer_than is not None
        command = image_scan_command(self.image_newer_than, [*self.roots, *self.leak_roots],
                                     skip_old_dirs=self.image_scan_skips_old_dirs)
        with tempfile.TemporaryDirectory(prefix="facet-image-scan-") as tmp:
            out = Path(tmp) / "sha256sum.txt"
            try:
                run = sb.exec(command, timeout_s=IMAGE_SCAN_TIMEOUT_S, workdir="/", user="0",
                              output_path=out, output_path_max_bytes=_IMAGE_SCAN_OUTPUT_BYTES)
            except de.SandboxGone:
                raise
            except de.PermanentEngineError as exc:  # the trial goes on; the scan saw nothing
                self.image_scan = {"files": 0, "complete": False, "error": str(exc)[:500]}
                return
            text = out.read_text(errors="replace") if out.exists() else ""
        self.image_digests = parse_sha256sum(text)
        files = sum(len(paths) for paths in self.image_digests.values())
        self.image_scan = {
            "newer_than": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.image_newer_than)),
            "files": files, "seconds": round(run.seconds, 3),
            "skips_old_dirs": self.image_scan_skips_old_dirs,
            # the file cap reached, the time or output cap hit, or the tools missing in the image
            "complete": files < IMAGE_SCAN_MAX_FILES and not run.timed_out and not run.killed_by
                        and run.exit_code == 0 and not run.output_path_truncated}

    def _full_log(self, logs: Path | None, name: str) -> dict:
        # The whole output streams to the trial's log file as it comes (the exec keeps only a
        # 1 MiB head and tail in memory), so the downloadable log is complete up to the cap.
        if logs is None:
            return {}
        return {"output_path": logs / name, "output_path_max_bytes": self.trial_log_max_bytes}

    def _open_log_dirs(self, sb: de.Sandbox) -> None:
        if self.task.user("agent") is None and self.task.user("verifier") is None:
            return  # root writes anywhere: skip the exec
        dirs = " ".join(LOG_DIRS)
        prep = sb.exec(f"chmod 777 {dirs}", timeout_s=30, user="0")
        if not prep.ok:
            raise de.PermanentEngineError(f"could not open up /logs: {prep.output[-500:]}")

    def _clear_verifier_logs(self, sb: de.Sandbox, plan: TrialPlan, left: list[str]) -> None:
        # Whatever the solution left in /logs/verifier would be read as the verifier's verdict
        # ("agents writing the reward file themselves"): note it and start the verifier clean.
        sb.exec(f"find {VERIFIER_LOGS} -mindepth 1 -delete; chmod 777 {VERIFIER_LOGS}",
                timeout_s=30, user="0")
        if plan.kind == "oracle":
            self.add_finding(finding(
                "solution_writes_reward", "error",
                f"solve.sh left files in {VERIFIER_LOGS} ({', '.join(left[:5])}); only the "
                "verifier may write there"))

    def _read_verifier_logs(self, sb: de.Sandbox, result: TrialOutcome,
                            logs: Path | None) -> None:
        contents = read_verifier_logs(sb)
        if logs is not None:
            for name, data in contents.items():
                if "/" not in name and name not in ("solution.log", "verifier.log", "result.json"):
                    (logs / name).write_bytes(data)
        out = verifier_output.read_verifier_output(contents)
        result.reward, result.rewards = out.reward, out.rewards
        if out.problem:
            result.reason = out.problem
        if out.txt_disagrees is not None:
            self.add_finding(finding(
                "reward_files_disagree", "warning",
                f"reward.txt says {out.txt_disagrees} and reward.json says {out.rewards['reward']}; "
                "Harbor versions differ in which one they read"))
        for exc in out.report_errors:
            self.add_finding(finding("results_unreadable", "warning",
                                         f"{VERIFIER_LOGS}/{exc.file}: {exc.message}"))
        if out.tests_source is not None:
            result.test_results, result.test_results_source = out.test_dicts, out.tests_source

    def _judge(self, result: TrialOutcome, *, solution: de.ExecResult | None = None,
               verifier: de.ExecResult | None = None) -> None:
        """Set passed, failure and reason from what the trial saw. The order matters: a
        solution that hung explains a missing reward better than the verifier does."""
        reward = result.reward
        kind = result.kind
        failure, reason = None, None
        if kind == "oracle" and solution is not None and solution.timed_out:
            failure = SOLUTION_TIMEOUT
            reason = f"solve.sh did not finish within {self.solution_timeout_s:g} s"
        elif verifier is not None and verifier.timed_out:
            failure = VERIFIER_TIMEOUT
            reason = f"test.sh did not finish within {self.verifier_timeout_s:g} s"
        elif verifier is not None and verifier.killed_by:
            failure = VERIFIER_NO_REWARD
            reason = f"test.sh was killed ({verifier.killed_by} limit)"
        elif reward is None:
            failure = VERIFIER_NO_REWARD
            reason = result.reason or "no reward"
        elif kind == "nop" and reward > 0:
            failure = NOP_UNEXPECTED_PASS
            reason = f"the verifier gave reward {reward:g} without any solution (expected 0)"
        elif kind == "oracle":
            code = solution.exit_code if solution is not None else None
            if reward < 1:
                if solution is not None and (code != 0 or solution.killed_by):
                    failure = SOLUTION_FAILED
                    how = (f"was killed ({solution.killed_by} limit)" if solution.killed_by
                           else f"exited {code}")
                    reason = f"solve.sh {how}; the verifier gave reward {reward:g}"
                else:
                    failure = ORACLE_FAILED
                    reason = f"the verifier gave reward {reward:g} after the reference solution"
                    failed = [t["name"] for t in result.test_results
                              if t["outcome"] in ("failed", "error")]
                    if failed:
                        reason += f" (failed: {', '.join(failed[:5])})"
            elif code != 0:
                failure = SOLUTION_FAILED
                reason = f"solve.sh exited {code} although the verifier gave reward {reward:g}"
        elif kind == "partial" and reward >= 1:
            failure = PARTIAL_UNEXPECTED_PASS
            reason = (f"partial solution {result.index} (solve.sh cut short) reached reward "
                      f"{reward:g}: the tests do not check enough of the work")
        result.failure, result.passed = failure, failure is None
        result.reason = reason if failure else None


def read_verifier_logs(sb: de.Sandbox) -> dict[str, bytes]:
    """Every file the verifier left in /logs/verifier, as {path relative to it: bytes}.

    One archive read lists the directory and brings the small files with it (their text
    heads); only bigger or binary files cost a download of their own.
    """
    listing = sb.snapshot([VERIFIER_LOGS], max_text_head=_INLINE_RESULT_BYTES, max_files=200,
                          max_bytes=64 * de.MiB)
    contents: dict[str, bytes] = {}
    for path, entry in sorted(listing.files.items()):
        if entry.kind != "file" or entry.size > 32 * de.MiB:
            continue
        name = posixpath.relpath(path, VERIFIER_LOGS)
        head = (entry.text_head or "").encode()
        if entry.text_head is not None and len(head) == entry.size:
            contents[name] = head
            continue
        try:
            data = sb.get_file(path, max_bytes=32 * de.MiB)
        except (ValueError, IsADirectoryError):
            continue
        if data is not None:
            contents[name] = data
    return contents
