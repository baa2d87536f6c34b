"""Celery jobs of the scenario pipeline: thin wrappers that claim an item and call one service.

Names starting with `llm_` run on the LLM queue (see CELERY_TASK_ROUTES); the rest on default.
Services queue these jobs (`delay_on_commit`); after its item, a job queues the run's next advance
when the advance has something to do (services.run_to_advance).
"""
from celery import shared_task
from django.db import OperationalError, transaction

from facet_site import leases
from facet_site.lib.llm import TransientLLMError

from . import classifying, reconstruction, services, throughput
from .models import CandidatePair, RunSkill, Scenario, SkillClassification, Stage, SynthesisRun, WorkStatus

RETRIEVAL_RECHECK_S = 15
# OperationalError: PostgreSQL refused a connection (a burst of threads over max_connections)
RETRY = dict(autoretry_for=(TransientLLMError, OperationalError), retry_backoff=5, retry_backoff_max=300, retry_jitter=True, max_retries=8)


@shared_task(name="scenarios.jobs.advance_run")
def advance_run(run_id: int) -> None:
    services.advance_run(run_id)


@shared_task(name="scenarios.jobs.retrieve")
def retrieve(run_id: int) -> None:
    # the claim (retrieval_claimed_at) is renewed while this job embeds: a dead worker's is noticed
    # within a lease (facet_site/recovery.py), a live one is never taken over
    with leases.heartbeat(SynthesisRun, run_id, field="retrieval_claimed_at",
                          held={"stage": Stage.RETRIEVAL, "retrieval_claimed_at__isnull": False}):
        made = services.retrieve(run_id)
    if made is not None:
        advance_run.delay_on_commit(run_id)
    else:
        # Another job is retrieving (a minute or more of embedding): look again later rather than at
        # once, which made advance and retrieve chase each other hundreds of times a minute. The look
        # still comes, so a retrieval whose worker died is taken over once its claim is stale.
        transaction.on_commit(lambda: advance_run.apply_async((run_id,), countdown=RETRIEVAL_RECHECK_S))


def _leased(model, item_id: int):
    """The item's lease (its claimed_at) renewed while this job works on it; when its worker dies,
    beat gives the item back within a lease (facet_site/recovery.py)."""
    return leases.heartbeat(model, item_id, running=WorkStatus.RUNNING, field="claimed_at")


def _then_advance(model, item_id: int) -> None:
    run_id = services.run_to_advance(model, item_id)
    if run_id:
        advance_run.delay_on_commit(run_id)


@shared_task(name="scenarios.jobs.llm_hypotheses", **RETRY)
def llm_hypotheses(run_skill_id: int) -> None:
    with _leased(RunSkill, run_skill_id):
        done = services.extract_hypotheses(run_skill_id)
    if done:
        _then_advance(RunSkill, run_skill_id)


@shared_task(name="scenarios.jobs.llm_judge", **RETRY)
def llm_judge(pair_id: int) -> None:
    with _leased(CandidatePair, pair_id):
        done = services.judge_pair(pair_id)
    if done:
        throughput.reconstruct_when_accepted(pair_id)
        _then_advance(CandidatePair, pair_id)


@shared_task(name="scenarios.jobs.llm_reconstruct", **RETRY)
def llm_reconstruct(scenario_id: int) -> None:
    with _leased(Scenario, scenario_id):
        done = reconstruction.reconstruct_scenario(scenario_id)
    if done:
        _then_advance(Scenario, scenario_id)


@shared_task(name="scenarios.jobs.llm_classify_skill", **RETRY)
def llm_classify_skill(item_id: int) -> None:
    with _leased(SkillClassification, item_id):
        done = classifying.classify_skill(item_id)
    if done:
        _then_advance(SkillClassification, item_id)


def job_for(kind: str):
    """The job that does one kind of work `services.advance_run` hands out."""
    return {Stage.CLASSIFICATION: llm_classify_skill, Stage.HYPOTHESES: llm_hypotheses, Stage.JUDGE: llm_judge, Stage.RECONSTRUCTION: llm_reconstruct,
            "retrieve": retrieve}[kind]
