"""Targeted repair (a construction step): route a failed validation to the artifact at fault (by
rule where the failure type says it, by the LLM router where it takes judgement), regenerate only
that artifact, and queue the new version for a full re-validation. Every prompt of the repair
receives the validation's evidence (tasks/repair_evidence.py: the tests at fault with their
messages, the failing step's output tails, the trials and partials, the findings, the earlier
rounds' diffs and outcomes) within the token budget, and the round keeps what it was given."""
from __future__ import annotations

import json

from django.db import transaction

from facet_site.lib import task_defects
from facet_site.lib import validation as val
from scenarios.run_config import construction_config

from . import outputs, repair_evidence
from .apps import base_image
from .generation import CONTEXT_BUDGET, Generator, cap, environment_files, grounding, prompt, scenario_json
from .models import ArtifactKind, RepairRound, Step, Task, Validation, ValidationStatus
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


class _Round:
    """One repair round's calls: each prompt gets the same evidence and task context, fitted to the
    token budget, and the sizes of what was sent are kept for the timeline."""

    def __init__(self, task: Task, validation: Validation, files: dict[str, str], number: int, rounds: int):
        self.suffix = f"#repair{number}"
        self.evidence = repair_evidence.gather(validation, task=task)
        env_files = {p.removeprefix("environment/"): t for p, t in files.items() if p.startswith("environment/")}
        initial_state = (task.environment.initial_state if task.environment else None) or validation.initial_state
        ground = grounding(initial_state, env_files)
        self.values = {
            "failure": validation.failure, "reason": validation.reason, "round": f"{number} of {rounds}",
            "evidence": repair_evidence.render(self.evidence), "router_reason": "",
            "scenario_json": repair_evidence.keep_head(scenario_json(task.scenario),
                                                       repair_evidence.BUDGET["scenario"]),
            **{k: ground[k] for k in ("workdir", "e0_inventory", "e0_previews", "tools")},
            **repair_evidence.artifact_values(files),
        }
        self.values["dockerfile"] = repair_evidence.keep_head(ground["dockerfile"], repair_evidence.BUDGET["dockerfile"]
                                                              + repair_evidence.BUDGET["test_sh"])
        self.prompt_tokens: dict[str, int] = {}
        self.gen = Generator(task)

    def __call__(self, key: str, stage: str, schema, **extra):
        values, size = repair_evidence.fit(prompt(stage), {**self.values, **extra})
        self.prompt_tokens[key] = size
        return self.gen(key, stage, schema, subject_suffix=self.suffix, **values)


def step_repair(task: Task) -> None:
    """Repair the artifact the task's last failed validation points at: a new version to validate."""
    version = task.current_version
    # the newest failed validation of the version (a later lucky pass of a flaky one is not the fault)
    validation = (version.validations.filter(status=ValidationStatus.DONE, recheck__isnull=True)
                  .order_by("accepted", "-id").first())
    number = task.repairs.count() + 1
    run_cfg = construction_config(task.run)
    files = dict(version.files)
    call = _Round(task, validation, files, number, run_cfg["max_repair_rounds"])
    diagnosis = ""
    try:
        artifact = preclassify(validation)
        routed_by, router_reason = "rule", f"{validation.failure} is always the {artifact}'s fault" if artifact else ""
        if artifact is None:
            routed = call("router", "task.router", outputs.RouterOut)
            artifact, routed_by, router_reason = routed.artifact, "llm", routed.reason
        call.values["router_reason"] = router_reason
        if artifact == ArtifactKind.VERIFIER:
            out = call("verifier", "task.repair.verifier", outputs.VerifierRepairOut)
            diagnosis = out.diagnosis
            if out.blame == "solution":
                # The verifier's repair found the tests right: the round repairs the solution instead.
                artifact, routed_by = ArtifactKind.SOLUTION, "verifier repair"  # fits routed_by (15)
                router_reason = f"{router_reason} — the verifier repair found the tests right: {out.diagnosis}"
                call.values["router_reason"] = router_reason
            else:
                files[TEST_SH], files[TEST_PY] = out.test_sh, out.test_py
                call.evidence["assertion_changes"] = [c.model_dump() for c in out.assertion_changes]
        if artifact == ArtifactKind.ENVIRONMENT:
            env_files = {p.removeprefix("environment/"): t for p, t in files.items() if p.startswith("environment/")}
            manifest = json.dumps(task.environment.manifest if task.environment else {}, indent=1)
            out = call("environment", "task.environment_repair", outputs.EnvironmentRepairOut,
                       manifest_json=cap(manifest, CONTEXT_BUDGET["manifest"], "manifest"),
                       files_json=cap(json.dumps(env_files, indent=1), CONTEXT_BUDGET["environment_files"],
                                      "build context"),
                       outcome=validation.failure, log=validation.build_log[-CONTEXT_BUDGET["build_log"]:],
                       base_image=base_image())
            diagnosis = out.diagnosis
            new_env, _checks = environment_files(out)
            files = {p: t for p, t in files.items() if not p.startswith("environment/")}
            files.update({f"environment/{p}": t for p, t in new_env.items()})
        elif artifact == ArtifactKind.INSTRUCTION:
            out = call("instruction", "task.repair.instruction", outputs.InstructionRepairOut)
            files["instruction.md"], diagnosis = out.instruction, out.diagnosis
        elif artifact == ArtifactKind.SOLUTION:
            out = call("solution", "task.repair.solution", outputs.SolutionRepairOut)
            files[SOLVE_SH], diagnosis = out.solve_sh, out.diagnosis
            if out.partial_solutions:  # the model's partials follow its new solution
                files = {p: t for p, t in files.items() if not p.startswith(val.PARTIALS_DIR)}
                files.update(val.partial_solution_files(out.partial_solutions))
    finally:
        call.gen.close()
    gen = call.gen
    env_files = {p.removeprefix("environment/"): t for p, t in files.items() if p.startswith("environment/")}
    files = make_files(task, environment=env_files, instruction=files.get("instruction.md", ""),
                       solve_sh=files.get(SOLVE_SH, ""), test_sh=files.get(TEST_SH, ""),
                       test_py=files.get(TEST_PY, ""), run_cfg=run_cfg,
                       partials={p: t for p, t in files.items() if p.startswith(val.PARTIALS_DIR)})
    evidence = {**call.evidence, "diagnosis": diagnosis, "prompt_tokens": call.prompt_tokens,
                "prompt_budget": repair_evidence.PROMPT_TOKENS}
    with transaction.atomic():
        repair = RepairRound.objects.create(
            task=task, number=number, artifact=artifact, routed_by=routed_by, router_reason=router_reason,
            failure=validation.failure, failure_reason=validation.reason, triggered_by=validation,
            from_version=version, prompt_version=gen.versions.get(artifact, ""), llm_calls=gen.calls,
            evidence=evidence)
        new = create_version(task, files, parent=version, repair=repair,
                             prompt_versions={**version.prompt_versions, **gen.versions},
                             llm_calls={**version.llm_calls, **gen.calls})
        RepairRound.objects.filter(pk=repair.pk).update(to_version=new)
        # A full re-validation from clean containers, even when the files came out unchanged.
        Validation.objects.create(version=new)
        task.move_to(Step.VALIDATE, current_version=new,
                     message=f"repair {number}: regenerated the {artifact} after {validation.failure}")
