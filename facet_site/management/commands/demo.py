"""`facet demo` (what `make demo` runs before serving the site): the whole pipeline on this machine.

Users for every role, the bundled demo corpus ingested, a synthesis run replayed from the bundled
cassette, a Docker Engine (started here as root with scripts/start-dockerd, or the one DOCKER_HOST
names) with the base image, and task construction of the run's scenarios, for real, on a Celery
worker this command starts on the serverless filesystem broker and stops again, then a rollout
batch (k = 3) over the validated tasks whose model turns are replayed from the same cassette, on
the same worker. Every step reuses what an earlier run left, so a second `make demo` adds nothing
and is quick.

With --external-workers nothing is started: the synthesis run, the construction and the rollouts
go to the broker CELERY_BROKER_URL names (Redis), for workers started elsewhere (e.g. one on the
llm and default queues and one on the docker queue); this command waits for them.

Without a Docker Engine everything else still runs; the construction stops at the first Docker step
and those tasks show as waiting for Docker until an engine answers; no rollout batch is started.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from facet_site.services import ensure_user
from facet_site.workers import WorkerProcess, logs_dir
from skills import services as skill_services
from skills.models import Skill

DEMO_CASSETTE = Path(settings.BASE_DIR) / "scenarios" / "fixtures" / "demo.cassette.jsonl"
DEMO_CORPUS = Path(settings.BASE_DIR) / "skills" / "demo_corpus"
START_DOCKERD = Path(settings.BASE_DIR) / "scripts" / "start-dockerd"
DEMO_USERS = [
    ("admin", "facet-admin", "admin"),
    ("reviewer", "facet-reviewer", "reviewer"),
    ("viewer", "facet-viewer", "viewer"),
]
DEMO_RUN_NAME = "demo"
# The synthesis run's limits; scripts/record-demo-cassette records with the same ones. The replay
# finds answers by the skills a pair names, so the demo's ten pairs must not depend on the last
# digits of an embedding: int8 MiniLM gives cosines that differ by up to ~0.01 between processors,
# and at the default threshold (0.45) one of the demo's triples passed by 0.007 and fell out on
# another machine. At 0.40 every cosine of the ten pairs clears the threshold by more than 0.05 and
# the ten are the same (tests/scenarios/test_demo_retrieval.py keeps it so).
DEMO_LIMITS = {"max_pairs": 10, "min_similarity": 0.40}

NO_DOCKER_HOST = "unix:///run/facet-demo--no-docker.sock"  # never exists: --no-docker
ENABLE_DOCKER = (
    "To construct the tasks, start a Docker Engine: as root `bash scripts/start-dockerd` (installs Debian's\n"
    "docker.io and starts it), or set DOCKER_HOST to an engine you have; then run `make demo` again\n"
    "(or `.venv/bin/facet construct --resume`). See README, Docker."
)


# The demo's rollout batch: k attempts per validated task, the model's turns replayed from the
# cassette (scripts/record-demo-cassette records them with the same settings).
DEMO_ROLLOUTS = {"attempts": 3, "max_turns": 12, "timeout_s": 600}
DEMO_BATCH_NAME = "demo rollouts"
_ROLLOUT_SUBJECT = re.compile(r":model:(.+):attempt:\d+:turn\d+$")


def demo_rollout_query(run) -> str:
    """The tasks the demo's rollout batch covers (the shared task filter's syntax)."""
    return f"run={run.pk}&status=validated"


def ensure_demo_users() -> None:
    """The demo's admin, reviewer and viewer, made only when missing: a password someone changed
    is never reset (the printed passwords are for the loopback demo only)."""
    for username, password, role in DEMO_USERS:
        if not get_user_model().objects.filter(username=username).exists():
            ensure_user(username=username, password=password, role=role)


def cassette_rollout_model(path: Path = DEMO_CASSETTE) -> str:
    """The model whose rollout turns the cassette holds (it is part of each turn's subject, so the
    batch must carry the same name); "" when it has none."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if '"rollout.turn"' not in line:
                continue
            entry = json.loads(line)
            if entry.get("stage") == "rollout.turn" and (m := _ROLLOUT_SUBJECT.search(entry.get("subject", ""))):
                return m.group(1)
    return ""


def run_demo_rollouts(command: "Command", run, *, docker_ready: bool = True) -> None:
    """A rollout batch (k = 3) over the demo run's validated tasks, the model's turns replayed from the
    bundled cassette, on the demo's worker (in this process with --inline, on the broker's workers with
    --external-workers); waits for it and prints the pass rates. An earlier demo's batch is reused
    (and finished if it was interrupted), so a second `make demo` adds none."""
    from tasks import rollouts
    from tasks.models import RolloutBatch, Task, TaskStatus

    batch = RolloutBatch.objects.filter(run=run, name=DEMO_BATCH_NAME).order_by("id").first()
    if batch is None:
        if not docker_ready:
            command.stdout.write("Rollouts: none started, they need a Docker Engine (and validated tasks).")
            return
        model = cassette_rollout_model()
        if not model:
            command.stdout.write(f"Rollouts: {DEMO_CASSETTE.name} holds no rollout turns; no batch started.")
            return
        if not Task.objects.filter(run=run, status=TaskStatus.VALIDATED).exists():
            command.stdout.write("Rollouts: no validated task to roll out.")
            return
        admin = get_user_model().objects.filter(username="admin").first()
        batch = rollouts.create_batch(query=demo_rollout_query(run), model=model, name=DEMO_BATCH_NAME, user=admin,
                                      run=run, llm={"provider": "replay", "cassette": str(DEMO_CASSETTE)}, trusted=True,
                                      **DEMO_ROLLOUTS)
        command.stdout.write(f"Rollouts: batch #{batch.pk}, {batch.selection['tasks']} validated tasks × "
                             f"{batch.attempts} attempts by {model} (turns replayed from the cassette).")
    unfinished = batch.trajectories.filter(status__in=rollouts.UNFINISHED)
    if unfinished.exists() and docker_ready:
        started = time.monotonic()
        _run_batch(command, batch)
        command.stdout.write(f"The rollouts took {time.monotonic() - started:.0f} s.")
    rollouts.finish_if_done(batch.pk)
    rollout_report(command, RolloutBatch.objects.get(pk=batch.pk))


def _run_batch(command: "Command", batch) -> None:
    from tasks import rollouts
    from tasks.models import Trajectory, TrajectoryStatus

    if command.mode != "external":
        # Nobody else runs this batch: what an interrupted demo left running or waiting starts again.
        batch.trajectories.filter(status__in=[TrajectoryStatus.RUNNING, TrajectoryStatus.WAITING_FOR_DOCKER]).update(
            status=TrajectoryStatus.PENDING, claimed_at=None, message="")
    if command.mode == "inline":
        rollouts.run_batch(batch.pk)
        return
    if command.worker is not None:
        command.worker.start()
        rollouts.start_batch(batch)
    else:
        rollouts.resume(batch, all_pending=True)
    deadline = time.monotonic() + command.timeout
    last = None
    while time.monotonic() < deadline:
        if command.worker is not None and command.worker.died():
            command.stderr.write(f"The worker exited ({command.worker.proc.returncode}); see its log.")
            break
        p = rollouts.progress(batch)
        line = f"  rollouts: {p['finished']}/{p['total']} finished, {p['passed']} passed, {p['running']} running"
        if line != last:
            last = line
            command.progress(line)
        if not Trajectory.objects.filter(batch=batch, status__in=rollouts.UNFINISHED).exists():
            command.progress(line, done=True)
            return
        time.sleep(1)
    else:
        command.stderr.write(f"The workers did not finish the rollouts within {command.timeout:.0f} s.")
    if command.mode == "external":
        raise CommandError(f"rollout batch #{batch.pk} did not finish on the workers")
    command.worker.stop()
    batch.trajectories.filter(status__in=rollouts.UNFINISHED).update(
        status=TrajectoryStatus.PENDING, claimed_at=None, message="")
    command.stdout.write("Finishing the rollouts in this process ...")
    rollouts.run_batch(batch.pk)


def rollout_report(command: "Command", batch) -> None:
    """Per task: attempts solved of k; then the batch's totals and where the analytics pages are."""
    from django.db.models import Count, Q, Sum

    from tasks import rollouts

    rows = (batch.trajectories.values("task_id", "task__name")
            .annotate(n=Count("id", filter=Q(status="done")), passed=Count("id", filter=Q(passed=True)),
                      errors=Count("id", filter=Q(status="error")))
            .order_by("task_id"))
    command.stdout.write(f"Rollout batch #{batch.pk} ({batch.get_status_display()}), "
                         f"{batch.model} × {batch.attempts}:")
    for r in rows:
        rate = f"{r['passed']}/{r['n']} passed" if r["n"] else "not run"
        errors = f", {r['errors']} error(s)" if r["errors"] else ""
        command.stdout.write(f"  #{r['task_id']:<4} {rate:<12}{errors} {r['task__name'][:64]}")
    p = rollouts.progress(batch)
    turns = batch.trajectories.aggregate(n=Sum("n_turns"))["n"] or 0
    rate = f"{p['pass_rate']:.0%}" if p["pass_rate"] is not None else "-"
    command.stdout.write(f"  {p['total']} trajectories, {p['done']} graded, {p['passed']} passed (pass rate {rate}), "
                         f"{turns} turns; waiting for Docker: {p['waiting']}")
    command.stdout.write("  Analytics: http://127.0.0.1:8000/tasks/analytics/ (pass@k, tags, commands), "
                         f"batch: http://127.0.0.1:8000/tasks/rollouts/{batch.pk}/")


def database_url() -> str:
    """The database this process uses, as a URL for the worker it starts (tests use their own)."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    user = s.get("USER") or ""
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    at = "@" if user else ""
    return f"postgres://{user}{password}{at}{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


class DemoWorker(WorkerProcess):
    """A Celery worker on all three queues, on the broker settings name (the filesystem one unless
    CELERY_BROKER_URL says otherwise), started when the demo first needs it and stopped at the end.
    Construction and rollouts share it; `facet serve` starts its own worker, with beat, afterwards."""

    def __init__(self, command: BaseCommand):
        self.command = command
        super().__init__(queues="default,llm,docker", name=f"demo-{os.getpid()}@%h", beat=False,
                         log_path=logs_dir() / "demo-worker.log")

    def start(self) -> None:
        if self.running():
            return
        # the environment as it is now: --no-docker has pointed DOCKER_HOST nowhere by then
        self.env = dict(os.environ, DATABASE_URL=database_url(),
                        DJANGO_SETTINGS_MODULE=os.environ.get("DJANGO_SETTINGS_MODULE", "facet_site.settings"),
                        FACET_DATA_DIR=str(Path(settings.BROKER_DIR).parent))
        super().start()
        self.command.stdout.write(f"  Started a Celery worker (pid {self.pid}, log {self.log_path}).")


@contextmanager
def third_party_output_in(path: Path):
    """Everything libraries log (faiss looking for AVX builds, ONNX quantization, deprecation
    warnings) goes to `path` instead of the terminal while the demo runs; the demo's own lines stay."""
    root = logging.getLogger()
    console = [h for h in root.handlers if type(h) is logging.StreamHandler]
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for h in console:
        root.removeHandler(h)
    root.addHandler(handler)
    logging.captureWarnings(True)
    # progress bars (the embedding model's "Loading weights") write to the terminal directly
    quiet = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
    saved = {name: os.environ.get(name) for name in quiet}
    os.environ.update(quiet)
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        logging.captureWarnings(False)
        root.removeHandler(handler)
        handler.close()
        for h in console:
            root.addHandler(h)


class Command(BaseCommand):
    help = ("Prepare the demo: users for every role, the bundled demo corpus, a synthesis run replayed from the "
            "bundled cassette, a Docker Engine and the base image, task construction and a rollout batch (k = 3) "
            "on a worker this command starts and stops. Idempotent: a second run reuses everything. "
            "Does not serve the site (`make demo` runs `facet runserver` after it).")

    def add_arguments(self, parser):
        parser.add_argument("--inline", action="store_true",
                            help="Construct the tasks and run the rollouts in this process instead of on a Celery "
                                 "worker.")
        parser.add_argument("--external-workers", action="store_true",
                            help="Start no worker: the synthesis run, the construction and the rollouts go to the "
                                 "broker CELERY_BROKER_URL names, for workers started elsewhere (facet worker -Q "
                                 "default,llm and facet worker -Q docker); this command waits for them.")
        parser.add_argument("--no-docker", action="store_true",
                            help="Neither start nor use a Docker Engine: the tasks wait for one.")
        parser.add_argument("--no-rollouts", action="store_true", help="Skip the rollout batch.")
        parser.add_argument("--timeout", type=float, default=1800,
                            help="Seconds the workers may take for each of the construction and the rollouts before "
                                 "this process takes over (with --external-workers: gives up).")

    def handle(self, *args, inline=False, external_workers=False, no_docker=False, no_rollouts=False, timeout=1800,
               **options):
        if inline and external_workers:
            raise CommandError("--inline and --external-workers exclude each other")
        started = time.monotonic()
        self.mode = "inline" if inline else ("external" if external_workers else "worker")
        self.timeout = timeout
        log_path = logs_dir() / "demo.log"
        self.stdout.write(f"facet demo: one line per step here; libraries' output and the details in {log_path}")
        with third_party_output_in(log_path):
            self.pipeline(no_docker=no_docker, no_rollouts=no_rollouts)
        from tasks.models import ReviewState, Task, TaskStatus

        waiting = Task.objects.filter(status=TaskStatus.VALIDATED, review_state=ReviewState.UNREVIEWED).count()
        self.stdout.write(self.style.SUCCESS(f"\nDemo ready in {time.monotonic() - started:.0f} s."))
        self.stdout.write(f"  review queue: {waiting} validated task{'s' if waiting != 1 else ''} waiting for a "
                          "decision at http://127.0.0.1:8000/tasks/queue/ (log in as reviewer)")
        for username, password, role in DEMO_USERS:
            self.stdout.write(f"  {role:<9} login: {username} / {password} (unless its password was changed)")
        self.stdout.write("  demo users are for the loopback demo only: never expose it to a network")
        self.stdout.write("  facet is at http://127.0.0.1:8000 once `facet serve` (the next step of `make demo`) runs")

    def pipeline(self, *, no_docker: bool, no_rollouts: bool) -> None:
        ensure_demo_users()
        before = Skill.objects.count()
        batch = skill_services.ingest_path(DEMO_CORPUS, label="demo-corpus")
        self.stdout.write(f"Ingest: demo corpus, {batch.message} ({Skill.objects.count() - before} new rows).")
        self.worker = DemoWorker(self) if self.mode == "worker" else None
        docker_host = settings.DOCKER_HOST
        try:
            run = self.synthesis_run()
            if no_docker:
                # The Docker steps find no engine: here (the setting, until this command ends) and on
                # the worker this command starts, whose settings read the environment it inherits.
                settings.DOCKER_HOST = os.environ["DOCKER_HOST"] = NO_DOCKER_HOST
                docker_problem = "--no-docker was given"
            else:
                docker_problem = self.docker_engine()
            self.construction(run, docker_ready=not docker_problem)
            self.report(run, docker_problem)
            if not no_rollouts:
                run_demo_rollouts(self, run, docker_ready=not docker_problem)
        finally:
            settings.DOCKER_HOST = docker_host
            if self.worker is not None:
                self.worker.stop()

    def progress(self, line: str, *, done: bool = False) -> None:
        """A line that changes as work moves: rewritten in place on a terminal, one line per change
        in a log."""
        if self.stdout.isatty():
            self.stdout.write(f"\r{line:<100}", ending="\n" if done else "")
            self.stdout.flush()
        elif not done:
            self.stdout.write(line)

    # --- synthesis --------------------------------------------------------------------------------

    def synthesis_run(self):
        """A synthesis run over the demo corpus, replayed from the bundled cassette (no LLM endpoint needed);
        in this process, or with --external-workers on the workers."""
        from scenarios import services as run_services
        from scenarios.models import RunStatus, SynthesisRun

        existing = SynthesisRun.objects.filter(name=DEMO_RUN_NAME, status=RunStatus.SUCCEEDED).order_by("id").first()
        if existing:
            self.stdout.write(f"Synthesis run #{existing.pk} already done: {existing.message}")
            return existing
        admin = get_user_model().objects.filter(username="admin").first()
        external = self.mode == "external"
        unfinished = SynthesisRun.objects.filter(
            name=DEMO_RUN_NAME, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).order_by("id").first()
        if external and unfinished is not None:
            run = unfinished  # an earlier demo's run, still on the workers: hand out its work again
            run_services.advance_run(run.pk)
        else:
            run = run_services.start_run(name=DEMO_RUN_NAME, user=admin, enqueue=external, trusted=True, config={
                "limits": DEMO_LIMITS,
                "llm": {"provider": "replay", "cassette": str(DEMO_CASSETTE), "model": "scripted-demo"},
                # constructed below by this command, not by the end of the run
                "construction": {"auto": False},
            })
        if external:
            self.stdout.write(f"Synthesis run #{run.pk} queued for the workers ...")
            run = self._wait_for_run(run)
        else:
            run = run_services.execute_run_inline(run.pk)
        progress = run_services.run_progress(run)
        self.stdout.write(
            f"Synthesis run #{run.pk} ({run.get_status_display()}): {progress['calls']} LLM calls replayed, "
            f"{progress['accepted_pairs']} accepted pairs, {progress['consistent_scenarios']} reconstructed scenarios."
        )
        if run.status != RunStatus.SUCCEEDED:
            raise CommandError(f"the synthesis run did not succeed: {run.message}")
        return run

    def _wait_for_run(self, run):
        from scenarios.models import SynthesisRun

        deadline = time.monotonic() + self.timeout
        last = None
        while time.monotonic() < deadline:
            run = SynthesisRun.objects.get(pk=run.pk)
            if run.stage != last:
                last = run.stage
                self.stdout.write(f"  stage {run.stage}")
            if run.is_finished:
                return run
            time.sleep(1)
        raise CommandError(f"the workers did not finish synthesis run #{run.pk} within {self.timeout:.0f} s "
                           "(are workers running on the default and llm queues of this broker?)")

    # --- Docker -----------------------------------------------------------------------------------

    def docker_engine(self) -> str:
        """"" when an engine answers and has the base image; else what is missing."""
        from facet_site.lib import docker_engine as de
        from tasks.apps import base_image

        try:
            client = de.connect(settings.DOCKER_HOST, timeout_s=20)
        except de.EngineUnavailable as exc:
            if settings.DOCKER_HOST:
                return str(exc)  # somebody else's engine: not ours to start
            if os.geteuid() != 0:
                return f"{exc} (only root can start one here)"
            missing = [pkg for pkg, program in (("docker.io", "dockerd"), ("debootstrap", "debootstrap"))
                       if not shutil.which(program)]
            installing = (f"installing Debian packages {', '.join(missing)} (apt-get, needs root), then "
                          if missing else "")
            self.stdout.write(f"Docker: {installing}starting dockerd as root (scripts/start-dockerd, log in "
                              f"{Path(settings.DATA_DIR) / 'dockerd.log'}) ...")
            proc = subprocess.run(["bash", str(START_DOCKERD)], capture_output=True, text=True, timeout=900)
            logging.getLogger("facet.demo").info("scripts/start-dockerd:\n%s%s", proc.stdout, proc.stderr)
            if proc.returncode != 0:
                return f"{exc}; scripts/start-dockerd failed: {proc.stderr.strip()[-600:]}"
            try:
                client = de.connect(settings.DOCKER_HOST, timeout_s=20)
            except de.EngineUnavailable as again:
                return str(again)
        try:
            tag = base_image()
            if de.find_image(client, tag) is None:
                if tag != de.BASE_IMAGE_TAG:
                    return f"the base image {tag} (FACET_BASE_IMAGE) is missing; build or pull it first"
                self.stdout.write(f"Base image: building {tag} with debootstrap (Debian bookworm; a few minutes, "
                                  "once) ...")
                de.ensure_base_image(client, tag, data_dir=Path(settings.DATA_DIR))
            info = client.version()
            self.stdout.write(f"Docker: Engine {info.get('Version')} at {de.engine_url(settings.DOCKER_HOST)}, "
                              f"base image {tag}.")
        except de.DockerEngineError as exc:
            return f"the Docker Engine answered but the base image is not usable: {exc}"
        finally:
            client.close()
        return ""

    # --- construction -----------------------------------------------------------------------------

    def construction(self, run, *, docker_ready: bool) -> None:
        from tasks import construction
        from tasks.models import OPEN_STATUSES, Task

        created = construction.create_tasks(run)
        if docker_ready:
            # Tasks an earlier demo left waiting for Docker go back to work now that an engine answers.
            resumed = construction.resume_waiting(run=run)
            if resumed:
                self.stdout.write(f"Resumed {resumed} task(s) that waited for a Docker Engine.")
        tasks = Task.objects.filter(run=run)
        open_ = tasks.filter(status__in=OPEN_STATUSES).count()
        if not open_:
            self.stdout.write(f"Task construction of run #{run.pk}: nothing left to do ({tasks.count()} tasks).")
            return
        if created:
            self.stdout.write(f"Task construction: {created} tasks from the run's consistent scenarios.")
        started = time.monotonic()
        if self.mode == "inline":
            construction.construct_run(run.pk)
        else:
            self.construct_on_workers(run)
        self.stdout.write(f"Task construction took {time.monotonic() - started:.0f} s.")

    def construct_on_workers(self, run) -> None:
        """On the demo's worker (or, with --external-workers, on whoever serves the broker) until no
        task of the run has work left."""
        from tasks import construction
        from tasks.models import Task, Validation, ValidationStatus

        if self.worker is not None:
            self.worker.start()
        if self._follow(run):
            return
        if self.mode == "external":
            raise CommandError(f"the workers did not finish the construction of run #{run.pk} in time")
        # The worker died or ran out of time: whatever it left half-done is finished here.
        self.worker.stop()
        Task.objects.filter(run=run, claimed_at__isnull=False).update(claimed_at=None)
        Validation.objects.filter(version__task__run=run, status=ValidationStatus.RUNNING).update(
            status=ValidationStatus.QUEUED)
        self.stdout.write("Finishing the construction in this process ...")
        construction.construct_run(run.pk)

    def _follow(self, run) -> bool:
        from tasks import construction
        from tasks.models import OPEN_STATUSES, Task

        construction.queue_advance(run.pk)
        deadline = time.monotonic() + self.timeout
        last, last_change = None, time.monotonic()
        while time.monotonic() < deadline:
            if self.worker is not None and self.worker.died():
                self.stderr.write(f"The worker exited ({self.worker.proc.returncode}); see its log.")
                return False
            rows = list(Task.objects.filter(run=run).values_list("status", "step", "claimed_at"))
            state = sorted((s, st) for s, st, _ in rows)
            if state != last:
                last, last_change = state, time.monotonic()
                counts = {}
                for status, _ in state:
                    counts[status] = counts.get(status, 0) + 1
                line = "  tasks: " + ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(counts.items()))
                self.progress(line)
            if not any(status in OPEN_STATUSES for status, _, _ in rows):
                self.progress(line, done=True)
                return True
            if time.monotonic() - last_change > 90:
                # Nothing moved for a while: hand the open steps out again (claims make it harmless).
                construction.queue_advance(run.pk)
                last_change = time.monotonic()
            time.sleep(1)
        self.stderr.write(f"The workers did not finish within {self.timeout:.0f} s.")
        return False

    # --- the report -------------------------------------------------------------------------------

    def report(self, run, docker_problem: str) -> None:
        from tasks.funnel import funnel
        from tasks.models import Task, TaskStatus

        tasks = list(Task.objects.filter(run=run).select_related("environment").order_by("id"))
        # What happened to each task (builds, repairs, why one was dropped) is for the log and the
        # task pages; the terminal gets the totals.
        details = logging.getLogger("facet.demo")
        details.info("Tasks of run #%s:", run.pk)
        for task in tasks:
            details.info("  #%-4s %-20s %s", task.pk, task.get_status_display(), task.name[:70])
            for line in task_story(task):
                details.info("          %s", line)
        statuses: dict[str, int] = {}
        for task in tasks:
            statuses[task.get_status_display().lower()] = statuses.get(task.get_status_display().lower(), 0) + 1
        self.stdout.write(f"Tasks of run #{run.pk}: " + ", ".join(f"{n} {s}" for s, n in statuses.items())
                          + " (each task's story: the log, or the Tasks page)")
        self.stdout.write("Funnel (Table 5):")
        for row in funnel(run):
            retention = f"{row['retention']:.1f}%" if row["retention"] is not None else ""
            self.stdout.write(f"  {row['label']:<32} {row['count']:>4} {retention:>8}")
        waiting = sum(1 for t in tasks if t.status == TaskStatus.WAITING_FOR_DOCKER)
        if docker_problem or waiting:
            self.stdout.write(self.style.WARNING(
                f"\nNo usable Docker Engine ({docker_problem or 'it went away during the construction'}).\n"
                f"{waiting} task(s) are waiting for a Docker Engine; the Tasks page shows them as "
                f"\"Waiting for a Docker Engine\".\n{ENABLE_DOCKER}"))


def task_story(task) -> list[str]:
    """What construction did to one task, in a line or two: builds, repairs, or why it was dropped."""
    lines = []
    env = task.environment
    if env is not None and env.repair_count:
        failed = env.builds.exclude(outcome="succeeded").order_by("attempt").first()
        lines.append(f"environment repaired {env.repair_count}x after: {(failed.reason if failed else '')[:90]}")
    for repair in task.repairs.order_by("number"):
        lines.append(f"repair {repair.number}: {repair.artifact} ({repair.routed_by}) after {repair.failure} "
                     f"-> {repair.outcome.replace('_', ' ')}")
    if task.discard_reason:
        lines.append(f"discarded: {task.discard_reason[:150]}")
    elif task.message and task.status not in ("validated",):
        lines.append(task.message[:150])
    return lines
