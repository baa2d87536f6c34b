"""Celery jobs of the scenario pipeline: thin wrappers that claim an item and call one service.

Names starting with `llm_` run on the LLM queue (see CELERY_TASK_ROUTES); the rest on default.
"""
from celery import shared_task

from facet_site.lib.llm import TransientLLMError

from . import services
from .models import RunStatus, Stage

RETRY = dict(autoretry_for=(TransientLLMError,), retry_backoff=5, retry_backoff_max=300, retry_jitter=True, max_retries=8)


def _dispatch(kind: str, item_id: int):
    {
        Stage.HYPOTHESES: llm_hypotheses, Stage.JUDGE: llm_judge, Stage.RECONSTRUCTION: llm_reconstruct,
        "retrieve": retrieve,
    }[kind].delay(item_id)


@shared_task(name="scenarios.jobs.advance_run")
def advance_run(run_id: int) -> None:
    run = services.advance_run(run_id, dispatch=_dispatch)
    # A finished run goes on into task construction unless its config says "construction": {"auto": false};
    # advance_construction is idempotent, so a repeated message does no harm.
    if run.status == RunStatus.SUCCEEDED and (run.config.get("construction") or {}).get("auto", True):
        from tasks import jobs as task_jobs

        task_jobs.advance_construction.delay(run_id)


@shared_task(name="scenarios.jobs.retrieve")
def retrieve(run_id: int) -> None:
    services.retrieve(run_id)
    advance_run.delay(run_id)


@shared_task(name="scenarios.jobs.llm_hypotheses", **RETRY)
def llm_hypotheses(run_skill_id: int) -> None:
    from .models import RunSkill

    if services.extract_hypotheses(run_skill_id):
        advance_run.delay(RunSkill.objects.values_list("run_id", flat=True).get(pk=run_skill_id))


@shared_task(name="scenarios.jobs.llm_judge", **RETRY)
def llm_judge(pair_id: int) -> None:
    from .models import CandidatePair

    if services.judge_pair(pair_id):
        advance_run.delay(CandidatePair.objects.values_list("run_id", flat=True).get(pk=pair_id))


@shared_task(name="scenarios.jobs.llm_reconstruct", **RETRY)
def llm_reconstruct(scenario_id: int) -> None:
    from .models import Scenario

    if services.reconstruct_scenario(scenario_id):
        advance_run.delay(Scenario.objects.values_list("run_id", flat=True).get(pk=scenario_id))
