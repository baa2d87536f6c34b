"""Executable review: a reviewer re-runs a task version's validation on fresh containers
(re-validate) or N times in a row (flakiness), from the task page.

A Recheck owns its validations (Validation.recheck), all created when it is requested, and one
Docker-queue job (`tasks.jobs.docker_recheck`) runs them one after another with
`validating.validate`, which claims each validation with a conditional UPDATE, so a redelivered or
duplicated job never runs a validation twice. A re-check never changes the task's construction
status (it is evidence for the reviewer, not a step of construction); it does refresh the task's
summary columns, since the newest oracle trial says how many tests the task has.

Recheck.status moves queued -> running -> done | error, each by a conditional UPDATE. Without a
Docker engine the validation being run goes to waiting_for_docker and the re-check back to
queued, with the engine's message; `resume_queued` (job `tasks.jobs.resume_rechecks`) or the
page's "Try again" puts it back on the queue.

While a validation runs its trials are not in the database yet (validate stores them at the
end), so the page reads progress from the validation's logs directory as the files appear:
build.log after the build, trial_<name>/solution.log and verifier.log after each phase,
trial_<name>/result.json when a trial is over.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from facet_site import leases

from . import jobs, summary
from .models import (
    CheckKind,
    Recheck,
    RecheckStatus,
    Step,
    TaskVersion,
    Trial,
    TrialKind,
    Validation,
    ValidationStatus,
)
from .validating import validate

log = logging.getLogger(__name__)

DEFAULT_FLAKINESS_RUNS = 5
MAX_RUNS = 20
LOG_TAIL_BYTES = 6 * 1024
OPEN = [RecheckStatus.QUEUED, RecheckStatus.RUNNING]
UNFINISHED = [ValidationStatus.QUEUED, ValidationStatus.RUNNING, ValidationStatus.WAITING_FOR_DOCKER]


class RecheckRefused(ValueError):
    """The request cannot be honoured; the message says why, in the reviewer's words."""


# --- requesting and running -----------------------------------------------------------------------


def request_recheck(version: TaskVersion, *, kind: str, runs: int | None = None, user=None) -> Recheck:
    """A queued re-check with its validations; the caller queues its job (`queue`)."""
    if kind not in CheckKind.values:
        raise RecheckRefused(f"kind: must be one of {', '.join(CheckKind.values)}")
    if kind == CheckKind.REVALIDATE:
        runs = 1
    else:
        runs = DEFAULT_FLAKINESS_RUNS if runs is None else runs
        if not 2 <= runs <= MAX_RUNS:
            raise RecheckRefused(f"runs: a flakiness check runs between 2 and {MAX_RUNS} times, not {runs}")
    task = version.task
    if task.step != Step.DONE:
        # construction validates the current version itself and would take these validations
        raise RecheckRefused(f"Task #{task.pk} is still being constructed ({task.get_step_display()}); "
                             "re-check it once construction is over.")
    with transaction.atomic():
        TaskVersion.objects.select_for_update().filter(pk=version.pk).first()  # one request at a time per version
        running = version.rechecks.filter(status__in=OPEN).first()
        if running is not None:
            raise RecheckRefused(f"{running.get_kind_display()} #{running.pk} of v{version.number} is not "
                                 "finished yet; wait for it or try it again from its panel.")
        recheck = Recheck.objects.create(version=version, kind=kind, runs=runs, requested_by=user)
        Validation.objects.bulk_create([Validation(version=version, recheck=recheck, requested_by=user)
                                        for _ in range(runs)])
    return recheck


def queue(recheck: Recheck) -> None:
    """Put the re-check's job on the Docker queue once the request's transaction commits."""
    jobs.docker_recheck.delay_on_commit(recheck.pk)


def run_recheck(recheck_id: int, *, client=None) -> Recheck | None:
    """Run the re-check's validations that are still to run, one after another."""
    recheck = Recheck.objects.select_related("version").filter(pk=recheck_id).first()
    if recheck is None or recheck.status not in OPEN:
        return recheck
    # a validation whose worker died (its lease ran out) is taken over by validate's claim
    Recheck.objects.filter(pk=recheck_id, status=RecheckStatus.QUEUED).update(status=RecheckStatus.RUNNING, message="")
    task_id = recheck.version.task_id
    for validation_id in Validation.objects.filter(recheck_id=recheck_id).order_by("id").values_list("id", flat=True):
        try:
            validation = validate(validation_id, client=client)
        except Exception as exc:  # a bug, not the task's fault: say so on the page instead of hanging
            log.exception("re-check %s: validation %s failed", recheck_id, validation_id)
            Validation.objects.filter(pk=validation_id, status=ValidationStatus.RUNNING).update(
                status=ValidationStatus.ERROR, reason=f"{type(exc).__name__}: {exc}"[:5000], finished_at=timezone.now())
            continue
        if validation is None:
            continue  # finished already, or another worker is running it
        if validation.status == ValidationStatus.WAITING_FOR_DOCKER:
            Recheck.objects.filter(pk=recheck_id, status=RecheckStatus.RUNNING).update(
                status=RecheckStatus.QUEUED, message=f"Waiting for a Docker Engine: {validation.reason}"[:5000])
            return Recheck.objects.get(pk=recheck_id)
        summary.refresh_summary(task_id)
    return _finish(recheck_id)


def _finish(recheck_id: int) -> Recheck:
    validations = Validation.objects.filter(recheck_id=recheck_id)
    if validations.filter(status__in=UNFINISHED).exists():
        return Recheck.objects.get(pk=recheck_id)  # another job still runs one of them
    errors = validations.filter(status=ValidationStatus.ERROR).count()
    status, message = RecheckStatus.DONE, ""
    if errors:
        status = RecheckStatus.ERROR
        message = f"{errors} of {validations.count()} validation{'s' if errors > 1 else ''} hit an infrastructure error"
    Recheck.objects.filter(pk=recheck_id, status__in=OPEN).update(status=status, message=message,
                                                                  finished_at=timezone.now())
    return Recheck.objects.get(pk=recheck_id)


def resume_queued() -> int:
    """Queued re-checks (never started, or back from waiting for Docker) and running ones whose
    worker died (a validation's lease ran out, or none runs while some are still queued) go to
    the queue again. Returns how many were queued."""
    stale = Validation.objects.filter(leases.stalled(ValidationStatus.RUNNING))
    live = Validation.objects.filter(status=ValidationStatus.RUNNING).exclude(pk__in=stale)
    ids = list(Recheck.objects.filter(status=RecheckStatus.QUEUED).values_list("id", flat=True))
    ids += list(Recheck.objects.filter(status=RecheckStatus.RUNNING, validations__in=stale)
                .values_list("id", flat=True).distinct())
    # between two validations nothing runs: the re-check's own heartbeat is its last validation's
    between = (Recheck.objects.filter(status=RecheckStatus.RUNNING, validations__status=ValidationStatus.QUEUED)
               .exclude(validations__in=live)
               .exclude(validations__finished_at__gte=leases.cutoff()).values_list("id", flat=True).distinct())
    ids = list(dict.fromkeys(ids + list(between)))
    for recheck_id in ids:
        jobs.docker_recheck.delay_on_commit(recheck_id)
    return len(ids)


# --- what the page shows ----------------------------------------------------------------------------


def logs_dir(validation: Validation) -> Path:
    """Where validating.validate keeps the validation's logs (known before it finishes)."""
    return Path(validation.logs_dir) if validation.logs_dir else Path(settings.DATA_DIR) / "validations" / str(validation.pk)


def _tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str | None:
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size > limit:
                f.seek(size - limit)
            data = f.read(limit)
    except OSError:
        return None
    text = data.decode("utf-8", errors="replace")
    return text if size <= limit else f"[… {size - limit} bytes before]\n" + text


def trial_key(kind: str, index: int) -> str:
    return f"partial {index}" if kind == TrialKind.PARTIAL else kind


@dataclass
class TrialProgress:
    name: str
    done: bool
    reward: float | None = None
    passed: bool | None = None
    failure: str = ""
    reason: str = ""
    seconds: float | None = None
    solution_log: str | None = None
    verifier_log: str | None = None
    trial: Trial | None = None  # once stored
    tests: list = field(default_factory=list)


@dataclass
class RunProgress:
    number: int
    validation: Validation
    trials: list[TrialProgress]
    build_log: str | None = None

    @property
    def finished(self) -> bool:
        return self.validation.status in (ValidationStatus.DONE, ValidationStatus.ERROR)


def _from_logs(validation: Validation) -> tuple[str | None, list[TrialProgress]]:
    root = logs_dir(validation)
    build_log = _tail(root / "build.log")
    trials = []
    try:
        dirs = sorted((d for d in root.iterdir() if d.is_dir() and d.name.startswith("trial_")),
                      key=lambda d: d.stat().st_mtime)
    except OSError:
        dirs = []
    for d in dirs:
        name = d.name.removeprefix("trial_").replace("_", " ")
        progress = TrialProgress(name=name, done=False, solution_log=_tail(d / "solution.log"),
                                 verifier_log=_tail(d / "verifier.log"))
        try:
            result = json.loads((d / "result.json").read_text())
        except (OSError, ValueError):
            result = None
        if isinstance(result, dict):
            progress.done = True
            progress.reward, progress.passed = result.get("reward"), result.get("passed")
            progress.failure, progress.reason = result.get("failure") or "", result.get("reason") or ""
            progress.seconds = result.get("total_seconds")
        trials.append(progress)
    return build_log, trials


def run_progress(number: int, validation: Validation) -> RunProgress:
    if validation.status in (ValidationStatus.DONE, ValidationStatus.ERROR):
        trials = [TrialProgress(name=t.name, done=True, reward=t.reward, passed=t.passed, failure=t.failure,
                                reason=t.reason, seconds=t.seconds, trial=t, tests=list(t.tests.all()),
                                solution_log=t.solution_output or None, verifier_log=t.verifier_output or None)
                  for t in validation.trials.all()]
        return RunProgress(number, validation, trials, build_log=validation.build_log or None)
    if validation.status == ValidationStatus.RUNNING:
        build_log, trials = _from_logs(validation)
        return RunProgress(number, validation, trials, build_log=build_log)
    return RunProgress(number, validation, [])


def stored_validation(version: TaskVersion) -> Validation | None:
    """The version's own last finished validation (construction, import or the Validate button)."""
    return (version.validations.filter(recheck__isnull=True, status__in=[ValidationStatus.DONE, ValidationStatus.ERROR])
            .prefetch_related("trials__tests").order_by("-id").first())


def _trial_summary(trial: Trial | None) -> dict | None:
    if trial is None:
        return None
    tests = list(trial.tests.all())
    return {"reward": trial.reward, "passed": trial.passed, "failure": trial.failure, "seconds": trial.seconds,
            "tests_passed": sum(t.outcome == "passed" for t in tests), "tests": len(tests)}


def comparison(stored: Validation | None, new: Validation | None) -> list[dict]:
    """Trial by trial, the stored validation's result beside the re-check's."""
    if new is None or new.status not in (ValidationStatus.DONE, ValidationStatus.ERROR):
        return []
    old_trials = {trial_key(t.kind, t.index): t for t in (stored.trials.all() if stored else [])}
    new_trials = {trial_key(t.kind, t.index): t for t in new.trials.all()}
    rows = [{"name": "verdict",
             "old": None if stored is None else {"accepted": stored.accepted, "failure": stored.failure},
             "new": {"accepted": new.accepted, "failure": new.failure}, "verdict": True}]
    for name in list(dict.fromkeys([*old_trials, *new_trials])):
        old, cur = _trial_summary(old_trials.get(name)), _trial_summary(new_trials.get(name))
        same = old is not None and cur is not None and (old["passed"], old["reward"]) == (cur["passed"], cur["reward"])
        rows.append({"name": name, "old": old, "new": cur, "sides": [old, cur], "same": same})
    rows[0]["same"] = stored is not None and stored.accepted == new.accepted
    return rows


def flakiness(validations: list[Validation]) -> dict:
    """Pass rate over the finished runs and, per trial and test, the outcome of each run;
    `varied` marks those whose outcome (or presence, where the trial ran) differed."""
    finished = [v for v in validations if v.status == ValidationStatus.DONE]
    accepted = sum(1 for v in finished if v.accepted)
    grid: dict[tuple[str, str], dict[int, str | None]] = {}
    ran: dict[str, set[int]] = {}
    rewards: dict[str, dict[int, float | None]] = {}
    for n, v in enumerate(validations, 1):
        if v.status != ValidationStatus.DONE:
            continue
        for t in v.trials.all():
            key = trial_key(t.kind, t.index)
            ran.setdefault(key, set()).add(n)
            rewards.setdefault(key, {})[n] = t.reward
            for r in t.tests.all():
                grid.setdefault((key, r.name), {})[n] = r.outcome
    numbers = [n for n, v in enumerate(validations, 1) if v.status == ValidationStatus.DONE]
    tests = []
    for (key, name), outcomes in grid.items():
        cells = [outcomes.get(n) if n in ran[key] else "" for n in numbers]
        present = [outcomes.get(n) for n in sorted(ran[key])]
        tests.append({"trial": key, "name": name, "cells": cells, "varied": len(set(present)) > 1,
                      "passed": sum(o == "passed" for o in present), "runs": len(present)})
    tests.sort(key=lambda row: (not row["varied"], row["trial"], row["name"]))
    reward_rows = []
    for key, by_run in rewards.items():
        cells = [by_run.get(n, "") for n in numbers]
        present = [by_run[n] for n in sorted(by_run)]
        reward_rows.append({"trial": key, "cells": cells, "varied": len(set(present)) > 1})
    return {
        "finished": len(finished), "accepted": accepted, "numbers": numbers,
        "pass_rate": accepted / len(finished) if finished else None,
        "verdicts": [v.accepted for v in finished], "verdict_varied": 0 < accepted < len(finished),
        "tests": tests, "varied": [t for t in tests if t["varied"]], "rewards": reward_rows,
    }


def panel(recheck: Recheck) -> dict:
    """Everything the re-check panel shows."""
    validations = list(recheck.validations.order_by("id").prefetch_related("trials__tests"))
    runs = [run_progress(n, v) for n, v in enumerate(validations, 1)]
    waiting = next((v for v in validations if v.status == ValidationStatus.WAITING_FOR_DOCKER), None)
    finished = recheck.status in (RecheckStatus.DONE, RecheckStatus.ERROR)
    context = {
        "recheck": recheck, "runs": runs, "waiting": waiting, "finished": finished,
        "done_runs": sum(r.finished for r in runs), "current": next((r for r in runs if not r.finished), None),
        # nothing changes without a worker and an engine: the page stops polling
        "polling": not finished and waiting is None,
    }
    if recheck.kind == CheckKind.REVALIDATE:
        stored = stored_validation(recheck.version)
        context.update(stored=stored, comparison=comparison(stored, validations[0] if validations else None))
    else:
        context["flakiness"] = flakiness(validations)
    return context
