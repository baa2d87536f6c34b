"""Celery jobs of the scenario pipeline: thin wrappers that claim an item and call one service.

Names starting with `llm_` run on the LLM queue (see CELERY_TASK_ROUTES); the rest on default.
Services queue these jobs (`delay_on_commit`); after its item, a job queues the run's next advance.
"""
from celery import shared_task

from facet_site.lib.llm import TransientLLMError

from . import services
from .models import CandidatePair, RunSkill, Scenario, Stage

RETRY = dict(autoretry_for=(TransientLLMError,), retry_backoff=5, retry_backoff_max=300, retry_jitter=True, max_retries=8)


@shared_task(name="scenarios.jobs.advance_run")
def advance_run(run_id: int) -> None:
    services.advance_run(run_id)


@shared_task(name="scenarios.jobs.retrieve")
def retrieve(run_id: int) -> None:
    services.retrieve(run_id)
    advance_run.delay_on_commit(run_id)


@shared_task(name="scenarios.jobs.llm_hypotheses", **RETRY)
def llm_hypotheses(run_skill_id: int) -> None:
    if services.extract_hypotheses(run_skill_id):
        advance_run.delay_on_commit(RunSkill.objects.values_list("run_id", flat=True).get(pk=run_skill_id))


@shared_task(name="scenarios.jobs.llm_judge", **RETRY)
def llm_judge(pair_id: int) -> None:
    if services.judge_pair(pair_id):
        advance_run.delay_on_commit(CandidatePair.objects.values_list("run_id", flat=True).get(pk=pair_id))


@shared_task(name="scenarios.jobs.llm_reconstruct", **RETRY)
def llm_reconstruct(scenario_id: int) -> None:
    if services.reconstruct_scenario(scenario_id):
        advance_run.delay_on_commit(Scenario.objects.values_list("run_id", flat=True).get(pk=scenario_id))


def job_for(kind: str):
    """The job that does one kind of work `services.advance_run` hands out."""
    return {Stage.HYPOTHESES: llm_hypotheses, Stage.JUDGE: llm_judge, Stage.RECONSTRUCTION: llm_reconstruct,
            "retrieve": retrieve}[kind]
