"""validate_task, the entry point: build the environment, run the static checks and the nop,
oracle and partial trials, and decide acceptance by the FACET rule (see the package docstring);
plus the plain-docker-CLI baseline benchmarks compare it with. Django-free.

One validation decides, without luck (issue 13): the nop and the oracle each run `trial_runs`
times (2 by default) and disagreeing runs reject the task as `flaky`; the oracle's outputs are
compared with e0's files (an answer already in the image); every verifier run's output is read
for network attempts; and the defect findings of task_defects name the failure type.
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import docker

from facet_site.lib import docker_engine as de
from facet_site.lib import task_defects, verifier_output
from facet_site.lib.task_defects_leaks import image_files_matching
from facet_site.lib.validation.report import (BUILD_FAILED, DEFECTS_AFTER_TRIALS, DEFECTS_BEFORE_TRIALS,
                                              INFRA_ERROR, INVALID_TASK, STATIC_CHECK_FAILED, TrialOutcome,
                                              ValidationReport, ValidationTimeouts, cap_text)
from facet_site.lib.validation.task_checks import (DEFAULT_LIMITS, HARBOR_DEFAULT_TIMEOUT_S, LOG_DIRS,
                                                   VERIFIER_LOGS, TaskFiles, instruction_paths, leak_search_roots,
                                                   static_checks, task_limits)
from facet_site.lib.validation.partials import partials_stored_in
from facet_site.lib.validation.trials import TrialPlan, TrialRunner, image_workdir_of, snapshot_roots

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# The entry point


def _effective_timeout(explicit: float | None, from_task: float | None, cap: float) -> float:
    if explicit is not None:
        return float(explicit)
    return min(from_task if from_task is not None else cap, cap)


def validate_task(
    client: docker.DockerClient,
    task_dir: Path,
    *,
    base_image: str = de.BASE_IMAGE_TAG,
    limits: de.SandboxLimits = DEFAULT_LIMITS,
    partial_solutions: Sequence[str | bytes] | None = None,
    max_partials: int = 3,
    timeouts: ValidationTimeouts = ValidationTimeouts(),
    keep_logs_dir: Path | None = None,
    owner: str | None = None,
    extra_snapshot_paths: Sequence[str] = (),
    report_output_bytes: int = 16 * de.KiB,
    measure_memory: bool = True,
    trial_log_max_bytes: int = 64 * de.MiB,
    trial_runs: int = 2,
    max_parallel: int | None = None,
    written_partials: Sequence[str] = (),
) -> ValidationReport:
    """Build the task's environment and run its nop, oracle and partial trials.

    partial_solutions: None derives up to `max_partials` from solve.sh and `written_partials`
    (task_defects.plan_partials: command cuts, then partial solutions the model wrote, then
    statement cuts of embedded scripts); an empty sequence runs none. Partials run only when the
    oracle passed (against a failing oracle they prove nothing). nop and oracle always both run,
    `trial_runs` times each (runs that disagree: failure `flaky`; 1 for a re-check, which
    repeats whole validations itself). Up to `max_parallel` trials run at once (None: one per
    core, at most 4).

    `limits` is a ceiling: task.toml's cpus and memory lower it. Timeouts come from task.toml
    ([agent] and [verifier] timeout_sec, [environment] build_timeout_sec) capped by `timeouts`.

    With keep_logs_dir, each trial's solution.log and verifier.log hold the command's whole
    output up to `trial_log_max_bytes` (then a marker); the report keeps `report_output_bytes`.

    Raises docker_engine.TransientEngineError when the engine fails under us (retry the whole
    validation); everything else ends up in the report. No sandbox outlives this call.
    """
    started = time.monotonic()
    task_dir = Path(task_dir)
    task = TaskFiles(task_dir)
    findings = static_checks(task_dir)
    owner = owner or f"{socket.gethostname()}:{os.getpid()}"
    # Its own owner label per validation, so the final cleanup touches no one else's sandboxes.
    run_owner = f"{owner}:validate:{uuid.uuid4().hex[:12]}"
    solution_timeout = _effective_timeout(timeouts.solution_s, task.timeout("agent"),
                                          timeouts.max_solution_s)
    verifier_timeout = _effective_timeout(timeouts.verifier_s, task.timeout("verifier"),
                                          timeouts.max_verifier_s)
    task_build_s = task.section("environment").get("build_timeout_sec")
    if not isinstance(task_build_s, (int, float)) or task_build_s <= 0:
        task_build_s = HARBOR_DEFAULT_TIMEOUT_S
    build_timeout = _effective_timeout(timeouts.build_s, float(task_build_s),
                                       timeouts.max_build_s)
    effective_limits = task_limits(task, limits)
    settings = {"solution_timeout_s": solution_timeout, "verifier_timeout_s": verifier_timeout,
                "build_timeout_s": build_timeout, "limits": asdict(effective_limits),
                "owner": run_owner}
    settings["trial_runs"] = trial_runs = max(1, int(trial_runs))
    parallel = max(1, int(max_parallel or min(4, os.cpu_count() or 1)))
    settings["max_parallel"] = parallel
    report = ValidationReport(task_dir=str(task_dir), image_tag=None, build=None,
                              build_seconds=0.0, trials=[], static_findings=findings,
                              accepted=False, failure=None, reason=None, settings=settings)
    logs_dir = Path(keep_logs_dir) if keep_logs_dir is not None else None
    if logs_dir is not None:
        logs_dir.mkdir(parents=True, exist_ok=True)

    def finish() -> ValidationReport:
        report.total_seconds = time.monotonic() - started
        if report.failure is None:
            report.failure, report.reason = decide_failure(report.trials, report.static_findings)
        report.accepted = report.failure is None and bool(report.trials)
        if logs_dir is not None:
            (logs_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=2,
                                                             default=str))
        return report

    if task.invalid:
        report.failure = INVALID_TASK
        report.reason = "; ".join(f["message"] for f in task.findings)
        return finish()

    # Build (lint first: build_image refuses a bad Dockerfile before touching the engine).
    build_started = time.monotonic()
    try:
        build = de.build_image(client, task_dir / "environment", base_image=base_image,
                               timeout_s=build_timeout,
                               labels={"facet.task": task_dir.name[:128]})
    except de.DockerfileLintError as exc:
        report.build_seconds = time.monotonic() - build_started
        report.failure = BUILD_FAILED
        report.reason = "Dockerfile lint: " + "; ".join(exc.problems)
        return finish()
    except de.BuildFailed as exc:  # BuildTimeout included
        report.build_seconds = time.monotonic() - build_started
        report.failure, report.reason = BUILD_FAILED, str(exc)
        report.build_log = cap_text(exc.log, 64 * de.KiB)
        if logs_dir is not None:
            (logs_dir / "build.log").write_text(exc.log)
        return finish()
    except de.BaseImageMissing as exc:
        report.failure, report.reason = INFRA_ERROR, str(exc)
        return finish()
    report.build, report.image_tag = build, build.image_tag
    report.build_seconds = time.monotonic() - build_started
    report.build_log = cap_text(build.log, 16 * de.KiB)
    if logs_dir is not None:
        (logs_dir / "build.log").write_text(
            build.log or f"[facet: {build.image_tag} was already built; nothing ran]\n")

    workdir = task.section("environment").get("workdir")
    workdir = str(workdir) if isinstance(workdir, str) and workdir else None
    image_workdir = image_workdir_of(client, build.image_tag)
    settings["workdir"] = workdir or image_workdir or "/"
    validation = TrialRunner(
        client, task, build.image_tag, owner=run_owner, limits=effective_limits,
        workdir=workdir, snapshot_roots=snapshot_roots(workdir or image_workdir,
                                                        extra_snapshot_paths),
        solution_timeout_s=solution_timeout, verifier_timeout_s=verifier_timeout,
        report_output_bytes=report_output_bytes, keep_logs_dir=logs_dir,
        measure_memory=measure_memory, trial_log_max_bytes=trial_log_max_bytes,
        leak_roots=leak_search_roots(task.read("environment/Dockerfile"), workdir or image_workdir),
        image_newer_than=image_created_at(client, base_image),
        image_scan_skips_old_dirs=image_is_layered(client, build.image_tag))
    try:
        repeated = [TrialPlan(kind, repeat=r) for kind in ("nop", "oracle") for r in range(trial_runs)]
        report.trials += run_trials(validation, repeated, parallel)
        oracles = [t for t in report.trials if t.kind == "oracle"]
        for kind in ("nop", "oracle"):
            verdict = task_defects.compare_repeated_trials(
                [t for t in report.trials if t.kind == kind], kind)
            if verdict is not None:
                report.flaky.append(verdict.to_dict())
                settings["flaky"] = report.flaky  # stored with the validation
                validation.add_finding(verdict.to_finding())
        if all(o.passed for o in oracles) and not report.flaky:
            if partial_solutions is None:
                # the model's partial solutions: given, or stored with the task (solution/partials/)
                written = list(written_partials) or partials_stored_in(task_dir)
                plan = task_defects.plan_partials(task.read("solution/solve.sh"), max_partials,
                                                  written=written)
                partial_solutions = plan.partials
                max_partials = max(max_partials, len(plan.partials))  # they run beside the cuts
                settings["partials_grain"] = plan.grain
                if plan.partials:  # the static check saw no partial, but the model wrote some
                    report.static_findings = [f for f in report.static_findings
                                              if f["check"] != task_defects.NO_PARTIAL_SOLUTION]
            partials = [TrialPlan("partial", index, body.encode() if isinstance(body, str) else bytes(body))
                        for index, body in enumerate(partial_solutions[:max_partials], 1)]
            report.trials += run_trials(validation, partials, parallel)
    finally:
        validation.close()
        # Normally every Sandbox has removed itself; this catches the ones an engine failure
        # or an interrupt left, by this validation's own owner label.
        try:
            de.cleanup_leftovers(client, owner=run_owner)
        except de.DockerEngineError as exc:
            log.warning("could not remove the sandboxes of %s: %s", run_owner, exc)
    report.initial_state = validation.initial_state
    report.static_findings.extend(validation.findings)
    outputs = validation.oracle_outputs.get("oracle")
    if outputs:
        # e0's files read whole, and the files elsewhere in the image whose digest is an output's
        initial = {**image_files_matching(outputs, validation.image_digests), **validation.e0_texts}
        report.static_findings += task_defects.find_leaked_answers(
            outputs, initial, instruction_paths(task.read("instruction.md")))
    return finish()


def image_created_at(client: docker.DockerClient, image_tag: str) -> float | None:
    """When the image was created (epoch seconds), or None if it is missing or does not say.
    Every task image builds FROM the base image, so its files newer than this are the task's."""
    image = de.find_image(client, image_tag)
    created = str((image.attrs.get("Created") if image else "") or "")
    try:  # "2026-12-01T16:33:49.941248599Z", to the microsecond
        seconds = datetime.strptime(created[:19], "%Y-%m-%dT%H:%M:%S").replace(
            tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
    fraction = re.match(r"\.(\d{1,6})", created[19:])
    return seconds + (int(fraction.group(1).ljust(6, "0")) / 1e6 if fraction else 0.0)


# Storage drivers that stack image layers as overlayfs: every directory on the path to a file a
# layer adds or changes is (re)created in that layer, so its change time (ctime) is the layer's,
# and a directory whose ctime is older than the base image holds nothing of the task's.
LAYERED_DRIVERS = ("overlay2", "overlay", "fuse-overlayfs")


def image_is_layered(client: docker.DockerClient, image_tag: str) -> bool:
    image = de.find_image(client, image_tag)
    return bool(image) and (image.attrs.get("GraphDriver") or {}).get("Name") in LAYERED_DRIVERS


def run_trials(runner: TrialRunner, plans: Sequence[TrialPlan], parallel: int) -> list[TrialOutcome]:
    """The plans' outcomes, in plan order; up to `parallel` trials at once, each in its own
    sandbox. An engine failure in one is raised after the others have finished."""
    if parallel <= 1 or len(plans) <= 1:
        return [runner.run(plan) for plan in plans]
    with ThreadPoolExecutor(max_workers=min(parallel, len(plans)),
                            thread_name_prefix="facet-trial") as pool:
        return list(pool.map(runner.run, plans))


def decide_failure(trials: Sequence[TrialOutcome], findings: Sequence[dict]) -> tuple[str | None, str | None]:
    """The validation's failure type and reason from its trials and findings (None: accepted).

    An engine problem first; then the defects that explain a failed trial (a flaky verifier, one
    that needs the network); then the first failed trial; then the defects found with every
    trial passing (an answer already in the image, an instruction that gives the solution), and
    any other error-level finding as static_check_failed.
    """
    errors = [f for f in findings if f["severity"] == "error"]

    def first_error(check: str) -> dict | None:
        return next((e for e in errors if e["check"] == check), None)

    infra = next((t for t in trials if t.failure == INFRA_ERROR), None)
    if infra is not None:
        return infra.failure, f"{infra.name}: {infra.reason}"
    for check in DEFECTS_BEFORE_TRIALS:
        if (error := first_error(check)) is not None:
            return check, error["message"]
    failed = next((t for t in trials if not t.passed), None)
    if failed is not None:
        return failed.failure, f"{failed.name}: {failed.reason}"
    for check in DEFECTS_AFTER_TRIALS:
        if (error := first_error(check)) is not None:
            return check, error["message"]
    if errors:
        return STATIC_CHECK_FAILED, "; ".join(e["message"] for e in errors[:3])
    return None, None


# --------------------------------------------------------------------------------------------
# The plain docker CLI, for benchmarks


def time_plain_cli_validation(task_dir: Path, image_tag: str, *, docker_cli: str = "docker",
                              timeout_s: float = 120) -> dict:
    """The nop and oracle trials done with nothing but `docker` commands, timed.

    The baseline a benchmark compares validate_task against: what a script driving the CLI
    with subprocess does (the public FACET code works this way). Same isolation basics (no
    network, a CPU and memory limit, tests uploaded after the solution), none of our extras
    (snapshots, output caps, result parsing, watchdogs). The containers carry the sandbox label,
    so cleanup_leftovers finds any that an exception leaves.
    """
    task_dir = Path(task_dir)
    owner = f"plain-cli:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def docker_cmd(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([docker_cli, *args], capture_output=True, timeout=timeout_s)
        if check and proc.returncode != 0:
            raise RuntimeError(f"docker {args[0]} failed: {proc.stderr.decode()[-500:]}")
        return proc

    def trial(with_solution: bool) -> tuple[float | None, float]:
        started = time.monotonic()
        cid = docker_cmd(
            "run", "-d", "--network", "none", "--cpus", "1", "--memory", "2g",
            "--pids-limit", "1024", "--label", f"{de.LABEL_SANDBOX}=1",
            "--label", f"{de.LABEL_OWNER}={owner}", "--entrypoint", "sleep", image_tag,
            "infinity").stdout.decode().strip()
        try:
            docker_cmd("exec", cid, "mkdir", "-p", *LOG_DIRS)
            if with_solution:
                docker_cmd("cp", str(task_dir / "solution"), f"{cid}:/solution")
                docker_cmd("exec", cid, "bash", "/solution/solve.sh", check=False)
            docker_cmd("cp", str(task_dir / "tests"), f"{cid}:/tests")
            docker_cmd("exec", cid, "bash", "/tests/test.sh", check=False)
            out = docker_cmd("exec", cid, "cat", f"{VERIFIER_LOGS}/reward.txt", check=False)
            reward = verifier_output.read_reward(out.stdout, None).reward
        finally:
            docker_cmd("rm", "-f", cid, check=False)
        return reward, time.monotonic() - started

    started = time.monotonic()
    nop_reward, nop_s = trial(False)
    oracle_reward, oracle_s = trial(True)
    return {"image_tag": image_tag, "nop_reward": nop_reward, "oracle_reward": oracle_reward,
            "nop_seconds": nop_s, "oracle_seconds": oracle_s,
            "total_seconds": time.monotonic() - started}
