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


def _synthesis_runs() -> list[int]:
    """Running synthesis runs are advanced again: advance_run gives items whose claim went stale
    (run config stale_after_minutes) back to the queue and queues what is due."""
    from scenarios import jobs
    from scenarios.models import RunStatus, SynthesisRun

    ids = list(SynthesisRun.objects.filter(status=RunStatus.RUNNING).values_list("pk", flat=True))
    for pk in ids:
        jobs.advance_run.delay_on_commit(pk)
    return ids


def _construction() -> list[int]:
    from tasks import construction

    construction.resume_all()  # waiting tasks back to work, each run with open tasks advanced
    return []


def _rollouts() -> list[int]:
    from tasks import rollouts

    rollouts.resume()
    return []


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
    (ids; construction and rollouts queue their own and report nothing here)."""
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
    """At worker start: extraction areas and upload temp files no running job owns."""
    from skills import services as ingest

    return ingest.remove_leftovers()
