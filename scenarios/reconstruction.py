"""Stage 4 of a synthesis run: an accepted pair reconstructed into a scenario (FACET stage 2).

Five modules (skill analysis, scenario exploration, association and filtering, evolution and
recovery, information expansion), then the five dimensions with the integrated scenario C and its
intended difficulty, the solution and instruction references R_S and R_I, and the consistency
check between them. Each module is one LLM call recorded under the pair's subject; the prompts are
scenarios/prompts/reconstruct.*.md, and docs/prompts.md says what each is given and must return.
"""
from __future__ import annotations

import json

from . import llm, outputs
from .models import CandidatePair, Consistency, Scenario
from .prompt_inputs import pair_skills_json
from .services import _process, pair_subject


def _dump(model) -> str:
    return json.dumps(model.model_dump() if hasattr(model, "model_dump") else model, ensure_ascii=False, indent=1)


def reconstruct_scenario(scenario_id: int) -> str:
    def work(scenario: Scenario):
        pair = CandidatePair.objects.get(pk=scenario.pair_id)
        run = scenario.run
        client, recorder = llm.client_for(run)
        subject = pair_subject(pair)
        modules: dict[str, dict] = {}
        versions: dict[str, str] = {}

        def step(name: str, schema, **values):
            p = llm.prompt(f"reconstruct.{name}")
            versions[name] = p.version
            result = llm.stage_client(client, run, f"reconstruct.{name}").complete(
                stage=f"reconstruct.{name}", subject=subject, prompt_version=p.version,
                messages=p.messages(**values), schema=schema)
            modules[name] = result.parsed.model_dump()
            return result.parsed

        # Each module sees what it needs to stay grounded: the skills themselves, the seed, and every
        # earlier module's result it builds on (information expansion, e.g., the skills and the
        # setting as well as the workflow), so details are not lost from one module to the next.
        skills = pair_skills_json(pair)
        seed = pair.scenario_text
        analysis = step("skill_analysis", outputs.SkillAnalysisOut, scenario_text=seed, skills_json=skills)
        explored = step("scenario_exploration", outputs.ScenarioExplorationOut, scenario_text=seed, skills_json=skills,
                        skill_analysis_json=_dump(analysis))
        chosen = step("association_filtering", outputs.AssociationFilteringOut, scenario_text=seed,
                      skill_analysis_json=_dump(analysis), settings_json=_dump(explored))
        chosen_setting = next((s for s in explored.settings if s.title == chosen.chosen_setting), explored.settings[0])
        workflow = step("evolution_recovery", outputs.EvolutionRecoveryOut, chosen_json=_dump(chosen_setting),
                        association_json=_dump({"why": chosen.why}), skill_analysis_json=_dump(analysis))
        expansion = step("information_expansion", outputs.InformationExpansionOut, skills_json=skills,
                         skill_analysis_json=_dump(analysis), chosen_json=_dump(chosen_setting),
                         workflow_json=_dump(workflow))
        dims = step("dimensions", outputs.DimensionsOut, skills_json=skills,
                    modules_json=json.dumps(modules, ensure_ascii=False, indent=1))
        refs = step("references", outputs.ReferencesOut, scenario_json=_dump(dims), resources_json=_dump(expansion))
        check = step("consistency", outputs.ConsistencyOut, scenario_json=_dump(dims),
                     solution_json=_dump(refs.solution_reference), instruction_json=_dump(refs.instruction_reference))
        notes = f"Initial state: {check.shared_initial_state}\nOutcome: {check.shared_outcome}"
        if check.issues:
            notes += "\nIssues:\n" + "\n".join(f"- {i}" for i in check.issues)
        Scenario.objects.filter(pk=scenario.pk).update(
            title=dims.title[:300], modules={k: v for k, v in modules.items() if k not in ("dimensions", "references", "consistency")},
            goal=dims.goal, context=dims.context, capability=dims.capability, state=dims.state, io_tools=dims.io_tools,
            integrated=dims.integrated_scenario, solution_reference=refs.solution_reference.model_dump(),
            instruction_reference=refs.instruction_reference.model_dump(),
            consistency=Consistency.CONSISTENT if check.consistent else Consistency.INCONSISTENT,
            consistency_notes=notes, prompt_versions=versions,
            # blank when the model named none (answers recorded before v2): "not given" on the page
            difficulty=dims.difficulty or "", difficulty_rationale=dims.difficulty_rationale if dims.difficulty else "",
        )

    return _process(Scenario, scenario_id, work)
