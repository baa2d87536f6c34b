"""The optional LLM classification stage of a synthesis run (config `skills.llm_classification`),
before the hypotheses, so they are written from the category the model chose.

Each run skill is one SkillClassification work item, claimed and recorded like every other stage's
(services._process: a conditional UPDATE, so a redelivered job does nothing twice). The call goes
through the run's recording client (stored as an LLMCall with stage and subject, cached, replayable
from a cassette, counted in the run's totals); skills.classification.llm_classify asks the model
with the trained classifier's answer as a hint, and skills.llm_categories stores what came back.
An answer outside the taxonomy, or one that stays malformed after the re-ask, is recorded on the
item and its call, and the skill keeps the classifier's answer. A reviewer's override is never
replaced, and a skill already overridden costs no call.
"""
from __future__ import annotations

from facet_site.lib.llm import InvalidOutput
from skills import classification, llm_categories
from skills.models import Category, CategorySource, Skill

from . import llm, services
from .models import ClassificationOutcome, LLMCall, LLMCallStatus, SkillClassification, Stage, SynthesisRun

LLM_STAGE = classification.LLM_STAGE  # "classify_category": LLMCall.stage and the cassette's key


def enabled(config: dict) -> bool:
    return bool(((config or {}).get("skills") or {}).get("llm_classification"))


def add_items(run: SynthesisRun, skill_ids: list[int]) -> None:
    """One work item per run skill; the run starts at this stage instead of the hypotheses."""
    SkillClassification.objects.bulk_create([SkillClassification(run=run, skill_id=i) for i in skill_ids],
                                            batch_size=2000)
    SynthesisRun.objects.filter(pk=run.pk, stage=Stage.HYPOTHESES).update(stage=Stage.CLASSIFICATION)
    run.refresh_from_db(fields=["stage"])


def _record(item_id: int, **fields) -> None:
    SkillClassification.objects.filter(pk=item_id).update(**fields)


def classify_skill(item_id: int) -> str:
    """Claim one item, ask the model, store the answer on the skill. Returns the item's new status."""

    def work(item: SkillClassification):
        run = item.run
        skill = Skill.objects.select_related("category", "category_runner_up").get(pk=item.skill_id)
        if skill.category_source == CategorySource.OVERRIDE:
            _record(item.pk, outcome=ClassificationOutcome.OVERRIDE, category=skill.category_id,
                    confidence=None, note="")
            return
        hint = llm_categories.classifier_answer(skill)
        if hint is None:
            raise ValueError("the skill has no embedding, so the classifier has no answer to start from")
        client, recorder = llm.client_for(run)
        try:
            answer = classification.llm_classify(
                llm.stage_client(client, run, LLM_STAGE), subject=services.skill_subject(skill),
                name=skill.name, description=skill.description, body=skill.body, hint=hint)
        except InvalidOutput as exc:
            call = recorder.last
            if call is not None and call.status != LLMCallStatus.INVALID:
                # the reply parsed, but named no taxonomy category: the call says so too
                LLMCall.objects.filter(pk=call.pk).update(status=LLMCallStatus.INVALID, error=str(exc)[:5000])
            kept = llm_categories.store_category(skill_id=skill.pk, answer=hint, source=CategorySource.CLASSIFIER)
            _record(item.pk, outcome=ClassificationOutcome.FALLBACK if kept else ClassificationOutcome.OVERRIDE,
                    category=_category_id(hint.category), confidence=hint.confidence,
                    note=(f"kept the classifier's answer: {exc}" if kept else
                          f"a reviewer's override arrived first; the model's answer was not usable: {exc}")[:5000],
                    prompt_version=call.prompt_version if call else "", llm_call=call)
            return
        call = recorder.last
        stored = llm_categories.store_category(skill_id=skill.pk, answer=answer, source=CategorySource.LLM)
        _record(item.pk, outcome=ClassificationOutcome.LLM if stored else ClassificationOutcome.OVERRIDE,
                category=_category_id(answer.category), confidence=answer.confidence,
                # not stored: a reviewer overrode the skill while the model was answering
                note="" if stored else "a reviewer's override arrived first; the answer was not stored",
                prompt_version=call.prompt_version if call else "", llm_call=call)

    return services._process(SkillClassification, item_id, work)


def _category_id(slug: str) -> int | None:
    return Category.objects.filter(slug=slug).values_list("pk", flat=True).first()
