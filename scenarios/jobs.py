"""Celery jobs of the scenario pipeline: thin wrappers that claim an item and call one service.

Names starting with `llm_` run on the LLM queue (see CELERY_TASK_ROUTES); the rest on default.
Services queue these jobs (`delay_on_commit`); after its item, a job queues the run's next advance
when the advance has something to do (services.run_to_advance).
"""
from celery import shared_task
from django.db import OperationalError, transaction

from facet_site.lib.llm import TransientLLMError

from . import services
from .models import CandidatePair, RunSkill, Scenario, Stage

RETRIEVAL_RECHECK_S = 15
# OperationalError: PostgreSQL refused a connection (a burst of threads over max_connections)
RETRY = dict(autoretry_for=(TransientLLMError, OperationalError), retry_backoff=5, retry_backoff_max=300, retry_jitter=True, max_retries=8)


@shared_task(name="scenarios.jobs.advance_run")
def advance_run(run_id: int) -> None:
    services.advance_run(run_id)


@shared_task(name="scenarios.jobs.retrieve")
def retrieve(run_id: int) -> None:
    if services.retrieve(run_id) is not None:
        advance_run.delay_on_commit(run_id)
    else:
        # Another job is retrieving (a minute or more of embedding): look again later rather than at
        # once, which made advance and retrieve chase each other hundreds of times a minute. The look
        # still comes, so a retrieval whose worker died is taken over once its claim is stale.
        transaction.on_commit(lambda: advance_run.apply_async((run_id,), countdown=RETRIEVAL_RECHECK_S))


def _then_advance(model, item_id: int) -> None:
    run_id = services.run_to_advance(model, item_id)
    if run_id:
        advance_run.delay_on_commit(run_id)


@shared_task(name="scenarios.jobs.llm_hypotheses", **RETRY)
def llm_hypotheses(run_skill_id: int) -> None:
    if services.extract_hypotheses(run_skill_id):
        _then_advance(RunSkill, run_skill_id)


@shared_task(name="scenarios.jobs.llm_judge", **RETRY)
def llm_judge(pair_id: int) -> None:
    if services.judge_pair(pair_id):
        _then_advance(CandidatePair, pair_id)


@shared_task(name="scenarios.jobs.llm_reconstruct", **RETRY)
def llm_reconstruct(scenario_id: int) -> None:
    if services.reconstruct_scenario(scenario_id):
        _then_advance(Scenario, scenario_id)


def job_for(kind: str):
    """The job that does one kind of work `services.advance_run` hands out."""
    return {Stage.HYPOTHESES: llm_hypotheses, Stage.JUDGE: llm_judge, Stage.RECONSTRUCTION: llm_reconstruct,
            "retrieve": retrieve}[kind]
