"""Harbor job import: the trials of Harbor job directories (another agent's runs of our tasks)
stored as rollout batches, each trial matched to our task version.

Each job directory is imported in ONE transaction, all or nothing. A job whose trials are
malformed (result.json not JSON, task_name missing, a wrongly typed field) is refused as a whole
with every problem named by trial, file and field; so is a partial job (trials without
result.json: still running, or interrupted) unless a partial import is asked for, in which case
the missing trials are listed in the batch report. Per-trial transactions would leave a batch
whose k attempts per task are silently incomplete, which is exactly what pass@k must not see.
Trials whose task is not ours are not errors: they are listed by name, with the reason, in the
batch report.
"""
from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from facet_site.lib import archives, harbor
from facet_site.lib import shell_commands
from facet_site.lib import rollout as ro
from facet_site.lib import validation as val

from . import summary
from .models import (
    AuditEvent,
    RolloutBatch,
    RolloutBatchStatus,
    Task,
    TaskVersion,
    TestResult,
    Trajectory,
    TrajectoryStatus,
    Trial,
    TrialKind,
    Turn,
)
from .versions import slug, version_bundle
from .workspace import data_dir

TURN_OUTPUT_CAP = 20_000


class ImportRefused(Exception):
    """Nothing of this job was imported; `problems` name trial, file, field and what is wrong."""

    def __init__(self, job: str, problems: list[dict]):
        self.job = job
        self.problems = problems
        first = problems[0] if problems else {}
        where = "/".join(p for p in (first.get("trial"), first.get("file")) if p)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{job}: {where + ': ' if where else ''}{first.get('error', 'refused')}{more}")


def _problem(trial: str, file: str, error: str, field: str = "") -> dict:
    return {"trial": trial, "file": file, "field": field or "", "error": error}


class VersionMatcher:
    """Our task version behind a Harbor trial, by (in order): the task directory Harbor read, if
    it is on this machine (its content hash, else the facet_version_hash in its task.toml);
    the task name and Harbor's checksum of the directory (every version of the tasks so named,
    then every version); the name alone when the result carries no checksum (older Harbor)."""

    def __init__(self):
        self._names: dict[str, list[int]] | None = None
        self._checksums: dict[int, str] = {}
        self._all_scanned = False
        self._by_checksum: dict[str, int] = {}

    def _tasks_named(self, name: str) -> list[int]:
        if self._names is None:
            self._names = {}
            for pk, task_name in Task.objects.values_list("id", "name"):
                for key in {task_name, slug(task_name)}:
                    self._names.setdefault(key, []).append(pk)
        return self._names.get(name, [])

    def _checksum(self, version: TaskVersion) -> str:
        if version.pk not in self._checksums:
            try:
                self._checksums[version.pk] = harbor.task_checksum(version_bundle(version))
            except (harbor.TaskFormatError, ValueError):
                self._checksums[version.pk] = ""
            self._by_checksum.setdefault(self._checksums[version.pk], version.pk)
        return self._checksums[version.pk]

    def match(self, trial: harbor.TrialRead) -> tuple[TaskVersion | None, str]:
        result = trial.result
        name = result.task_name.rsplit("/", 1)[-1]
        task_ids = self._tasks_named(name) or self._tasks_named(result.task_name)
        candidates = list(TaskVersion.objects.filter(task_id__in=task_ids).select_related("task").order_by("id"))
        local = Path(trial.task_path) if trial.task_path else None
        if local is not None and local.is_dir():
            try:
                bundle = harbor.read_task_dir(local)
            except (harbor.TaskFormatError, OSError, ValueError):
                bundle = None
            if bundle is not None:
                version = TaskVersion.objects.filter(content_hash=harbor.content_hash(bundle)).select_related("task").first()
                if version is not None:
                    return version, "content hash of the task directory"
                wanted = bundle.config.version_hash
                for version in candidates if wanted else []:
                    if version_bundle(version).config.version_hash == wanted:
                        return version, "facet_version_hash in task.toml"
        checksum = result.task_checksum
        if checksum:
            for version in candidates:
                if self._checksum(version) == checksum:
                    return version, "name and checksum"
            if not self._all_scanned:
                for version in TaskVersion.objects.select_related("task").exclude(pk__in=list(self._checksums)).iterator():
                    self._checksum(version)
                self._all_scanned = True
            pk = self._by_checksum.get(checksum)
            if pk is not None:
                return TaskVersion.objects.select_related("task").get(pk=pk), "checksum (the name differs)"
            if candidates:
                return None, (f"task_checksum {checksum[:16]}… matches none of the {len(candidates)} version(s) of "
                              f"our task(s) named {name!r} (changed since it was exported?)")
            return None, f"no task named {name!r} and no version with task_checksum {checksum[:16]}…"
        tasks = {v.task_id: v.task for v in candidates}
        if len(tasks) == 1:
            task = next(iter(tasks.values()))
            if task.current_version_id:
                return TaskVersion.objects.select_related("task").get(pk=task.current_version_id), \
                    "name only (the result has no task_checksum)"
        if len(tasks) > 1:
            return None, f"{len(tasks)} tasks are named {name!r} and the result has no task_checksum to tell them apart"
        return None, f"no task named {name!r}"


def _trial_records(batch: RolloutBatch, trial: harbor.TrialRead, version: TaskVersion, attempt: int, how: str):
    r = trial.result
    passed = r.reward is not None and r.reward >= 1.0
    failure = "" if passed else (r.exception or ("no_reward" if r.reward is None else "tests_failed"))
    tokens_in = r.tokens_in if r.tokens_in is not None else sum(t.tokens_in for t in trial.turns)
    tokens_out = r.tokens_out if r.tokens_out is not None else sum(t.tokens_out for t in trial.turns)
    row = Trial.objects.create(
        version=version, kind=TrialKind.ROLLOUT, index=attempt, reward=r.reward, passed=passed, failure=failure[:40],
        reason=(r.exception_message or "")[:5000], verifier_output=val.cap_text(r.verifier_stdout or "", 16 * 1024),
        solution_seconds=trial.agent_seconds, verifier_seconds=trial.verifier_seconds or 0,
        seconds=trial.seconds or 0, logs_path=str(trial.path))
    traj = Trajectory.objects.create(
        batch=batch, task_id=version.task_id, version=version, attempt=attempt, model=(r.model or "")[:200],
        agent=(r.agent_name or "")[:100], status=TrajectoryStatus.DONE, reward=r.reward, passed=passed,
        failure=failure[:40], message=(f"matched by {how}. " + (r.exception_message or ""))[:5000], trial=row,
        n_turns=min(len(trial.turns), 32767), seconds=trial.agent_seconds or trial.seconds or 0,
        prompt_tokens=max(0, tokens_in), completion_tokens=max(0, tokens_out), source_path=str(trial.path)[:500],
        finished_at=r.finished_at or timezone.now())
    TestResult.objects.bulk_create([TestResult(trial=row, name=t.name[:500], outcome=t.outcome[:10],
                                               message=(t.message or "")[:5000]) for t in r.test_results[:2000]])
    turns = []
    for t in trial.turns[:32767]:
        records = [shell_commands.command_record(c) for c in t.commands]
        turns.append(Turn(trajectory=traj, index=t.index, analysis=t.analysis, plan=t.plan, commands=records,
                          output=val.cap_text(t.output, TURN_OUTPUT_CAP), state=ro.turn_state([c["kind"] for c in records]),
                          task_complete=t.task_complete, prompt_tokens=t.tokens_in, completion_tokens=t.tokens_out))
    Turn.objects.bulk_create(turns, batch_size=1000)
    return traj


def import_job(path: Path, *, user=None, allow_partial: bool = False, name: str = "") -> RolloutBatch:
    """One Harbor job directory as a RolloutBatch(source="harbor"), all or nothing (module
    docstring). Raises ImportRefused with every problem when it cannot be imported whole."""
    job = harbor.read_job(Path(path))
    problems = [_problem(e.trial, e.file, e.message, e.field or "") for e in job.errors]
    if job.incomplete and not allow_partial:
        problems += [_problem(t, "result.json", "missing: the trial has not finished (the job is still running or was "
                                                "interrupted); import it when it has, or ask for a partial import")
                     for t in job.incomplete]
    if not job.trials and not problems:
        problems.append(_problem("", ".", "no trials: expected <job>/<trial>/result.json"))
    if problems:
        raise ImportRefused(job.name, problems)
    earlier = RolloutBatch.objects.filter(source="harbor", config__job_id=job.job_id).first()
    if earlier is not None:
        raise ImportRefused(job.name, [_problem("", "result.json", f"this job ({job.job_id}) was already imported as "
                                                                   f"batch #{earlier.pk}", "id")])
    matcher = VersionMatcher()
    matches, unmatched = [], []
    for trial in job.trials:
        version, how = matcher.match(trial)
        if version is None:
            unmatched.append({"trial": trial.name, "task_name": trial.result.task_name, "reason": how})
        else:
            matches.append((trial, version, how))
    models = sorted({t.result.model for t, _, _ in matches if t.result.model})
    agents = sorted({t.result.agent_name for t, _, _ in matches if t.result.agent_name})
    attempts: dict[int, int] = {}
    with transaction.atomic():
        batch = RolloutBatch.objects.create(
            name=(name or job.name)[:200], source="harbor", model=(models[0] if len(models) == 1 else
                                                                   ("mixed" if models else ""))[:200],
            agent=(agents[0] if len(agents) == 1 else ("mixed" if agents else "unknown"))[:100],
            attempts=0, status=RolloutBatchStatus.DONE, created_by=user, finished_at=timezone.now(),
            selection={"path": str(job.path)},
            config={"job_id": job.job_id, "models": models, "agents": agents},
            report={"trials": len(job.trials), "matched": len(matches), "unmatched": unmatched,
                    "incomplete": job.incomplete, "warnings": job.warnings[:200],
                    "matched_by": _count_by(how for _, _, how in matches)},
            message=f"{len(matches)} of {len(job.trials)} trials matched our tasks"
                    + (f", {len(job.incomplete)} incomplete trials left out" if job.incomplete else ""))
        for trial, version, how in matches:
            attempt = attempts.get(version.task_id, 0)
            attempts[version.task_id] = attempt + 1
            _trial_records(batch, trial, version, attempt, how)
        RolloutBatch.objects.filter(pk=batch.pk).update(attempts=max(attempts.values(), default=0))
        AuditEvent.objects.create(actor=user if getattr(user, "is_authenticated", False) else None,
                                  action="rollout.import", object_type="rollout_batch", object_id=str(batch.pk),
                                  after={"path": str(job.path), "matched": len(matches), "unmatched": len(unmatched)})
    for task_id in attempts:
        summary.refresh_summary(task_id)
    return RolloutBatch.objects.get(pk=batch.pk)


def _count_by(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


@dataclass
class ImportOutcome:
    batches: list[RolloutBatch]
    refused: list[ImportRefused]


def import_results(path: Path, *, user=None, allow_partial: bool = False, name: str = "") -> ImportOutcome:
    """Every Harbor job directory at or below `path` (a job, a jobs/ directory, an unpacked
    archive), each in its own transaction."""
    path = Path(path)
    if not path.exists():
        raise ImportRefused(path.name or str(path), [_problem("", str(path), "no such file or directory")])
    jobs = harbor.find_job_dirs(path)
    if not jobs:
        raise ImportRefused(path.name, [_problem("", ".", "no Harbor job directory here: expected "
                                                          "<job>/<trial>/result.json (harbor-format.md §4.4)")])
    outcome = ImportOutcome(batches=[], refused=[])
    for job_dir in jobs:
        try:
            outcome.batches.append(import_job(job_dir, user=user, allow_partial=allow_partial,
                                              name=name if len(jobs) == 1 else ""))
        except ImportRefused as exc:
            outcome.refused.append(exc)
    return outcome


def import_upload(upload, *, user=None, allow_partial: bool = False) -> ImportOutcome:
    """An uploaded archive (.zip, .tar.gz, ...) of one or more job directories: unpacked into the
    data directory (kept: the trials' logs stay readable) and imported. An archive with unsafe
    or broken members is refused before anything is read from it."""
    name = Path(getattr(upload, "name", "") or "upload").name
    if not archives.is_archive(Path(name)):
        raise ImportRefused(name, [_problem("", name, "not an archive: upload a .zip or .tar.gz of the job directory")])
    if getattr(upload, "size", 0) > settings.FACET_INGEST_MAX_UPLOAD_BYTES:
        raise ImportRefused(name, [_problem("", name, f"over {settings.FACET_INGEST_MAX_UPLOAD_BYTES:,} bytes")])
    area = data_dir("rollout-imports", uuid.uuid4().hex[:12])
    archive = area / name
    with open(archive, "wb") as fh:
        for chunk in upload.chunks():
            fh.write(chunk)
    root = area / "unpacked"
    root.mkdir()
    problems = archives.unpack(archive, root, max_total_bytes=settings.FACET_INGEST_MAX_ARCHIVE_BYTES)
    archive.unlink(missing_ok=True)
    if problems:
        shutil.rmtree(area, ignore_errors=True)
        raise ImportRefused(name, [_problem("", getattr(p, "path", "") or name, getattr(p, "message", str(p)))
                                   for p in problems])
    outcome = import_results(root, user=user, allow_partial=allow_partial)
    if not outcome.batches:
        shutil.rmtree(area, ignore_errors=True)
    return outcome


def job_report(batch: RolloutBatch) -> dict:
    """The import report for pages, API and CLI."""
    report = batch.report or {}
    return {"trials": report.get("trials", 0), "matched": report.get("matched", 0),
            "unmatched": report.get("unmatched", []), "incomplete": report.get("incomplete", []),
            "warnings": report.get("warnings", []), "matched_by": report.get("matched_by", {})}


def problems_json(exc: ImportRefused) -> str:
    return json.dumps(exc.problems, indent=1)
