"""LLM work at scale on the Django side: the one endpoint limiter of this process (shared with
every other worker through Redis when configured), giving back the database connection while a
call waits on the endpoint, reconstruction that starts per accepted pair instead of after the
judge's last verdict, and the live figures a run's page shows (calls in flight, calls/s, tokens/s,
throttling, errors)."""
from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, Q, Sum
from django.utils import timezone

from facet_site.lib.llm import Limiter, MemoryStore, RedisStore

from .models import (
    CandidatePair,
    LLMCall,
    LLMCallStatus,
    PairVerdict,
    RunStatus,
    Scenario,
    Stage,
    SynthesisRun,
    WorkStatus,
)

log = logging.getLogger(__name__)

_limiter: Limiter | None = None
_limiter_lock = threading.Lock()
LIVE_WINDOW_S = 30  # calls/s and tokens/s are averaged over this many seconds


def limiter() -> Limiter:
    """One per process: its Redis connection pool is shared by the worker's threads."""
    global _limiter
    with _limiter_lock:
        if _limiter is None:
            store = RedisStore(settings.FACET_LLM_LIMITS_REDIS) if settings.FACET_LLM_LIMITS_REDIS else MemoryStore()
            _limiter = Limiter(settings.FACET_LLM_LIMITS, store)
        return _limiter


def release_connection() -> None:
    """Before a call waits on the endpoint (seconds to minutes), give this thread's database
    connection back: with 64 threads per worker and several workers, connections held across
    calls would exceed PostgreSQL's max_connections (100 by default). The next query reopens one.
    Inside a transaction (tests, atomic blocks) the connection must stay."""
    if not connection.in_atomic_block:
        connection.close()


def reconstruct_when_accepted(pair_id: int) -> int | None:
    """Hand out an accepted pair's scenario at once, while the judge goes on with other pairs: a
    scenario needs only its own pair's verdict, and its eight sequential calls are the run's longest
    chain, so starting it early fills the threads the judge's last round leaves idle. The scenario
    is made with ON CONFLICT DO NOTHING and moved pending -> queued by a conditional UPDATE, so a
    redelivered judge job or the advance that makes the remaining scenarios (services.
    _create_scenarios) never hands it out twice. Returns the scenario queued, if this call queued it."""
    from . import jobs  # at call time: jobs imports services, which imports this module

    pair = CandidatePair.objects.filter(pk=pair_id, verdict=PairVerdict.ACCEPTED, run__status=RunStatus.RUNNING,
                                        run__stage__in=[Stage.JUDGE, Stage.RECONSTRUCTION]).values("run_id").first()
    if pair is None:
        return None
    Scenario.objects.bulk_create([Scenario(run_id=pair["run_id"], pair_id=pair_id)], ignore_conflicts=True)
    scenario_id = Scenario.objects.values_list("pk", flat=True).get(pair_id=pair_id)
    if not Scenario.objects.filter(pk=scenario_id, status=WorkStatus.PENDING).update(
            status=WorkStatus.QUEUED, claimed_at=timezone.now()):
        return None
    jobs.llm_reconstruct.delay_on_commit(scenario_id)
    return scenario_id


def live_figures(run: SynthesisRun) -> dict:
    """The run's LLM traffic right now, from its stored calls and the endpoint limiter's state."""
    from .llm import llm_settings_for

    since = timezone.now() - timedelta(seconds=LIVE_WINDOW_S)
    recent = LLMCall.objects.filter(run=run, created_at__gte=since).aggregate(
        calls=Count("id", filter=~Q(status=LLMCallStatus.CACHED)),
        tokens=Sum("tokens_in", filter=~Q(status=LLMCallStatus.CACHED)),
        tokens_out=Sum("tokens_out", filter=~Q(status=LLMCallStatus.CACHED)),
        errors=Count("id", filter=Q(status=LLMCallStatus.ERROR)),
        throttled=Count("id", filter=Q(status=LLMCallStatus.ERROR) & (Q(error__contains="HTTP 429")
                                                                        | Q(error__contains="HTTP 503"))),
    )
    figures = {
        "calls_per_s": round((recent["calls"] or 0) / LIVE_WINDOW_S, 2),
        "tokens_per_s": round(((recent["tokens"] or 0) + (recent["tokens_out"] or 0)) / LIVE_WINDOW_S, 1),
        "errors_recent": recent["errors"] or 0,
        "throttled_recent": recent["throttled"] or 0,
        "errors_total": LLMCall.objects.filter(run=run, status=LLMCallStatus.ERROR).count(),
        "items_running": sum(m.objects.filter(run=run, status=WorkStatus.RUNNING).count()
                             for m in _item_models()),
        "window_s": LIVE_WINDOW_S,
        "endpoint": None,
        "shared": bool(settings.FACET_LLM_LIMITS_REDIS),
    }
    try:
        llm = llm_settings_for(run)
        if llm.provider == "openai" and llm.base_url:
            figures["endpoint"] = {"base_url": llm.base_url, **limiter().state(llm.base_url)}
    except Exception as exc:  # a page must show even when Redis or the run's endpoint is gone
        log.warning("no limiter state for run %s: %s", run.pk, exc)
    return figures


def _item_models():
    from .services import STAGE_ITEMS

    return STAGE_ITEMS.values()
