"""Workflows of the scenario–skill repository: starting and cancelling runs, the four stages and
the orchestration that hands their work to the workers (a run's config: run_config.py; the pair
JSONL: pairs_jsonl.py; the reconstruction stage's modules: reconstruction.py; the skills as the
prompts quote them: prompt_inputs.py).

Every stage's work item is claimed with a conditional UPDATE, processed by one service call and
recorded; `advance_run` reads the database to decide what comes next, so a redelivered or
duplicated job is harmless and a killed worker's items are picked up again.
"""
from __future__ import annotations

import logging
from datetime import timedelta
from typing import Callable

import numpy as np
from django.conf import settings
from django.db import OperationalError, transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from facet_site.lib.llm import InvalidOutput, PermanentLLMError, TransientLLMError
from skills.models import Skill

from . import llm, outputs
from .models import (
    OPEN_WORK,
    STAGE_ORDER,
    CandidatePair,
    Consistency,
    Judgement,
    LLMCall,
    PairSkill,
    PairSource,
    PairVerdict,
    RunSkill,
    RunStatus,
    Scenario,
    ScenarioHypothesis,
    SkillClassification,
    Stage,
    SynthesisRun,
    WorkStatus,
)
from .prompt_inputs import pair_skills_json, skill_json
from .run_config import RunConfigError, auto_construction, validate_config

log = logging.getLogger(__name__)

# --- start -------------------------------------------------------------------------------------


def select_skills(cfg: dict):
    qs = Skill.objects.current().accepted().exclude(embedding=None)
    cats = cfg["skills"]["categories"]
    if cats:
        qs = qs.filter(Q(category__slug__in=cats) | Q(category__parent__slug__in=cats))
    if cfg["skills"]["source"]:
        qs = qs.filter(source=cfg["skills"]["source"])
    return qs.order_by("id")[: cfg["skills"]["max_skills"]]


def start_run(*, name: str, user=None, config: dict | None = None, enqueue: bool = True,
              trusted: bool = False) -> SynthesisRun:
    """A queued run over the skills its config selects. `trusted` (the operator's CLI and demo, and
    tests) may point the run's "llm" section at a URL or cassette; users choose a named endpoint."""
    if not isinstance(name, str) or not name.strip():
        raise RunConfigError("name: give the run a name")
    if "\x00" in name:
        raise RunConfigError("name: must not contain NUL bytes")
    cfg = validate_config(config, trusted=trusted)
    skill_ids = list(select_skills(cfg).values_list("id", flat=True))
    if len(skill_ids) < 2:
        raise RunConfigError("skills: fewer than two accepted skills match this selection")
    with transaction.atomic():
        run = SynthesisRun.objects.create(name=name.strip()[:200], created_by=user, config=cfg, strategy=cfg["strategy"])
        RunSkill.objects.bulk_create([RunSkill(run=run, skill_id=i) for i in skill_ids], batch_size=2000)
        from . import classifying  # at call time: classifying imports this module

        if classifying.enabled(cfg):
            classifying.add_items(run, skill_ids)
        if enqueue:
            from . import jobs  # at call time: jobs imports this module

            jobs.advance_run.delay_on_commit(run.pk)
    return run


def cancel_run(*, run: SynthesisRun, user=None) -> SynthesisRun:
    """Workers stop taking the run's items; items already running finish and are kept."""
    now = timezone.now()
    SynthesisRun.objects.filter(pk=run.pk, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).update(
        status=RunStatus.CANCELLED, cancel_requested_at=now, finished_at=now,
        message=f"Cancelled by {getattr(user, 'username', None) or 'a user'}.",
    )
    for model in STAGE_ITEMS.values():
        model.objects.filter(run=run, status__in=[WorkStatus.PENDING, WorkStatus.QUEUED]).update(status=WorkStatus.SKIPPED)
    run.refresh_from_db()
    return run


# --- claiming ---------------------------------------------------------------------------------


def _claim(model, item_id: int) -> bool:
    """Take one item for this worker: queued (or pending, when run inline) → running, only while its run is live.

    The item's status is tested on its own row (`run_id IN (…)`, not a join on `run__status`): Django
    turns an UPDATE filtered across a join into `id IN (subquery)`, and PostgreSQL, re-checking a row
    another transaction just claimed, re-evaluates only the row's own conditions, so with the join two
    workers could both claim one item and both call the model."""
    live_runs = SynthesisRun.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).values("pk")
    return bool(model.objects.filter(
        pk=item_id, status__in=[WorkStatus.PENDING, WorkStatus.QUEUED], run_id__in=live_runs,
    ).update(status=WorkStatus.RUNNING, claimed_at=timezone.now()))


def _finish(model, item_id: int, status: str, error: str = ""):
    from django.db.models import F

    model.objects.filter(pk=item_id, status=WorkStatus.RUNNING).update(
        status=status, error=error[:5000], finished_at=timezone.now(), attempts=F("attempts") + 1,
    )


def _release(model, item_id: int, error: str):
    """A transient failure: give the item back to the queue; the job retries later."""
    from django.db.models import F

    model.objects.filter(pk=item_id, status=WorkStatus.RUNNING).update(
        status=WorkStatus.QUEUED, error=error[:5000], attempts=F("attempts") + 1,
    )


def tokens_used(run: SynthesisRun) -> int:
    agg = LLMCall.objects.filter(run=run).aggregate(i=Sum("tokens_in"), o=Sum("tokens_out"))
    return (agg["i"] or 0) + (agg["o"] or 0)


def _over_budget(run: SynthesisRun) -> bool:
    budget = run.limit("max_tokens", 0)
    return bool(budget) and tokens_used(run) >= budget


def _process(model, item_id: int, work: Callable[[object], None]) -> str:
    """Claim, run `work(item)`, record the outcome. Returns the item's new status (or "" if not claimed)."""
    if not _claim(model, item_id):
        return ""
    item = model.objects.select_related("run").get(pk=item_id)
    if _over_budget(item.run):
        _finish(model, item_id, WorkStatus.SKIPPED, "token budget reached")
        return WorkStatus.SKIPPED
    try:
        work(item)
    except (TransientLLMError, OperationalError) as exc:
        # OperationalError: the database refused a connection (max_connections) or dropped one; like
        # a busy endpoint, a reason to try the item again later, not to fail it
        _release(model, item_id, f"transient: {exc}")
        raise
    except (InvalidOutput, PermanentLLMError) as exc:
        _finish(model, item_id, WorkStatus.FAILED, f"{exc.__class__.__name__}: {exc}")
        return WorkStatus.FAILED
    except Exception as exc:  # recorded on the item, so one bad item never stalls the run
        log.exception("%s %s failed", model.__name__, item_id)
        _finish(model, item_id, WorkStatus.FAILED, f"{exc.__class__.__name__}: {exc}")
        return WorkStatus.FAILED
    _finish(model, item_id, WorkStatus.DONE)
    return WorkStatus.DONE


# --- subjects -----------------------------------------------------------------------------------
# LLM calls name the record they served by stable keys rather than database ids, so a recorded
# cassette replays on any database and a reviewer can find the calls behind a record.


def skill_subject(skill: Skill) -> str:
    return f"skill:{skill.key}"


def pair_subject(pair: CandidatePair) -> str:
    keys = sorted(Skill.objects.filter(pk__in=[int(i) for i in pair.skill_set.split(",")]).values_list("key", flat=True))
    return "pair:" + "+".join(keys)


# --- stage 1: hypotheses ------------------------------------------------------------------------


def extract_hypotheses(run_skill_id: int) -> str:
    def work(item: RunSkill):
        run, skill = item.run, Skill.objects.select_related("category").get(pk=item.skill_id)
        client, recorder = llm.client_for(run)
        p = llm.prompt("hypotheses")
        count = run.limit("hypotheses_per_skill", 3)
        result = llm.stage_client(client, run, "hypotheses").complete(
            stage="hypotheses", subject=skill_subject(skill), prompt_version=p.version,
            messages=p.messages(skill_json=skill_json(skill), count=count), schema=outputs.HypothesesOut,
        )
        with transaction.atomic():
            ScenarioHypothesis.objects.filter(run=run, skill=skill).delete()  # a redelivered job starts clean
            ScenarioHypothesis.objects.bulk_create([
                ScenarioHypothesis(
                    run=run, skill=skill, position=i, application_context=h.application_context,
                    user_goal=h.user_goal, initial_state=h.initial_state, desired_final_state=h.desired_final_state,
                    prompt_version=p.version, llm_call=recorder.last,
                )
                for i, h in enumerate(result.parsed.hypotheses[:count])
            ], ignore_conflicts=True)  # a worker that outlived its stale claim may have written them
            RunSkill.objects.filter(pk=item.pk).update(prompt_version=p.version)

    return _process(RunSkill, run_skill_id, work)


# --- stage 2: retrieval -------------------------------------------------------------------------


def retrieve(run_id: int) -> int | None:
    """Embed the run's hypotheses and group them into candidate pairs; the number made, or None when
    another job has the run's retrieval (or it is done). Idempotent per run."""
    from facet_site.lib.retrieval import build_candidate_groups
    from skills.services import embed

    claimed = SynthesisRun.objects.filter(
        pk=run_id, stage=Stage.RETRIEVAL, status=RunStatus.RUNNING, retrieval_claimed_at__isnull=True,
    ).update(retrieval_claimed_at=timezone.now())
    if not claimed:
        return None
    run = SynthesisRun.objects.get(pk=run_id)
    hyps = list(ScenarioHypothesis.objects.filter(run=run).order_by("id"))
    missing = [h for h in hyps if not h.embedding]
    for start in range(0, len(missing), 512):
        part = missing[start:start + 512]
        vectors = embed([h.text for h in part])
        for h, v in zip(part, vectors):
            h.embedding = v.astype(np.float32).tobytes()
        ScenarioHypothesis.objects.bulk_update(part, ["embedding"])
    created = 0
    if len(hyps) >= 2:
        ids = np.array([h.id for h in hyps], dtype=np.int64)
        skills = np.array([h.skill_id for h in hyps], dtype=np.int64)
        vectors = np.vstack([h.vector for h in hyps]).astype(np.float32)
        groups = build_candidate_groups(
            ids, skills, vectors, k=run.limit("k", 10), min_similarity=run.limit("min_similarity", 0.45),
            max_group_size=run.limit("max_group_size", 3), max_groups=run.limit("max_pairs", 500),
        )
        by_id = {h.id: h for h in hyps}
        with transaction.atomic():
            existing = set(CandidatePair.objects.filter(run=run).values_list("skill_set", flat=True))
            for g in groups:
                skill_set = ",".join(str(s) for s in sorted(g.skill_ids))
                if skill_set in existing:
                    continue
                linked = [by_id[h] for h in g.hypothesis_ids if h in by_id]
                text = "\n".join(
                    f"- {h.user_goal} (context: {h.application_context}; from: {h.initial_state}; to: {h.desired_final_state})"
                    for h in linked
                )
                # get_or_create: a retrieval job that outlived its stale claim may be adding the same pairs
                pair, made = CandidatePair.objects.get_or_create(run=run, skill_set=skill_set, defaults=dict(
                    scenario_text=text, score=round(float(g.score), 4), evidence=g.evidence, source=PairSource.RETRIEVAL,
                ))
                existing.add(skill_set)
                if not made:
                    continue
                PairSkill.objects.bulk_create([PairSkill(pair=pair, skill_id=s, position=i) for i, s in enumerate(g.skill_ids)])
                pair.hypotheses.set(linked)
                created += 1
    SynthesisRun.objects.filter(pk=run.pk, stage=Stage.RETRIEVAL).update(stage=Stage.JUDGE)
    return created


# --- stage 3: judge -----------------------------------------------------------------------------


def judge_pair(pair_id: int) -> str:
    def work(pair: CandidatePair):
        run = pair.run
        client, recorder = llm.client_for(run)
        p = llm.prompt("judge")
        result = llm.stage_client(client, run, "judge").complete(
            stage="judge", subject=pair_subject(pair), prompt_version=p.version,
            messages=p.messages(scenario_text=pair.scenario_text, skills_json=pair_skills_json(pair)),
            schema=outputs.JudgeOut,
        )
        out = result.parsed
        scores = [out.relevance.score, out.complementarity.score, out.non_redundancy.score, out.terminal_executability.score]
        # The judge's own verdict counts only when every criterion also clears the run's bar.
        accepted = out.verdict == "accept" and min(scores) >= run.limit("judge_min_score", 3)
        verdict = PairVerdict.ACCEPTED if accepted else PairVerdict.REJECTED
        with transaction.atomic():
            Judgement.objects.update_or_create(pair=pair, defaults=dict(
                relevance=out.relevance.score, complementarity=out.complementarity.score,
                non_redundancy=out.non_redundancy.score, executability=out.terminal_executability.score,
                rationales={
                    "relevance": out.relevance.rationale, "complementarity": out.complementarity.rationale,
                    "non_redundancy": out.non_redundancy.rationale, "executability": out.terminal_executability.rationale,
                },
                verdict=verdict, summary=out.summary, prompt_version=p.version, llm_call=recorder.last,
            ))
            CandidatePair.objects.filter(pk=pair.pk).update(verdict=verdict)

    return _process(CandidatePair, pair_id, work)


# --- stage 4: reconstruction: scenarios/reconstruction.py -------------------------------------


# --- orchestration ------------------------------------------------------------------------------

STAGE_ITEMS = {Stage.CLASSIFICATION: SkillClassification, Stage.HYPOTHESES: RunSkill, Stage.JUDGE: CandidatePair,
               Stage.RECONSTRUCTION: Scenario}


def _requeue_stale(run: SynthesisRun, model):
    """Items whose worker vanished (or whose message was lost) go back to pending."""
    cutoff = timezone.now() - timedelta(minutes=run.limit("stale_after_minutes", 30))
    model.objects.filter(run=run, status__in=[WorkStatus.QUEUED, WorkStatus.RUNNING], claimed_at__lt=cutoff).update(
        status=WorkStatus.PENDING
    )


def _mark_queued(run: SynthesisRun, model, limit: int = 2000) -> list[int]:
    """Pending items this call (and no concurrent one) moves to queued: only they get a job.

    Rows another advance holds are skipped (SKIP LOCKED) rather than waited for, and the status is
    checked again under the lock, so two advances running at once never hand out one item twice.
    SQLite has no row locks, but it runs one writing transaction at a time, which gives the same."""
    with transaction.atomic():
        ids = list(model.objects.select_for_update(skip_locked=True).filter(run=run, status=WorkStatus.PENDING)
                   .order_by("id").values_list("id", flat=True)[:limit])
        if ids:
            model.objects.filter(pk__in=ids, status=WorkStatus.PENDING).update(
                status=WorkStatus.QUEUED, claimed_at=timezone.now())
    return ids


def _create_scenarios(run: SynthesisRun) -> None:
    """One scenario per accepted pair. Concurrent advances may both see a pair without one, so the
    insert is ON CONFLICT DO NOTHING on the pair's unique key: the second advance adds nothing
    instead of failing with an IntegrityError."""
    have = set(Scenario.objects.filter(run=run).values_list("pair_id", flat=True))
    Scenario.objects.bulk_create([
        Scenario(run=run, pair_id=pid)
        for pid in CandidatePair.objects.filter(run=run, verdict=PairVerdict.ACCEPTED).values_list("id", flat=True)
        if pid not in have
    ], ignore_conflicts=True)


def _next_stage(run: SynthesisRun, current: str):
    following = STAGE_ORDER[STAGE_ORDER.index(current) + 1]
    SynthesisRun.objects.filter(pk=run.pk, stage=current).update(stage=following)
    run.refresh_from_db()


def advance_run(run_id: int) -> SynthesisRun:
    """Look at the run's records and queue the next work for the workers. Safe to call any number of
    times. A run that has succeeded goes on into task construction unless its config says
    "construction": {"auto": false}: the next job is named by settings.FACET_CONSTRUCTION_JOB, so this
    app knows nothing of how tasks are built, and that job is idempotent, so a repeat does no harm."""
    run = _advance(run_id, inline=False)
    if run.status == RunStatus.SUCCEEDED and auto_construction(run):
        from facet_site.celery import app

        # By name, so this app needs nothing of task construction. A signature is sent as app.send_task
        # sends, but runs in-process when jobs are eager (FACET_JOBS_EAGER), where send_task only queues.
        transaction.on_commit(lambda: app.signature(settings.FACET_CONSTRUCTION_JOB, args=[run_id]).delay())
    return run


def _hand_out(kind: str, item_id: int, *, inline: bool) -> None:
    """One piece of work: a job for the workers, or a direct call when the run executes in this process."""
    if not inline:
        from . import jobs  # at call time: jobs imports this module

        jobs.job_for(kind).delay_on_commit(item_id)
        return
    from .classifying import classify_skill
    from .reconstruction import reconstruct_scenario

    handlers = {Stage.CLASSIFICATION: classify_skill, Stage.HYPOTHESES: extract_hypotheses, Stage.JUDGE: judge_pair,
                Stage.RECONSTRUCTION: reconstruct_scenario, "retrieve": retrieve}
    try:
        handlers[kind](item_id)
    except TransientLLMError as exc:
        log.warning("transient LLM error on %s %s: %s", kind, item_id, exc)


def _advance(run_id: int, *, inline: bool) -> SynthesisRun:
    run = SynthesisRun.objects.get(pk=run_id)
    if run.is_finished:
        return run
    if run.status == RunStatus.QUEUED:
        SynthesisRun.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(status=RunStatus.RUNNING, started_at=timezone.now())
        run.refresh_from_db()
    for _ in range(len(STAGE_ORDER)):
        if _over_budget(run):
            for model in STAGE_ITEMS.values():
                model.objects.filter(run=run, status__in=[WorkStatus.PENDING, WorkStatus.QUEUED]).update(status=WorkStatus.SKIPPED)
            SynthesisRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
                status=RunStatus.SUCCEEDED, finished_at=timezone.now(),
                message=f"Stopped: the token budget of {run.limit('max_tokens'):,} was reached.")
            return SynthesisRun.objects.get(pk=run.pk)
        stage = run.stage
        if stage == Stage.DONE:
            failed = sum(m.objects.filter(run=run, status=WorkStatus.FAILED).count() for m in STAGE_ITEMS.values())
            SynthesisRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
                status=RunStatus.SUCCEEDED, finished_at=timezone.now(),
                message=f"Finished with {failed} failed item{'s' if failed != 1 else ''}." if failed else "Finished.")
            return SynthesisRun.objects.get(pk=run.pk)
        if stage == Stage.RETRIEVAL:
            stale = timezone.now() - timedelta(minutes=run.limit("stale_after_minutes", 30))
            SynthesisRun.objects.filter(pk=run.pk, stage=Stage.RETRIEVAL, retrieval_claimed_at__lt=stale).update(
                retrieval_claimed_at=None)  # its worker died: let another take it
            _hand_out("retrieve", run.pk, inline=inline)
            run.refresh_from_db()
            if run.stage == Stage.RETRIEVAL:  # the retrieval job runs elsewhere; it advances the run itself
                return run
            continue
        model = STAGE_ITEMS[stage]
        if stage == Stage.RECONSTRUCTION:
            _create_scenarios(run)
        _requeue_stale(run, model)
        for item_id in _mark_queued(run, model):
            _hand_out(stage, item_id, inline=inline)
        run.refresh_from_db()
        if run.is_finished:
            return run
        if model.objects.filter(run=run, status__in=OPEN_WORK).exists():
            return run
        _next_stage(run, stage)
    return run


def run_to_advance(model, item_id: int) -> int | None:
    """The item's run, when an advance has work after this item: its stage has no other item
    handed out (the stage may be over), or it has items not yet handed out (beyond one batch, or
    given back by a stale claim). Otherwise None: with a hundred items finishing a second, an
    advance after each would only queue jobs that find nothing to do. Safe against two last items
    finishing together: each looks after its own status is committed, so the later look sees both."""
    run_id = model.objects.values_list("run_id", flat=True).get(pk=item_id)
    items = model.objects.filter(run_id=run_id)
    if items.filter(status=WorkStatus.PENDING).exists() or not items.filter(
            status__in=[WorkStatus.QUEUED, WorkStatus.RUNNING]).exists():
        return run_id
    return None


def execute_run_inline(run_id: int) -> SynthesisRun:
    """Run every stage in this process (the CLI's --wait, tests and the demo without workers)."""
    for _ in range(10_000):
        run = _advance(run_id, inline=True)
        if run.is_finished:
            return run
        stuck = all(
            not m.objects.filter(run=run, status__in=[WorkStatus.PENDING]).exists() for m in STAGE_ITEMS.values()
        ) and run.stage not in (Stage.RETRIEVAL, Stage.DONE) and STAGE_ITEMS[run.stage].objects.filter(
            run=run, status__in=[WorkStatus.QUEUED, WorkStatus.RUNNING]).exists()
        if stuck:
            # transient failures left items queued: try them once more, then give up on them
            model = STAGE_ITEMS[run.stage]
            for item_id in model.objects.filter(run=run, status=WorkStatus.QUEUED).values_list("id", flat=True):
                _hand_out(run.stage, item_id, inline=True)
            model.objects.filter(run=run, status=WorkStatus.QUEUED).update(
                status=WorkStatus.FAILED, error="gave up after a transient error", finished_at=timezone.now())
    return SynthesisRun.objects.get(pk=run_id)


# --- progress -----------------------------------------------------------------------------------


def _counts(model, run) -> dict:
    rows = dict(model.objects.filter(run=run).values_list("status").annotate(n=Count("id")))
    total = sum(rows.values())
    return {
        "total": total, "done": rows.get(WorkStatus.DONE, 0), "failed": rows.get(WorkStatus.FAILED, 0),
        "skipped": rows.get(WorkStatus.SKIPPED, 0),
        "open": sum(rows.get(s, 0) for s in OPEN_WORK),
    }


def run_progress(run: SynthesisRun) -> dict:
    stages = []
    optional = [(Stage.CLASSIFICATION, SkillClassification)] if SkillClassification.objects.filter(run=run).exists() else []
    for stage, model in (*optional, (Stage.HYPOTHESES, RunSkill), (Stage.RETRIEVAL, None), (Stage.JUDGE, CandidatePair),
                         (Stage.RECONSTRUCTION, Scenario)):
        if model is None:
            pairs = CandidatePair.objects.filter(run=run).count()
            reached = STAGE_ORDER.index(run.stage) > STAGE_ORDER.index(Stage.RETRIEVAL)
            stages.append({"stage": stage.value, "label": stage.label, "total": pairs, "done": pairs if reached else 0,
                           "failed": 0, "skipped": 0, "open": 0 if reached else 1,
                           "hypotheses": ScenarioHypothesis.objects.filter(run=run).count()})
            continue
        stages.append({"stage": stage.value, "label": stage.label, **_counts(model, run)})
    by_stage = {}
    for row in LLMCall.objects.filter(run=run).values("stage").annotate(
            calls=Count("id"), tokens_in=Sum("tokens_in"), tokens_out=Sum("tokens_out"), cost_usd=Sum("cost_usd")):
        by_stage[row["stage"]] = {"calls": row["calls"], "tokens_in": row["tokens_in"] or 0,
                                  "tokens_out": row["tokens_out"] or 0, "cost_usd": round(row["cost_usd"] or 0.0, 6)}
    errors = []
    for model, prefix in ((SkillClassification, "skill"), (RunSkill, "skill"), (CandidatePair, "pair"),
                          (Scenario, "scenario")):
        for item in model.objects.filter(run=run, status=WorkStatus.FAILED).order_by("-finished_at")[:20]:
            subject_id = item.skill_id if prefix == "skill" else item.id
            errors.append({"subject": f"{prefix}:{subject_id}", "stage": model.__name__, "error": item.error})
    return {
        "stages": stages,
        "tokens_in": sum(v["tokens_in"] for v in by_stage.values()),
        "tokens_out": sum(v["tokens_out"] for v in by_stage.values()),
        "cost_usd": round(sum(v["cost_usd"] for v in by_stage.values()), 6),
        "calls": sum(v["calls"] for v in by_stage.values()),
        "calls_by_stage": by_stage,
        "errors": errors[:50],
        "accepted_pairs": CandidatePair.objects.filter(run=run, verdict=PairVerdict.ACCEPTED).count(),
        "consistent_scenarios": Scenario.objects.filter(run=run, consistency=Consistency.CONSISTENT).count(),
    }
