"""Task construction (FACET stage 3): from a consistent scenario to a validated Harbor task.

Each task moves through steps (models.Step). One step is one job: the LLM steps (manifest and
materialization, environment repair, artifacts, targeted repair) and the Docker steps (build with
init checks and e0, validation). A job claims the task with a conditional UPDATE on `claimed_at`
for the step the database says it is in, does the step, and records where the task goes next, so
a redelivered job is a no-op and `advance_construction` can be called any number of times.

Without a Docker engine the Docker steps leave the task in waiting_for_docker with the engine's
message; `resume_waiting` puts it back when an engine answers.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import tempfile
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from facet_site.lib import docker_engine as de
from facet_site.lib import harbor
from facet_site.lib import validation as val
from facet_site.lib.llm import InvalidOutput, PermanentLLMError, TransientLLMError, load_prompt
from scenarios import llm as scenario_llm
from scenarios.models import Consistency, Scenario, Strategy, SynthesisRun
from scenarios.services import pair_subject

from . import outputs, summary
from .apps import base_image
from .models import (
    ArtifactKind,
    BuildOutcome,
    Environment,
    EnvironmentBuild,
    EnvironmentStatus,
    FINAL_STATUSES,
    RepairOutcome,
    RepairRound,
    Step,
    Task,
    TaskStatus,
    TaskVersion,
    TestResult,
    Trial,
    Validation,
    ValidationStatus,
)

log = logging.getLogger(__name__)

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"

# The paper's budgets (stage 3): three environment repairs, five task repair rounds.
DEFAULT_CONSTRUCTION = {
    "max_environment_repairs": 3,
    "max_repair_rounds": 5,
    "max_partials": 3,
    "stale_after_minutes": 60,
    # caps on what task.toml asks for; validation uses the smaller
    "timeouts": {"build_s": 600, "solution_s": 300, "verifier_s": 300, "init_check_s": 60},
}

# What a run may set (the run form, the API and the CLI all pass through check_construction_config):
# the range of each number, and what it means to the user.
CONSTRUCTION_RANGES = {
    "max_environment_repairs": (0, 10, "environment repairs"),
    "max_repair_rounds": (0, 20, "repair rounds"),
    "max_partials": (0, 3, "partial solutions"),
    "stale_after_minutes": (1, 24 * 60, "minutes"),
}
TIMEOUT_RANGES = {"build_s": (10, 3600), "solution_s": (5, 3600), "verifier_s": (5, 3600), "init_check_s": (1, 600)}


class ConstructionConfigError(ValueError):
    """A bad value in a run's "construction" settings; `field` is its path, e.g. construction.timeouts.build_s."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def check_construction_config(given) -> dict:
    """The run's "construction" section as given, checked: known keys, integers and seconds in range,
    `auto` a boolean. Raises ConstructionConfigError naming the setting."""
    if not isinstance(given, dict):
        raise ConstructionConfigError("construction", "expected an object")
    for key in given:
        if key not in DEFAULT_CONSTRUCTION and key != "auto":
            raise ConstructionConfigError(f"construction.{key}", "unknown setting")
    if "auto" in given and not isinstance(given["auto"], bool):
        raise ConstructionConfigError("construction.auto", "expected true or false")
    for key, (low, high, what) in CONSTRUCTION_RANGES.items():
        value = given.get(key)
        if key in given and (not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high):
            raise ConstructionConfigError(f"construction.{key}", f"must be a whole number of {what} from {low} to {high}")
    timeouts = given.get("timeouts", {})
    if not isinstance(timeouts, dict):
        raise ConstructionConfigError("construction.timeouts", "expected an object of seconds")
    for key, value in timeouts.items():
        if key not in TIMEOUT_RANGES:
            raise ConstructionConfigError(f"construction.timeouts.{key}", "unknown timeout")
        low, high = TIMEOUT_RANGES[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
            raise ConstructionConfigError(f"construction.timeouts.{key}", f"must be a number of seconds from {low} to {high}")
    return given


SOLVE_SH = "solution/solve.sh"
TEST_SH = "tests/test.sh"
TEST_PY = "tests/test_outputs.py"
INIT_SH = "init.sh"
LOG_CAP = 16 * 1024

_STATUS_FOR_STEP = {
    Step.ENVIRONMENT: TaskStatus.CONSTRUCTING, Step.ENVIRONMENT_REPAIR: TaskStatus.CONSTRUCTING,
    Step.BUILD: TaskStatus.CONSTRUCTING, Step.ARTIFACTS: TaskStatus.CONSTRUCTING,
    Step.VALIDATE: TaskStatus.VALIDATING, Step.REPAIR: TaskStatus.REPAIRING,
}


def prompt(stage: str):
    return load_prompt(PROMPTS_DIR, stage)


def construction_config(run: SynthesisRun | None) -> dict:
    """The defaults, overridden by the run's optional "construction" section."""
    given = ((run.config or {}).get("construction") or {}) if run is not None else {}
    cfg = {**DEFAULT_CONSTRUCTION, **{k: v for k, v in given.items() if k != "timeouts"}}
    cfg["timeouts"] = {**DEFAULT_CONSTRUCTION["timeouts"], **(given.get("timeouts") or {})}
    return cfg


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:tasks"


def _cap(text: str, limit: int = LOG_CAP) -> str:
    return val.cap_text(text, limit)


def data_dir(*parts) -> Path:
    path = Path(settings.DATA_DIR).joinpath(*[str(p) for p in parts])
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- subjects and specification text ------------------------------------------------------------


def task_subject(task: Task) -> str:
    """Stable across databases (skill keys), so a cassette replays anywhere."""
    if task.scenario_id:
        return "scenario:" + pair_subject(task.scenario.pair).removeprefix("pair:")
    return f"task:{task.name}"


def scenario_json(scenario: Scenario | None) -> str:
    if scenario is None:
        return "{}"
    return json.dumps({
        "title": scenario.title, "scenario": scenario.integrated,
        "dimensions": {"goal": scenario.goal, "context": scenario.context, "capability": scenario.capability,
                       "state": scenario.state, "io_tools": scenario.io_tools},
        "solution_reference": scenario.solution_reference, "instruction_reference": scenario.instruction_reference,
    }, ensure_ascii=False, indent=1)


def e0_summary(initial_state: dict | None, max_files: int = 40, head: int = 600) -> str:
    """What the generation steps see of e0: the files (size, head of text) and the services."""
    if not initial_state:
        return "{}"
    snap = initial_state.get("snapshot") or {}
    files = []
    for path, entry in sorted((snap.get("files") or {}).items())[:max_files]:
        files.append({"path": path, "kind": entry.get("kind"), "size": entry.get("size"),
                      "head": (entry.get("text_head") or "")[:head] or None})
    return json.dumps({"workdir": initial_state.get("workdir") or (initial_state.get("roots") or ["/app"])[0],
                       "files": files, "services": initial_state.get("services") or []},
                      ensure_ascii=False, indent=1)


# --- bundles and versions -----------------------------------------------------------------------


def _skills(task: Task) -> list:
    if not task.scenario_id:
        return []
    return task.scenario.pair.ordered_skills()


def task_config(task: Task, artifact_files: dict[str, str], run_cfg: dict) -> harbor.TaskConfig:
    """task.toml: Harbor's TB 2.0 subset with our metadata. `version_hash` is the hash of the
    artifact files without task.toml: content_hash cannot cover itself (harbor.TaskConfig)."""
    skills = _skills(task)
    categories = [s.category.slug for s in skills if s.category_id]
    digest = hashlib.sha256()
    for path in sorted(artifact_files):
        digest.update(f"{hashlib.sha256(artifact_files[path].encode()).hexdigest()}  {path}\n".encode())
    t = run_cfg["timeouts"]
    return harbor.TaskConfig(
        author_name="facet", difficulty="medium", category=categories[0] if categories else "general",
        tags=sorted({s.key.rsplit("/", 1)[-1].split(":")[-1] for s in skills}) or ["facet"],
        scenario_id=str(task.scenario_id) if task.scenario_id else None,
        version_hash="sha256:" + digest.hexdigest(), skills=[s.key for s in skills],
        agent_timeout_sec=float(t["solution_s"]), verifier_timeout_sec=float(t["verifier_s"]),
        build_timeout_sec=float(t["build_s"]),
    )


def make_files(task: Task, *, environment: dict[str, str], instruction: str, solve_sh: str, test_sh: str,
               test_py: str, run_cfg: dict) -> dict[str, str]:
    """The whole task directory as path -> text, task.toml in canonical form."""
    artifacts = {f"environment/{p}": t for p, t in environment.items()}
    artifacts.update({"instruction.md": instruction, SOLVE_SH: solve_sh, TEST_SH: test_sh, TEST_PY: test_py})
    config = task_config(task, artifacts, run_cfg)
    artifacts["task.toml"] = harbor.canonical_task_toml(config)
    return artifacts


def bundle_of(name: str, files: dict[str, str]) -> harbor.TaskBundle:
    other = {p: t.encode("utf-8") for p, t in files.items() if p not in ("instruction.md", "task.toml")}
    config = harbor.TaskConfig.from_toml_dict(tomllib.loads(files.get("task.toml", "")))
    return harbor.TaskBundle(name=name, instruction=files.get("instruction.md", ""), config=config, files=other)


def _slug(text: str) -> str:
    return (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "task")[:60]


def version_bundle(version: TaskVersion) -> harbor.TaskBundle:
    return bundle_of(_slug(version.task.name), version.files)


def create_version(task: Task, files: dict[str, str], *, parent: TaskVersion | None = None,
                   repair: RepairRound | None = None, prompt_versions: dict | None = None,
                   llm_calls: dict | None = None) -> TaskVersion:
    """A new immutable version, or the task's existing one with the same content hash."""
    digest = harbor.content_hash(bundle_of(task.name, files))
    existing = TaskVersion.objects.filter(content_hash=digest).first()
    if existing is not None:
        if existing.task_id != task.pk:
            raise ValueError(f"task {task.pk}: its files equal version {existing.pk} of task {existing.task_id}")
        return existing
    number = (task.versions.aggregate(n=Count("id"))["n"] or 0) + 1
    return TaskVersion.objects.create(task=task, number=number, content_hash=digest, files=files, parent=parent,
                                      created_by_repair=repair, prompt_versions=prompt_versions or {},
                                      llm_calls=llm_calls or {})


def write_harbor_task(version: TaskVersion, dest: Path, *, overwrite: bool = False) -> Path:
    """The version as a Harbor task directory. Its task.toml carries category, tags (from the
    skills), the scenario id and the artifact hash; harbor.read_task_dir of the result has
    the version's content_hash."""
    return harbor.write_task_dir(version_bundle(version), Path(dest), overwrite=overwrite)


def import_task_dir(path: Path, *, name: str | None = None) -> Task:
    """A Harbor task made elsewhere, stored as an imported task with one version (to validate)."""
    bundle = harbor.read_task_dir(Path(path))
    files = {p: d.decode("utf-8", errors="replace") for p, d in bundle.files.items()}
    files["instruction.md"] = bundle.instruction
    files["task.toml"] = harbor.canonical_task_toml(bundle)
    with transaction.atomic():
        task = Task.objects.create(name=(name or bundle.name)[:200], imported=True, status=TaskStatus.VALIDATING,
                                   step=Step.DONE)
        version = create_version(task, files)
        Task.objects.filter(pk=task.pk).update(current_version=version)
    task.refresh_from_db()
    summary.set_labels(task)
    return summary.refresh_summary(task)


# --- creating tasks for a run -------------------------------------------------------------------


def create_tasks(run: SynthesisRun) -> int:
    """One task per consistent scenario of the run (the funnel's scenario–skill seeds)."""
    have = set(Task.objects.filter(run=run).values_list("scenario_id", flat=True))
    created = 0
    for scenario in Scenario.objects.filter(run=run, consistency=Consistency.CONSISTENT).order_by("id"):
        if scenario.pk in have:
            continue
        with transaction.atomic():
            env = Environment.objects.create(scenario=scenario)
            task = Task.objects.create(scenario=scenario, run=run, environment=env, strategy=run.strategy,
                                       name=(scenario.title or f"Scenario {scenario.pk}")[:200])
            summary.set_labels(task)
        created += 1
    return created


# --- claiming -----------------------------------------------------------------------------------

OPEN_STATUSES = [TaskStatus.CONSTRUCTING, TaskStatus.VALIDATING, TaskStatus.REPAIRING]


def _claim(task_id: int, step: str) -> bool:
    return bool(Task.objects.filter(pk=task_id, step=step, claimed_at__isnull=True,
                                    status__in=OPEN_STATUSES).update(claimed_at=timezone.now()))


def _move(task: Task, step: str, *, status: str | None = None, **fields) -> None:
    """Record the step's outcome and release the claim."""
    status = status or _STATUS_FOR_STEP.get(step, TaskStatus.CONSTRUCTING)
    # update() skips auto_now, hence updated_at by hand
    Task.objects.filter(pk=task.pk).update(step=step, status=status, claimed_at=None, updated_at=timezone.now(),
                                           **fields)
    if "current_version" in fields or status in FINAL_STATUSES:
        summary.refresh_summary(task.pk)


def _release(task: Task, message: str, *, status: str | None = None) -> None:
    fields = {"claimed_at": None, "message": message[:5000], "updated_at": timezone.now()}
    if status:
        fields["status"] = status
    Task.objects.filter(pk=task.pk).update(**fields)


def _engine_unavailable(task: Task, exc: de.EngineUnavailable) -> None:
    _release(task, str(exc), status=TaskStatus.WAITING_FOR_DOCKER)


def run_step(task_id: int, step: str | None = None) -> str:
    """Claim the task for the step the database says it is in (only `step`, when given: a
    duplicated job message for a step already done must not run the next step on the wrong
    queue), do it, and record where it goes next. Returns the step done, or "" when another
    worker has it or nothing is due."""
    task = Task.objects.filter(pk=task_id).first()
    if task is None or task.status not in OPEN_STATUSES or task.step == Step.DONE:
        return ""
    if step is not None and task.step != step:
        return ""
    step = task.step
    if not _claim(task_id, step):
        return ""
    task = Task.objects.select_related("run", "environment", "scenario__pair", "current_version").get(pk=task_id)
    try:
        STEPS[step](task)
    except TransientLLMError as exc:
        _release(task, f"transient LLM error, will retry: {exc}")
        raise
    except de.EngineUnavailable as exc:
        _engine_unavailable(task, exc)
    except de.TransientEngineError as exc:
        # The daemon restarted or the connection broke mid-step: nothing the task did. It waits
        # like a missing engine and resumes with the same step.
        _release(task, f"Docker engine trouble during {step}: {exc}; see README", status=TaskStatus.WAITING_FOR_DOCKER)
    except (InvalidOutput, PermanentLLMError) as exc:
        _move(task, Step.DONE, status=TaskStatus.FAILED, message=f"{step}: {exc.__class__.__name__}: {exc}"[:5000])
    except Exception as exc:  # recorded on the task, so one bad task never stalls the run
        log.exception("task %s step %s failed", task_id, step)
        _move(task, Step.DONE, status=TaskStatus.FAILED, message=f"{step}: {exc.__class__.__name__}: {exc}"[:5000])
    return step


# --- LLM steps ----------------------------------------------------------------------------------


class _Gen:
    """One LLM client per job, and the calls it made, for the records that name them."""

    def __init__(self, task: Task):
        self.task = task
        self.client, self.recorder = scenario_llm.client_for(task.run)
        self.subject = task_subject(task)
        self.versions: dict[str, str] = {}
        self.calls: dict[str, int] = {}

    def __call__(self, key: str, stage: str, schema, subject_suffix: str = "", **values):
        p = prompt(stage)
        self.versions[key] = p.version
        result = scenario_llm.stage_client(self.client, self.task.run, stage).complete(
            stage=stage, subject=self.subject + subject_suffix, prompt_version=p.version,
            messages=p.messages(**values), schema=schema)
        if self.recorder.last is not None:
            self.calls[key] = self.recorder.last.pk
        return result.parsed

    def close(self):
        self.client.close()


def _env_files(out: outputs.MaterializationOut) -> tuple[dict[str, str], list[str]]:
    files = {"Dockerfile": out.dockerfile if out.dockerfile.endswith("\n") else out.dockerfile + "\n"}
    for f in out.files:
        rel = f.path.strip().lstrip("/")
        if rel.startswith("environment/"):
            rel = rel[len("environment/"):]
        if rel and rel != "Dockerfile":
            files[rel] = f.content
    if out.init_script.strip():
        files[INIT_SH] = out.init_script if out.init_script.endswith("\n") else out.init_script + "\n"
    return files, [c for c in out.init_checks if c.strip()]


def step_environment(task: Task) -> None:
    gen = _Gen(task)
    try:
        spec = scenario_json(task.scenario)
        manifest = gen("manifest", "task.manifest", outputs.ManifestOut, scenario_json=spec)
        out = gen("materialize", "task.materialize", outputs.MaterializationOut, scenario_json=spec,
                  manifest_json=manifest.model_dump_json(indent=1), base_image=base_image())
    finally:
        gen.close()
    files, checks = _env_files(out)
    Environment.objects.filter(pk=task.environment_id).update(
        manifest=manifest.model_dump(), files=files, init_checks=checks, status=EnvironmentStatus.MATERIALIZED,
        prompt_versions=gen.versions, llm_calls=gen.calls)
    _move(task, Step.BUILD, message="")


def step_environment_repair(task: Task) -> None:
    env = task.environment
    last = env.builds.order_by("-attempt").first()
    gen = _Gen(task)
    try:
        out = gen("environment_repair", "task.environment_repair", outputs.EnvironmentRepairOut,
                  subject_suffix=f"#env{env.repair_count + 1}", scenario_json=scenario_json(task.scenario),
                  manifest_json=json.dumps(env.manifest, indent=1), files_json=json.dumps(env.files, indent=1),
                  outcome=last.outcome if last else "unknown", reason=last.reason if last else "",
                  log=(last.log if last else "")[-6000:], base_image=base_image())
    finally:
        gen.close()
    files, checks = _env_files(out)
    versions = {**env.prompt_versions, **gen.versions}
    calls = {**env.llm_calls, f"environment_repair_{env.repair_count + 1}": gen.calls.get("environment_repair")}
    Environment.objects.filter(pk=env.pk).update(files=files, init_checks=checks, repair_count=env.repair_count + 1,
                                                 status=EnvironmentStatus.MATERIALIZED, prompt_versions=versions,
                                                 llm_calls=calls)
    _move(task, Step.BUILD, message=f"environment repair {env.repair_count + 1}: {out.diagnosis}"[:5000])


def _artifacts_forward(gen: _Gen, spec: str, e0: str, strategy: str) -> dict[str, str]:
    instruction = gen("instruction", "task.instruction", outputs.InstructionOut, scenario_json=spec,
                      e0_json=e0).instruction
    if strategy == Strategy.REVERSE:
        verifier = gen("verifier", "task.verifier", outputs.VerifierOut, scenario_json=spec, e0_json=e0,
                       instruction=instruction, solution_section="")
        solution = gen("solution", "task.solution", outputs.SolutionOut, scenario_json=spec, e0_json=e0,
                       instruction=instruction, verifier_section=(
                           "The verifier the solution must satisfy:\ntests/test_outputs.py:\n" + verifier.test_py + "\n"))
    else:
        solution = gen("solution", "task.solution", outputs.SolutionOut, scenario_json=spec, e0_json=e0,
                       instruction=instruction, verifier_section="")
        verifier = gen("verifier", "task.verifier", outputs.VerifierOut, scenario_json=spec, e0_json=e0,
                       instruction=instruction, solution_section=(
                           "The reference solution (check the state it leaves, not its commands):\n"
                           + solution.solve_sh + "\n"))
    return {"instruction": instruction, "solve_sh": solution.solve_sh, "test_sh": verifier.test_sh,
            "test_py": verifier.test_py}


def step_artifacts(task: Task) -> None:
    env = task.environment
    run_cfg = construction_config(task.run)
    gen = _Gen(task)
    spec, e0 = scenario_json(task.scenario), e0_summary(env.initial_state)
    try:
        if task.strategy == Strategy.JOINT:
            out = gen("joint", "task.joint", outputs.ArtifactsOut, scenario_json=spec, e0_json=e0)
            parts = out.model_dump()
        else:
            parts = _artifacts_forward(gen, spec, e0, task.strategy)
    finally:
        gen.close()
    files = make_files(task, environment=env.files, instruction=parts["instruction"], solve_sh=parts["solve_sh"],
                       test_sh=parts["test_sh"], test_py=parts["test_py"], run_cfg=run_cfg)
    with transaction.atomic():
        version = create_version(task, files, prompt_versions=gen.versions, llm_calls=gen.calls)
        Validation.objects.create(version=version)
        _move(task, Step.VALIDATE, current_version=version, message="")


# --- targeted repair ----------------------------------------------------------------------------

# The failure types whose culprit is certain; oracle_failed (the solution ran cleanly but the
# tests disagree) is where the LLM router decides between solution, verifier and instruction.
RULES = {
    val.BUILD_FAILED: ArtifactKind.ENVIRONMENT,
    val.NOP_UNEXPECTED_PASS: ArtifactKind.VERIFIER,
    val.PARTIAL_UNEXPECTED_PASS: ArtifactKind.VERIFIER,
    val.VERIFIER_NO_REWARD: ArtifactKind.VERIFIER,
    val.VERIFIER_TIMEOUT: ArtifactKind.VERIFIER,
    val.SOLUTION_FAILED: ArtifactKind.SOLUTION,
    val.SOLUTION_TIMEOUT: ArtifactKind.SOLUTION,
}
_STATIC_RULES = {"solution_writes_reward": ArtifactKind.SOLUTION, "answers_in_image": ArtifactKind.ENVIRONMENT,
                 "tests_use_solution": ArtifactKind.VERIFIER, "no_reward_written": ArtifactKind.VERIFIER}


def preclassify(validation: Validation) -> str | None:
    """The artifact the failure type alone points at, or None when it takes judgement."""
    if validation.failure in RULES:
        return RULES[validation.failure]
    if validation.failure == val.STATIC_CHECK_FAILED:
        for finding in validation.static_findings:
            if finding.get("severity") == "error" and finding.get("check") in _STATIC_RULES:
                return _STATIC_RULES[finding["check"]]
        return ArtifactKind.VERIFIER
    if validation.failure == val.INVALID_TASK:
        reason = validation.reason
        if "solve.sh" in reason:
            return ArtifactKind.SOLUTION
        if "Dockerfile" in reason:
            return ArtifactKind.ENVIRONMENT
        if "instruction.md" in reason:
            return ArtifactKind.INSTRUCTION
        return ArtifactKind.VERIFIER
    return None


def _failing_trial(validation: Validation) -> Trial | None:
    return validation.trials.filter(passed=False).order_by("id").first()


def step_repair(task: Task) -> None:
    version = task.current_version
    validation = version.validations.filter(status=ValidationStatus.DONE, recheck__isnull=True).order_by("-id").first()
    number = task.repairs.count() + 1
    run_cfg = construction_config(task.run)
    files = dict(version.files)
    gen = _Gen(task)
    suffix = f"#repair{number}"
    spec, e0 = scenario_json(task.scenario), e0_summary(task.environment.initial_state if task.environment else None)
    try:
        artifact = preclassify(validation)
        routed_by, router_reason = "rule", f"{validation.failure} is always the {artifact}'s fault" if artifact else ""
        if artifact is None:
            trial = _failing_trial(validation)
            tests = list(trial.tests.values("name", "outcome", "message")) if trial else []
            routed = gen("router", "task.router", outputs.RouterOut, subject_suffix=suffix,
                         failure=validation.failure, reason=validation.reason, preclassified="none (judge it)",
                         tests_json=json.dumps(tests[:50], indent=1),
                         output=((trial.verifier_output if trial else "") or "")[-4000:],
                         instruction=files.get("instruction.md", ""), solve_sh=files.get(SOLVE_SH, ""),
                         test_py=files.get(TEST_PY, ""))
            artifact, routed_by, router_reason = routed.artifact, "llm", routed.reason
        common = dict(subject_suffix=suffix, failure=validation.failure, reason=validation.reason,
                      router_reason=router_reason, scenario_json=spec, e0_json=e0,
                      files_json=json.dumps(files, indent=1, ensure_ascii=False))
        if artifact == ArtifactKind.ENVIRONMENT:
            env_files = {p.removeprefix("environment/"): t for p, t in files.items() if p.startswith("environment/")}
            out = gen("environment", "task.environment_repair", outputs.EnvironmentRepairOut, subject_suffix=suffix,
                      scenario_json=spec, manifest_json=json.dumps(task.environment.manifest if task.environment else {}),
                      files_json=json.dumps(env_files, indent=1), outcome=validation.failure,
                      reason=validation.reason, log=validation.build_log[-6000:], base_image=base_image())
            new_env, _checks = _env_files(out)
            files = {p: t for p, t in files.items() if not p.startswith("environment/")}
            files.update({f"environment/{p}": t for p, t in new_env.items()})
        elif artifact == ArtifactKind.INSTRUCTION:
            files["instruction.md"] = gen("instruction", "task.repair.instruction", outputs.InstructionOut,
                                          **common).instruction
        elif artifact == ArtifactKind.SOLUTION:
            files[SOLVE_SH] = gen("solution", "task.repair.solution", outputs.SolutionOut, **common).solve_sh
        else:
            out = gen("verifier", "task.repair.verifier", outputs.VerifierOut, **common)
            files[TEST_SH], files[TEST_PY] = out.test_sh, out.test_py
    finally:
        gen.close()
    env_files = {p.removeprefix("environment/"): t for p, t in files.items() if p.startswith("environment/")}
    files = make_files(task, environment=env_files, instruction=files.get("instruction.md", ""),
                       solve_sh=files.get(SOLVE_SH, ""), test_sh=files.get(TEST_SH, ""),
                       test_py=files.get(TEST_PY, ""), run_cfg=run_cfg)
    with transaction.atomic():
        repair = RepairRound.objects.create(
            task=task, number=number, artifact=artifact, routed_by=routed_by, router_reason=router_reason,
            failure=validation.failure, failure_reason=validation.reason, triggered_by=validation,
            from_version=version, prompt_version=gen.versions.get(artifact, ""), llm_calls=gen.calls)
        new = create_version(task, files, parent=version, repair=repair,
                             prompt_versions={**version.prompt_versions, **gen.versions},
                             llm_calls={**version.llm_calls, **gen.calls})
        RepairRound.objects.filter(pk=repair.pk).update(to_version=new)
        # A full re-validation from clean containers, even when the files came out unchanged.
        Validation.objects.create(version=new)
        _move(task, Step.VALIDATE, current_version=new,
              message=f"repair {number}: regenerated the {artifact} after {validation.failure}")


# --- Docker steps -------------------------------------------------------------------------------

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
    return EnvironmentBuild.objects.create(environment=env, attempt=attempt, files=env.files, log=_cap(log_text),
                                           log_path=path, **fields)


def _after_failed_build(task: Task, env: Environment, build: EnvironmentBuild, run_cfg: dict) -> None:
    if env.repair_count < run_cfg["max_environment_repairs"]:
        _move(task, Step.ENVIRONMENT_REPAIR, message=f"build attempt {build.attempt}: {build.reason}"[:5000])
        return
    Environment.objects.filter(pk=env.pk).update(status=EnvironmentStatus.FAILED)
    reason = (f"the environment did not build after {env.repair_count} repairs "
              f"(last: {build.get_outcome_display().lower()}: {build.reason})")
    _move(task, Step.DONE, status=TaskStatus.DISCARDED, discard_reason=reason[:5000], message=reason[:5000])


def step_build(task: Task) -> None:
    env = task.environment
    run_cfg = construction_config(task.run)
    attempt = env.builds.count() + 1
    problems = lint_environment(env.files)
    if problems:
        # Rejected before any engine is asked: no image, no container.
        build = _record_build(env, attempt, outcome=BuildOutcome.LINT_FAILED, reason="; ".join(problems)[:5000],
                              full_log="Dockerfile lint:\n" + "\n".join(problems) + "\n")
        return _after_failed_build(task, env, build, run_cfg)
    client = de.connect()
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
                return _release(task, f"{exc}; see README (Docker)", status=TaskStatus.WAITING_FOR_DOCKER)
        workdir = (env.manifest or {}).get("workdir") or val.DEFAULT_WORKDIR
        failed_check = _init_checks(client, result.image_tag, env.init_checks, workdir,
                                    run_cfg["timeouts"]["init_check_s"])
        if failed_check:
            build = _record_build(env, attempt, outcome=BuildOutcome.INIT_FAILED, reason=failed_check[:5000],
                                  full_log=result.log + "\n[init checks]\n" + failed_check, image_tag=result.image_tag,
                                  cached=result.cached, seconds=result.seconds)
            return _after_failed_build(task, env, build, run_cfg)
        e0 = val.capture_initial_state(client, result.image_tag, paths=[workdir], owner=_owner())
        _record_build(env, attempt, outcome=BuildOutcome.SUCCEEDED, full_log=result.log or "[cached image]\n",
                      image_tag=result.image_tag, cached=result.cached, seconds=result.seconds)
        Environment.objects.filter(pk=env.pk).update(status=EnvironmentStatus.BUILT, image_tag=result.image_tag,
                                                     initial_state=e0)
        _move(task, Step.ARTIFACTS, message="")
    finally:
        client.close()


def _init_checks(client, image_tag: str, checks: list[str], workdir: str, timeout_s: float) -> str:
    """"" when every check exits 0 in a fresh sandbox, else what failed."""
    if not checks:
        return ""
    with de.Sandbox(client, image_tag, owner=_owner(), limits=val.DEFAULT_LIMITS) as sb:
        for check in checks[:20]:
            result = sb.exec(check, timeout_s=timeout_s, workdir=workdir)
            if result.exit_code != 0:
                why = "timed out" if result.timed_out else f"exited {result.exit_code}"
                return f"init check `{check}` {why}: {result.output[-2000:]}"
    return ""


def step_validate(task: Task) -> None:
    version = task.current_version
    validation = version.validations.filter(
        status__in=[ValidationStatus.QUEUED, ValidationStatus.WAITING_FOR_DOCKER], recheck__isnull=True
    ).order_by("id").first()
    if validation is None:
        validation = Validation.objects.create(version=version)
    validation = validate(validation.pk, run_cfg=construction_config(task.run))
    if validation is None:
        return _release(task, "the validation is running elsewhere")
    apply_outcome(task, validation)


def apply_outcome(task: Task, validation: Validation) -> None:
    """What a finished validation means for the task: validated, another repair, or discarded."""
    if validation.status == ValidationStatus.WAITING_FOR_DOCKER:
        return _release(task, validation.reason, status=TaskStatus.WAITING_FOR_DOCKER)
    run_cfg = construction_config(task.run)
    pending = task.repairs.filter(to_version=validation.version, outcome=RepairOutcome.PENDING)
    pending.update(outcome=RepairOutcome.FIXED if validation.accepted else RepairOutcome.STILL_FAILING)
    if validation.status == ValidationStatus.ERROR:
        return _move(task, Step.DONE, status=TaskStatus.FAILED, message=f"validation: {validation.reason}"[:5000])
    if validation.accepted:
        return _move(task, Step.DONE, status=TaskStatus.VALIDATED, message="")
    if task.imported:
        return _move(task, Step.DONE, status=TaskStatus.DISCARDED,
                     discard_reason=f"{validation.failure}: {validation.reason}"[:5000])
    rounds = task.repairs.count()
    if rounds >= run_cfg["max_repair_rounds"]:
        reason = (f"still invalid after {rounds} repair rounds; last failure {validation.failure}: "
                  f"{validation.reason}")
        return _move(task, Step.DONE, status=TaskStatus.DISCARDED, discard_reason=reason[:5000], message=reason[:5000])
    _move(task, Step.REPAIR, message=f"{validation.failure}: {validation.reason}"[:5000])


STEPS: dict[str, Callable[[Task], None]] = {
    Step.ENVIRONMENT: step_environment, Step.ENVIRONMENT_REPAIR: step_environment_repair, Step.BUILD: step_build,
    Step.ARTIFACTS: step_artifacts, Step.VALIDATE: step_validate, Step.REPAIR: step_repair,
}


# --- validation of one version (construction, CLI, API, imported tasks) --------------------------


def request_validation(version: TaskVersion, *, user=None) -> Validation:
    return Validation.objects.create(version=version, requested_by=user)


def validate(validation_id: int, *, run_cfg: dict | None = None, client=None) -> Validation | None:
    """Claim a queued (or waiting) validation, run it in Docker and store everything it saw.
    Returns None when another worker has it."""
    claimed = Validation.objects.filter(
        pk=validation_id, status__in=[ValidationStatus.QUEUED, ValidationStatus.WAITING_FOR_DOCKER],
    ).update(status=ValidationStatus.RUNNING, claimed_at=timezone.now())
    if not claimed:
        return None
    validation = Validation.objects.select_related("version__task__run").get(pk=validation_id)
    version = validation.version
    run_cfg = run_cfg or construction_config(version.task.run)
    own_client = client is None
    try:
        if own_client:
            client = de.connect()
    except de.EngineUnavailable as exc:
        Validation.objects.filter(pk=validation_id).update(status=ValidationStatus.WAITING_FOR_DOCKER,
                                                           reason=str(exc))
        return Validation.objects.get(pk=validation_id)
    # The sandboxes of this attempt carry this owner label, and the label is on record before
    # any container exists: if the engine goes away mid-run the attempt cannot remove them,
    # and whoever resumes the validation removes them by it (remove_attempt_sandboxes).
    remove_attempt_sandboxes(validation, client)
    owner = validation_owner(validation)
    Validation.objects.filter(pk=validation_id).update(settings={"owner": owner})
    logs = data_dir("validations", validation.pk)
    t = run_cfg["timeouts"]
    try:
        with tempfile.TemporaryDirectory(prefix="facet-task-") as tmp:
            task_dir = write_harbor_task(version, Path(tmp) / _slug(version.task.name))
            report = val.validate_task(
                client, task_dir, base_image=base_image(), max_partials=run_cfg["max_partials"],
                timeouts=val.ValidationTimeouts(max_build_s=t["build_s"], max_solution_s=t["solution_s"],
                                                max_verifier_s=t["verifier_s"]),
                keep_logs_dir=logs, owner=owner,
                trial_log_max_bytes=getattr(settings, "FACET_TRIAL_LOG_MAX_BYTES", 64 * 1024 * 1024))
    except de.TransientEngineError as exc:
        # Engine gone or restarting mid-run: nothing the task did. The trials so far are dropped
        # (they ran against an engine that went away) and the whole validation runs again from
        # clean containers once the engine answers.
        reason = (f"infrastructure: the Docker engine failed during the validation (daemon restarting or "
                  f"connection lost): {exc}")
        if "README" not in reason:
            reason += "; it runs again when the engine answers (see README, Docker)"
        Validation.objects.filter(pk=validation_id).update(status=ValidationStatus.WAITING_FOR_DOCKER,
                                                           reason=reason[:5000])
        return Validation.objects.get(pk=validation_id)
    finally:
        if own_client and client is not None:
            client.close()
    store_report(validation, report, logs)
    return Validation.objects.get(pk=validation_id)


def validation_owner(validation: Validation) -> str:
    """The owner label prefix of one validation attempt's sandboxes (validate_task appends its
    own suffix). It starts with this worker's owner, so a worker's clean-up covers it too."""
    return f"{_owner()}:validation-{validation.pk}"


def remove_attempt_sandboxes(validation: Validation, client) -> int:
    """Remove what an earlier, interrupted attempt of this validation left (by its owner label)."""
    previous = (validation.settings or {}).get("owner")
    if not previous or client is None:
        return 0
    try:
        return de.cleanup_leftovers(client, owner_prefix=f"{previous}:")
    except de.DockerEngineError as exc:
        log.warning("could not remove the sandboxes of validation %s: %s", validation.pk, exc)
        return 0


def store_report(validation: Validation, report: val.ValidationReport, logs: Path) -> None:
    with transaction.atomic():
        for trial in report.trials:
            row = Trial.objects.create(
                validation=validation, version=validation.version, kind=trial.kind, index=trial.index,
                reward=trial.reward, passed=trial.passed, failure=trial.failure or "", reason=trial.reason or "",
                solution_exit_code=trial.solution_exit_code, solution_output=_cap(trial.solution_output),
                verifier_output=_cap(trial.verifier_output), fs_diff=trial.fs_diff,
                solution_seconds=trial.solution_seconds, verifier_seconds=trial.verifier_seconds,
                seconds=trial.total_seconds, peak_memory_bytes=trial.peak_memory_bytes,
                logs_path=str(logs / f"trial_{trial.name}"))
            TestResult.objects.bulk_create([
                TestResult(trial=row, name=str(t.get("name", ""))[:500], outcome=str(t.get("outcome", ""))[:10],
                           message=str(t.get("message") or "")[:5000])
                for t in trial.test_results[:2000]])
        infra = report.failure == val.INFRA_ERROR
        Validation.objects.filter(pk=validation.pk).update(
            status=ValidationStatus.ERROR if infra else ValidationStatus.DONE, accepted=report.accepted,
            failure=report.failure or "", reason=report.reason or "", static_findings=report.static_findings,
            image_tag=report.image_tag or "", build_cached=report.build.cached if report.build else None,
            build_seconds=report.build_seconds, build_log=_cap(report.build_log), total_seconds=report.total_seconds,
            initial_state=report.initial_state, settings=report.settings, logs_dir=str(logs),
            finished_at=timezone.now())


def validate_pending(*, client=None) -> list[Validation]:
    """Every queued or waiting validation (the CLI's --pending), oldest first."""
    done = []
    for vid in Validation.objects.filter(
            status__in=[ValidationStatus.QUEUED, ValidationStatus.WAITING_FOR_DOCKER],
            recheck__isnull=True).order_by("id").values_list("id", flat=True):
        task = Task.objects.filter(versions__validations__pk=vid).first()
        if task is not None and task.step == Step.VALIDATE and not task.imported:
            run_step(task.pk)  # construction's own validation: the task moves on with it
            done.append(Validation.objects.get(pk=vid))
            continue
        result = validate(vid, client=client)
        if result is not None:
            if task is not None and task.imported and result.status != ValidationStatus.WAITING_FOR_DOCKER:
                apply_outcome(task, result)
            done.append(result)
    return done


# --- orchestration ------------------------------------------------------------------------------


def resume_waiting(*, run: SynthesisRun | None = None) -> int:
    """Tasks and validations that waited for Docker go back to work once an engine answers.

    Called by every advance_construction, by `facet construct --resume` and periodically by the
    tasks.jobs.resume_waiting job (Celery beat inside `facet worker`). A construction task goes
    back to its step; a validation requested on its own (task page, API, an imported task) is
    queued again and handed to the Docker queue. Returns how many tasks resumed."""
    tasks = Task.objects.filter(status=TaskStatus.WAITING_FOR_DOCKER)
    waiting_validations = Validation.objects.filter(status=ValidationStatus.WAITING_FOR_DOCKER)
    if run is not None:
        tasks = tasks.filter(run=run)
        waiting_validations = waiting_validations.filter(version__task__run=run)
    if not tasks.exists() and not waiting_validations.exists():
        return 0
    try:
        client = de.connect(timeout_s=10)
    except de.EngineUnavailable:
        return 0
    try:
        # What an engine restart stopped is garbage now: each waiting validation's own sandboxes
        # (by owner label) and any stopped sandbox a minute old (a sandbox never stops by itself).
        for validation in waiting_validations:
            remove_attempt_sandboxes(validation, client)
        de.cleanup_leftovers(client, older_than_s=60, stopped_only=True)
    except de.DockerEngineError as exc:
        log.warning("could not remove stopped sandboxes: %s", exc)
    finally:
        client.close()
    resumed = 0
    for task in tasks:
        resumed += Task.objects.filter(pk=task.pk, status=TaskStatus.WAITING_FOR_DOCKER).update(
            status=_STATUS_FOR_STEP.get(task.step, TaskStatus.CONSTRUCTING), claimed_at=None, message="")
    ids = list(waiting_validations.values_list("id", flat=True))
    Validation.objects.filter(pk__in=ids, status=ValidationStatus.WAITING_FOR_DOCKER).update(
        status=ValidationStatus.QUEUED)
    # Construction's own validations run with their task's validate step; a reviewer's re-check
    # goes back to its re-check job (it never changes the task); the others need a job.
    rechecks = sorted(set(Validation.objects.filter(pk__in=ids, recheck__isnull=False)
                          .values_list("recheck_id", flat=True)))
    standalone = list(Validation.objects.filter(pk__in=ids, recheck__isnull=True).exclude(
        version__task__step=Step.VALIDATE, version__task__imported=False).values_list("id", flat=True))
    if standalone or rechecks:
        from . import jobs

        transaction.on_commit(lambda: ([jobs.docker_validate.delay(vid) for vid in standalone]
                                       + [jobs.docker_recheck.delay(rid) for rid in rechecks]))
    return resumed


def _requeue_stale(run: SynthesisRun, minutes: int) -> None:
    cutoff = timezone.now() - timedelta(minutes=minutes)
    Task.objects.filter(run=run, claimed_at__lt=cutoff, status__in=OPEN_STATUSES).update(claimed_at=None)
    Validation.objects.filter(version__task__run=run, status=ValidationStatus.RUNNING,
                              claimed_at__lt=cutoff).update(status=ValidationStatus.QUEUED)


def advance_construction(run_id: int, *, dispatch: Callable[[str, int], None]) -> int:
    """Create the run's tasks, resume waiting ones, and hand each open task's step to
    `dispatch(step, task_id)` (models.DOCKER_STEPS go to the Docker queue, the rest to the LLM
    queue). Returns how many tasks are open."""
    run = SynthesisRun.objects.get(pk=run_id)
    create_tasks(run)
    resume_waiting(run=run)
    _requeue_stale(run, construction_config(run)["stale_after_minutes"])
    open_tasks = Task.objects.filter(run=run, status__in=OPEN_STATUSES).exclude(step=Step.DONE)
    for task_id, step in open_tasks.filter(claimed_at__isnull=True).values_list("id", "step"):
        dispatch(step, task_id)
    return open_tasks.count()


def construct_run(run_id: int, *, max_steps: int = 10_000) -> SynthesisRun:
    """Construct every task of the run in this process (the CLI's --wait, tests, the demo)."""
    def dispatch(step: str, task_id: int):
        try:
            run_step(task_id, step)
        except TransientLLMError as exc:
            log.warning("transient LLM error on task %s: %s", task_id, exc)

    for _ in range(max_steps):
        before = list(Task.objects.filter(run_id=run_id).values_list("id", "step", "status", "claimed_at"))
        if not advance_construction(run_id, dispatch=dispatch):
            break
        if list(Task.objects.filter(run_id=run_id).values_list("id", "step", "status", "claimed_at")) == before:
            break  # nothing moved: waiting for Docker or held by another worker
    return SynthesisRun.objects.get(pk=run_id)


# --- the funnel (Table 5), from the stored records ------------------------------------------------

FUNNEL_STAGES = [
    # (stage, label, the stage its retention is measured against or None)
    ("seeds", "Scenario–skill seeds", None),
    ("first_build_logs", "Seeds with first-build logs", "seeds"),
    ("initial_environment_success", "Initial environment success", "first_build_logs"),
    ("environment_repair_recovery", "Environment repair recovery", None),
    ("successful_environments", "Successful environments", "first_build_logs"),
    ("entering_validation", "Entering task validation", "successful_environments"),
    ("first_pass_valid", "First-pass valid tasks", "entering_validation"),
    ("task_repair_recovery", "Task repair recovery", None),
    ("final_validated", "Final validated tasks", "entering_validation"),
]


def _funnel_counts_by_run() -> dict[int | None, dict[str, int]]:
    """Every run's funnel in one grouped aggregate: the per-run pages then read the cached
    result instead of each paying for the same subqueries."""
    from .filters import funnel_predicates

    predicates = funnel_predicates()
    rows = Task.objects.filter(imported=False).order_by().values("run_id").annotate(
        **{stage: Count("pk", filter=predicates[stage]) if predicates[stage] else Count("pk")
           for stage, _, _ in FUNNEL_STAGES})
    return {row.pop("run_id"): row for row in rows}


def _funnel_counts(run: SynthesisRun | None) -> dict[str, int]:
    from facet_site import stamps

    by_run = stamps.cached("funnel-by-run", stamps.TASKS_STAMP, _funnel_counts_by_run)
    if run is not None:
        return by_run.get(run.pk) or {stage: 0 for stage, _, _ in FUNNEL_STAGES}
    return {stage: sum(row[stage] for row in by_run.values()) for stage, _, _ in FUNNEL_STAGES}


def funnel(run: SynthesisRun | None = None) -> list[dict]:
    """Table 5 over constructed tasks (imported ones never had a seed). Every number is a query:
    one aggregate with tasks.filters.funnel_predicates, which are also the task list's `stage`
    filter."""
    counts = _funnel_counts(run)
    rows = []
    for stage, label, base in FUNNEL_STAGES:
        retention = None
        if base is not None and counts[base]:
            retention = round(100 * counts[stage] / counts[base], 2)
        rows.append({"stage": stage, "label": label, "count": counts[stage], "retention": retention})
    return rows
