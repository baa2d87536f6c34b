"""Recovery after a worker dies: `resume_stalled` runs every kind of job's own resume, so one
periodic job (Celery beat inside `facet worker`) finds every stale record and queues it again
(docs/operations.md). Each resume is idempotent; one kind failing does not stop the others.

Wires the apps together, so it lives in facet_site: skills, scenarios and tasks each own their
resume; this module only calls them in turn.
"""
from __future__ import annotations

import logging

from django.db import transaction

log = logging.getLogger(__name__)


def _llm_queue_empty() -> bool:
    """Whether the broker holds no message on the llm queue: then a work item that says queued for
    longer than a lease lost its message (with a filesystem-broker worker that died holding it).
    Unknown (the broker did not answer) counts as not empty: better late than twice."""
    from facet_site.workers import queue_depths

    return queue_depths(["llm"]).get("llm") == 0


def _synthesis_runs() -> list[int]:
    """Each running synthesis run: items whose worker died (lease run out) back to pending, and a
    retrieval whose worker died given up; then the run is advanced again, which hands out what is
    pending. Returns the runs where something went back."""
    from scenarios import jobs
    from scenarios.models import RunStatus, SynthesisRun, WorkItem

    ids = list(SynthesisRun.objects.filter(status=RunStatus.RUNNING).values_list("pk", flat=True))
    lost = bool(ids) and _llm_queue_empty()
    stages = WorkItem.__subclasses__()  # every stage's work items, a stage added later included
    resumed = []
    for pk in ids:
        back = sum(model.requeue_stalled(pk, lost_messages=lost) for model in stages)
        if SynthesisRun.free_stalled_retrieval(pk) or back:
            resumed.append(pk)
        jobs.advance_run.delay_on_commit(pk)
    return resumed


def _construction() -> list[int]:
    """Tasks whose step's worker died are freed (with the validation it was running); then every
    waiting task goes back to work and each run with open tasks is advanced, which queues the
    freed tasks' steps. Returns the tasks freed."""
    from tasks import construction
    from tasks.models import Task

    freed = Task.free_stalled()
    construction.resume_all()
    return freed


def _rollouts() -> list[int]:
    """Trajectories whose worker died (no heartbeat for a lease) are queued again, then what
    waited for Docker. Returns the trajectories of dead workers."""
    from tasks import jobs, rollouts
    from tasks.models import Trajectory

    stalled = Trajectory.requeue_stalled()
    for pk in stalled:
        jobs.docker_rollout.delay_on_commit(pk)
    rollouts.resume()
    return stalled


def _kinds():
    from skills import services as ingest
    from tasks import exports, imports, rechecks, validating

    return {
        "ingest": ingest.resume_stalled,
        "synthesis": _synthesis_runs,
        "construction": _construction,
        "validations": validating.resume_stalled,
        "rechecks": lambda: [rechecks.resume_queued()],
        "rollouts": _rollouts,
        "exports": exports.resume_stalled,
        "imports": imports.resume_stalled,
    }


def resume_stalled() -> dict[str, list[int]]:
    """Every kind of job's stale records back to the queue. Returns what each kind queued again
    (ids of batches, runs, tasks, validations, trajectories, exports, imports; for re-checks, a
    count)."""
    queued: dict[str, list[int]] = {}
    for kind, resume in _kinds().items():
        try:
            with transaction.atomic():
                queued[kind] = resume()
        except Exception:  # the next beat tries again; the other kinds still resume
            log.exception("resuming stalled %s failed", kind)
    resumed = {k: v for k, v in queued.items() if v and k not in {"rechecks"}}
    if resumed:
        log.warning("queued again after their worker stopped: %s", resumed)
    return queued


def remove_leftovers() -> list[str]:
    """At worker start: extraction areas and upload temp files no running job owns, and on the
    filesystem broker the partial message files of writers that died mid-write."""
    from django.conf import settings

    from facet_site.lib import filesystem_broker
    from skills import services as ingest

    removed = ingest.remove_leftovers()
    if getattr(settings, "CELERY_BROKER_TRANSPORT", "") == filesystem_broker.ALIAS:
        removed += filesystem_broker.remove_stale_partials(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_out"])
    return removed
