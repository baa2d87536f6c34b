"""Targeted repair (a construction step): route a failed validation to the artifact at fault (by
rule where the failure type says it, by the LLM router where it takes judgement), regenerate only
that artifact, and queue the new version for a full re-validation. Every prompt of the repair
receives the validation's evidence (its findings with file, line and matching content)."""
from __future__ import annotations

import json

from django.db import transaction

from facet_site.lib import task_defects
from facet_site.lib import validation as val
from scenarios.run_config import construction_config

from . import outputs
from .apps import base_image
from .generation import Generator, e0_summary, environment_files, scenario_json
from .models import ArtifactKind, RepairRound, Step, Task, Trial, Validation, ValidationStatus
from .versions import SOLVE_SH, TEST_PY, TEST_SH, create_version, make_files

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
# The defect classes of task_defects route by its REPAIR_TARGET (a leak -> the environment, network
# at grade time or a flaky verifier -> the verifier, ...), as failure types and as findings.
_STATIC_RULES = {"solution_writes_reward": ArtifactKind.SOLUTION, "answers_in_image": ArtifactKind.ENVIRONMENT,
                 "tests_use_solution": ArtifactKind.VERIFIER, "no_reward_written": ArtifactKind.VERIFIER,
                 **{check: ArtifactKind(target) for check, target in task_defects.REPAIR_TARGET.items()}}
EVIDENCE_FINDINGS = 12


def evidence(validation: Validation) -> str:
    """The validation's findings as the repair prompts read them, errors first: check, where
    (file and line) and the matching content."""
    findings = sorted(validation.static_findings or [], key=lambda f: f.get("severity") != "error")
    lines = []
    for f in findings[:EVIDENCE_FINDINGS]:
        where = f.get("file") or ""
        if where and f.get("line"):
            where += f":{f['line']}"
        lines.append(f"- [{f.get('severity')}] {f.get('check')}{f' at {where}' if where else ''}: {f.get('message')}")
        if f.get("evidence"):
            lines.append("  " + str(f["evidence"]).replace("\n", "\n  "))
    flaky = (validation.settings or {}).get("flaky") or []
    for verdict in flaky:
        lines.append(f"- flaky {verdict.get('kind')} runs: {verdict.get('reason')}")
    return "\n".join(lines) or "(no findings)"


def preclassify(validation: Validation) -> str | None:
    """The artifact the failure type alone points at, or None when it takes judgement."""
    if validation.failure in RULES:
        return RULES[validation.failure]
    if validation.failure in task_defects.REPAIR_TARGET:
        return ArtifactKind(task_defects.REPAIR_TARGET[validation.failure])
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
    """Repair the artifact the task's last failed validation points at: a new version to validate."""
    version = task.current_version
    # the newest failed validation of the version (a later lucky pass of a flaky one is not the fault)
    validation = (version.validations.filter(status=ValidationStatus.DONE, recheck__isnull=True)
                  .order_by("accepted", "-id").first())
    number = task.repairs.count() + 1
    run_cfg = construction_config(task.run)
    files = dict(version.files)
    gen = Generator(task)
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
                         evidence=evidence(validation),
                         tests_json=json.dumps(tests[:50], indent=1),
                         output=((trial.verifier_output if trial else "") or "")[-4000:],
                         instruction=files.get("instruction.md", ""), solve_sh=files.get(SOLVE_SH, ""),
                         test_py=files.get(TEST_PY, ""))
            artifact, routed_by, router_reason = routed.artifact, "llm", routed.reason
        common = dict(subject_suffix=suffix, failure=validation.failure, reason=validation.reason,
                      evidence=evidence(validation),
                      router_reason=router_reason, scenario_json=spec, e0_json=e0,
                      files_json=json.dumps(files, indent=1, ensure_ascii=False))
        if artifact == ArtifactKind.ENVIRONMENT:
            env_files = {p.removeprefix("environment/"): t for p, t in files.items() if p.startswith("environment/")}
            out = gen("environment", "task.environment_repair", outputs.EnvironmentRepairOut, subject_suffix=suffix,
                      scenario_json=spec, manifest_json=json.dumps(task.environment.manifest if task.environment else {}),
                      files_json=json.dumps(env_files, indent=1), outcome=validation.failure,
                      reason=validation.reason, evidence=evidence(validation),
                      log=validation.build_log[-6000:], base_image=base_image())
            new_env, _checks = environment_files(out)
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
        task.move_to(Step.VALIDATE, current_version=new,
                     message=f"repair {number}: regenerated the {artifact} after {validation.failure}")
