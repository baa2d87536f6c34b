"""The environment steps of construction: manifest and materialization (LLM), environment repair
after a failed build (LLM), and the build itself with its lint, init checks and the captured
initial state e0 (Docker). The environment is built first; everything after is grounded in e0."""
from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from facet_site.lib import docker_engine as de
from facet_site.lib import harbor
from facet_site.lib import validation as val
from scenarios.run_config import construction_config

from . import outputs
from .apps import base_image
from .generation import (CONTEXT_BUDGET, E0_PREVIEWS_STORED, Generator, cap, difficulty_of, environment_files,
                         scenario_json)
from .models import BuildOutcome, Environment, EnvironmentBuild, EnvironmentStatus, Step, Task, TaskStatus
from .validating import cap_log
from .versions import TEST_SH
from .workspace import data_dir, docker_client, worker_owner

def step_environment(task: Task) -> None:
    """The manifest, then the files that realize it (Dockerfile, data, init script and checks)."""
    gen = Generator(task)
    try:
        spec = scenario_json(task.scenario)
        common = {"scenario_json": spec, "base_image": base_image(), "difficulty": difficulty_of(task.scenario),
                  "base_packages": ", ".join(de.BASE_PACKAGES)}
        manifest = gen("manifest", "task.manifest", outputs.ManifestOut, **common)
        out = gen("materialize", "task.materialize", outputs.MaterializationOut, **common,
                  manifest_json=cap(manifest.model_dump_json(indent=1), CONTEXT_BUDGET["manifest"], "manifest"))
    finally:
        gen.close()
    files, checks = environment_files(out)
    Environment.objects.filter(pk=task.environment_id).update(
        manifest=manifest.model_dump(), files=files, init_checks=checks, status=EnvironmentStatus.MATERIALIZED,
        prompt_versions=gen.versions, llm_calls=gen.calls)
    task.move_to(Step.BUILD, message="")


def step_environment_repair(task: Task) -> None:
    """New environment files after a failed build, from the build's outcome and log."""
    env = task.environment
    last = env.builds.order_by("-attempt").first()
    gen = Generator(task)
    try:
        out = gen("environment_repair", "task.environment_repair", outputs.EnvironmentRepairOut,
                  subject_suffix=f"#env{env.repair_count + 1}", scenario_json=scenario_json(task.scenario),
                  manifest_json=cap(json.dumps(env.manifest, indent=1), CONTEXT_BUDGET["manifest"], "manifest"),
                  files_json=cap(json.dumps(env.files, indent=1), CONTEXT_BUDGET["environment_files"],
                                 "build context"),
                  outcome=last.outcome if last else "unknown", reason=last.reason if last else "",
                  evidence="(a failed build: the log below is the evidence)",
                  log=(last.log if last else "")[-CONTEXT_BUDGET["build_log"]:], base_image=base_image())
    finally:
        gen.close()
    files, checks = environment_files(out)
    versions = {**env.prompt_versions, **gen.versions}
    calls = {**env.llm_calls, f"environment_repair_{env.repair_count + 1}": gen.calls.get("environment_repair")}
    Environment.objects.filter(pk=env.pk).update(files=files, init_checks=checks, repair_count=env.repair_count + 1,
                                                 status=EnvironmentStatus.MATERIALIZED, prompt_versions=versions,
                                                 llm_calls=calls)
    task.move_to(Step.BUILD, message=f"environment repair {env.repair_count + 1}: {out.diagnosis}"[:5000])



_SECRET_IN_FILE = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|\bAKIA[0-9A-Z]{16}\b|\bsk-[A-Za-z0-9]{32,}\b|"
                             r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")
_FORBIDDEN_ENV_FILE = re.compile(r"(^|/)(solution|tests)/|(^|/)(solve\.sh|test\.sh|test_[^/]*\.py)$")


def lint_environment(files: dict[str, str]) -> list[str]:
    """Refuse before building: another base image, solution or tests copied in, secrets."""
    problems = list(de.lint_dockerfile(files.get("Dockerfile", ""), base_image()))
    for path, text in sorted(files.items()):
        if _FORBIDDEN_ENV_FILE.search(path):
            problems.append(f"{path}: solution and test files never belong in the environment")
        if _SECRET_IN_FILE.search(text or ""):
            problems.append(f"{path}: contains what looks like a private key or API token")
    if "Dockerfile" not in files:
        problems.append("no Dockerfile")
    return problems


def _write_context(files: dict[str, str], dest: Path) -> Path:
    """environment/ written exactly as harbor.write_task_dir writes it (same modes), so the image
    built here has the context hash validation will look for: the first validation builds nothing."""
    bundle = harbor.TaskBundle(name="env", instruction="", files={
        **{f"environment/{p}": t.encode("utf-8") for p, t in files.items()},
        TEST_SH: b"#!/bin/bash\n"})
    harbor.write_task_dir(bundle, dest, overwrite=True)
    return dest / "environment"


def _record_build(env: Environment, attempt: int, **fields) -> EnvironmentBuild:
    log_text = fields.pop("full_log", "")
    path = ""
    if log_text:
        path = str(data_dir("builds", f"env-{env.pk}") / f"attempt-{attempt}.log")
        Path(path).write_text(log_text)
    return EnvironmentBuild.objects.create(environment=env, attempt=attempt, files=env.files, log=cap_log(log_text),
                                           log_path=path, **fields)


def _after_failed_build(task: Task, env: Environment, build: EnvironmentBuild, run_cfg: dict) -> None:
    if env.repair_count < run_cfg["max_environment_repairs"]:
        task.move_to(Step.ENVIRONMENT_REPAIR, message=f"build attempt {build.attempt}: {build.reason}"[:5000])
        return
    Environment.objects.filter(pk=env.pk).update(status=EnvironmentStatus.FAILED)
    reason = (f"the environment did not build after {env.repair_count} repairs "
              f"(last: {build.get_outcome_display().lower()}: {build.reason})")
    task.move_to(Step.DONE, status=TaskStatus.DISCARDED, discard_reason=reason[:5000], message=reason[:5000])


def step_build(task: Task) -> None:
    """Lint, build, run the init checks and capture e0; a failed build goes to environment repair."""
    env = task.environment
    run_cfg = construction_config(task.run)
    attempt = env.builds.count() + 1
    problems = lint_environment(env.files)
    if problems:
        # Rejected before any engine is asked: no image, no container.
        build = _record_build(env, attempt, outcome=BuildOutcome.LINT_FAILED, reason="; ".join(problems)[:5000],
                              full_log="Dockerfile lint:\n" + "\n".join(problems) + "\n")
        return _after_failed_build(task, env, build, run_cfg)
    client = docker_client()
    try:
        with tempfile.TemporaryDirectory(prefix="facet-env-") as tmp:
            context = _write_context(env.files, Path(tmp) / "task")
            try:
                result = de.build_image(client, context, base_image=base_image(),
                                        timeout_s=run_cfg["timeouts"]["build_s"],
                                        labels={"facet.environment": str(env.pk)})
            except de.DockerfileLintError as exc:
                build = _record_build(env, attempt, outcome=BuildOutcome.LINT_FAILED, reason="; ".join(exc.problems),
                                      full_log="\n".join(exc.problems))
                return _after_failed_build(task, env, build, run_cfg)
            except de.BuildTimeout as exc:
                build = _record_build(env, attempt, outcome=BuildOutcome.TIMEOUT, reason=str(exc), full_log=exc.log,
                                      seconds=exc.seconds)
                return _after_failed_build(task, env, build, run_cfg)
            except de.BuildFailed as exc:
                build = _record_build(env, attempt, outcome=BuildOutcome.BUILD_FAILED, reason=str(exc)[:5000],
                                      full_log=exc.log, seconds=exc.seconds)
                return _after_failed_build(task, env, build, run_cfg)
            except de.BaseImageMissing as exc:
                # The engine lacks our base image: the machine's to fix, not the environment's. The
                # task waits like one without an engine; resuming tries again.
                return task.release(f"{exc}; see README (Docker)", status=TaskStatus.WAITING_FOR_DOCKER)
        workdir = (env.manifest or {}).get("workdir") or val.DEFAULT_WORKDIR
        failed_check = _init_checks(client, result.image_tag, env.init_checks, workdir,
                                    run_cfg["timeouts"]["init_check_s"])
        if failed_check:
            build = _record_build(env, attempt, outcome=BuildOutcome.INIT_FAILED, reason=failed_check[:5000],
                                  full_log=result.log + "\n[init checks]\n" + failed_check, image_tag=result.image_tag,
                                  cached=result.cached, seconds=result.seconds)
            return _after_failed_build(task, env, build, run_cfg)
        e0 = val.capture_initial_state(client, result.image_tag, paths=[workdir], owner=worker_owner(),
                                       max_previews=E0_PREVIEWS_STORED, tool_versions=True)
        _record_build(env, attempt, outcome=BuildOutcome.SUCCEEDED, full_log=result.log or "[cached image]\n",
                      image_tag=result.image_tag, cached=result.cached, seconds=result.seconds)
        Environment.objects.filter(pk=env.pk).update(status=EnvironmentStatus.BUILT, image_tag=result.image_tag,
                                                     initial_state=e0)
        task.move_to(Step.ARTIFACTS, message="")
    finally:
        client.close()


def _init_checks(client, image_tag: str, checks: list[str], workdir: str, timeout_s: float) -> str:
    """"" when every check exits 0 in a fresh sandbox, else what failed."""
    if not checks:
        return ""
    with de.Sandbox(client, image_tag, owner=worker_owner(), limits=val.DEFAULT_LIMITS) as sb:
        for check in checks[:20]:
            result = sb.exec(check, timeout_s=timeout_s, workdir=workdir)
            if result.exit_code != 0:
                why = "timed out" if result.timed_out else f"exited {result.exit_code}"
                return f"init check `{check}` {why}: {result.output[-2000:]}"
    return ""
