"""`facet demo` (what `make demo` runs before serving the site): the whole pipeline on this machine.

Users for every role, the bundled demo corpus ingested, a synthesis run replayed from the bundled
cassette, a Docker Engine (started here as root with scripts/start-dockerd, or the one DOCKER_HOST
names) with the base image, and task construction of the run's scenarios, for real, on a Celery
worker this command starts on the serverless filesystem broker and stops again. Every step reuses
what an earlier run left, so a second `make demo` adds nothing and is quick.

Without a Docker Engine everything else still runs; the construction stops at the first Docker step
and those tasks show as waiting for Docker until an engine answers.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import connection

from facet_site.services import ensure_user
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
# The synthesis run's limits; scripts/record-demo-cassette records with the same ones.
DEMO_LIMITS = {"max_pairs": 10}

NO_DOCKER_HOST = "unix:///run/facet-demo--no-docker.sock"  # never exists: --no-docker
ENABLE_DOCKER = (
    "To construct the tasks, start a Docker Engine: as root `bash scripts/start-dockerd` (installs Debian's\n"
    "docker.io and starts it), or set DOCKER_HOST to an engine you have; then run `make demo` again\n"
    "(or `.venv/bin/facet construct --resume`). See README, Docker."
)


def run_demo_rollouts(command: BaseCommand, run) -> None:
    """Hook: a rollout batch (k = 3) over the demo run's validated tasks with recorded model turns.

    Does nothing yet; the rollout batches (issue 6) add it here. `run` is the demo SynthesisRun; its
    tasks are constructed when this is called (validated ones have status "validated")."""
    return None


def database_url() -> str:
    """The database this process uses, as a URL for the worker it starts (tests use their own)."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    user = s.get("USER") or ""
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    at = "@" if user else ""
    return f"postgres://{user}{password}{at}{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


class Command(BaseCommand):
    help = ("Prepare the demo: users for every role, the bundled demo corpus, a synthesis run replayed from the "
            "bundled cassette, a Docker Engine and the base image, and task construction on a worker this command "
            "starts and stops. Idempotent: a second run reuses everything.")

    def add_arguments(self, parser):
        parser.add_argument("--inline", action="store_true",
                            help="Construct the tasks in this process instead of on a Celery worker.")
        parser.add_argument("--no-docker", action="store_true",
                            help="Neither start nor use a Docker Engine: the tasks wait for one.")
        parser.add_argument("--timeout", type=float, default=1800,
                            help="Seconds the worker may take for the construction before this process takes over.")

    def handle(self, *args, inline=False, no_docker=False, timeout=1800, **options):
        started = time.monotonic()
        for username, password, role in DEMO_USERS:
            ensure_user(username=username, password=password, role=role)
        before = Skill.objects.count()
        batch = skill_services.ingest_path(DEMO_CORPUS, label="demo-corpus")
        self.stdout.write(f"Demo corpus: {batch.message} ({Skill.objects.count() - before} new rows).")
        run = self.synthesis_run()
        if no_docker:
            # The Docker steps (here and on the worker, which inherits the environment) find no engine.
            os.environ["DOCKER_HOST"] = NO_DOCKER_HOST
            docker_problem = "--no-docker was given"
        else:
            docker_problem = self.docker_engine()
        self.construction(run, docker_ready=not docker_problem, inline=inline, timeout=timeout)
        self.report(run, docker_problem)
        run_demo_rollouts(self, run)
        self.stdout.write(self.style.SUCCESS(f"\nDemo ready in {time.monotonic() - started:.0f} s: "
                                             "facet is at http://127.0.0.1:8000"))
        for username, password, role in DEMO_USERS:
            self.stdout.write(f"  {role:<9} login: {username} / {password}")

    # --- synthesis --------------------------------------------------------------------------------

    def synthesis_run(self):
        """A synthesis run over the demo corpus, replayed from the bundled cassette (no LLM endpoint needed)."""
        from scenarios import services as run_services
        from scenarios.models import RunStatus, SynthesisRun

        existing = SynthesisRun.objects.filter(name=DEMO_RUN_NAME, status=RunStatus.SUCCEEDED).order_by("id").first()
        if existing:
            self.stdout.write(f"Synthesis run #{existing.pk} already done: {existing.message}")
            return existing
        admin = get_user_model().objects.filter(username="admin").first()
        run = run_services.start_run(name=DEMO_RUN_NAME, user=admin, enqueue=False, config={
            "limits": DEMO_LIMITS,
            "llm": {"provider": "replay", "cassette": str(DEMO_CASSETTE), "model": "scripted-demo"},
            # constructed below by this command, not by the end of the run
            "construction": {"auto": False},
        })
        run = run_services.execute_run_inline(run.pk)
        progress = run_services.run_progress(run)
        self.stdout.write(
            f"Synthesis run #{run.pk} ({run.get_status_display()}): {progress['calls']} LLM calls replayed, "
            f"{progress['accepted_pairs']} accepted pairs, {progress['consistent_scenarios']} reconstructed scenarios."
        )
        return run

    # --- Docker -----------------------------------------------------------------------------------

    def docker_engine(self) -> str:
        """"" when an engine answers and has the base image; else what is missing."""
        from facet_site.lib import docker_engine as de
        from tasks.apps import base_image

        try:
            client = de.connect(timeout_s=20)
        except de.EngineUnavailable as exc:
            if os.environ.get("DOCKER_HOST"):
                return str(exc)  # somebody else's engine: not ours to start
            if os.geteuid() != 0:
                return f"{exc} (only root can start one here)"
            self.stdout.write("Starting a Docker Engine (scripts/start-dockerd) ...")
            proc = subprocess.run(["bash", str(START_DOCKERD)], capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                return f"{exc}; scripts/start-dockerd failed: {proc.stderr.strip()[-600:]}"
            try:
                client = de.connect(timeout_s=20)
            except de.EngineUnavailable as again:
                return str(again)
        try:
            tag = base_image()
            if de.find_image(client, tag) is None:
                if tag != de.BASE_IMAGE_TAG:
                    return f"the base image {tag} (FACET_BASE_IMAGE) is missing; build or pull it first"
                self.stdout.write(f"Building the base image {tag} (debootstrap of Debian bookworm, a few minutes, "
                                  "once) ...")
                de.ensure_base_image(client, tag)
            info = client.version()
            self.stdout.write(f"Docker Engine {info.get('Version')} at {de.engine_url()}, base image {tag}.")
        except de.DockerEngineError as exc:
            return f"the Docker Engine answered but the base image is not usable: {exc}"
        finally:
            client.close()
        return ""

    # --- construction -----------------------------------------------------------------------------

    def construction(self, run, *, docker_ready: bool, inline: bool, timeout: float) -> None:
        from tasks import services as task_services
        from tasks.models import Task

        created = task_services.create_tasks(run)
        if docker_ready:
            # Tasks an earlier demo left waiting for Docker go back to work now that an engine answers.
            resumed = task_services.resume_waiting(run=run)
            if resumed:
                self.stdout.write(f"Resumed {resumed} task(s) that waited for a Docker Engine.")
        tasks = Task.objects.filter(run=run)
        open_ = tasks.filter(status__in=task_services.OPEN_STATUSES).count()
        if not open_:
            self.stdout.write(f"Task construction of run #{run.pk}: nothing left to do ({tasks.count()} tasks).")
            return
        if created:
            self.stdout.write(f"Task construction: {created} tasks from the run's consistent scenarios.")
        started = time.monotonic()
        if inline:
            task_services.construct_run(run.pk)
        else:
            self.construct_on_worker(run, timeout)
        self.stdout.write(f"Task construction took {time.monotonic() - started:.0f} s.")

    def construct_on_worker(self, run, timeout: float) -> None:
        """A Celery worker on all three queues, on the broker settings name (the filesystem one unless
        CELERY_BROKER_URL says otherwise), until no task of the run has work left; then stopped."""
        from tasks import jobs
        from tasks import services as task_services
        from tasks.models import Task

        log_path = Path(settings.DATA_DIR) / "demo-worker.log"
        env = dict(os.environ, DATABASE_URL=database_url(),
                   DJANGO_SETTINGS_MODULE=os.environ.get("DJANGO_SETTINGS_MODULE", "facet_site.settings"),
                   FACET_DATA_DIR=str(Path(settings.BROKER_DIR).parent))
        with open(log_path, "a") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "facet_site.cli", "worker", "-Q", "default,llm,docker", "-c", "2",
                 "--no-beat", "-l", "INFO", "-n", f"demo-{os.getpid()}@%h"],
                cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self.stdout.write(f"Started a Celery worker (pid {worker.pid}, log {log_path}).")
            try:
                finished = self._follow(run, worker, timeout, jobs)
            finally:
                self._stop(worker)
        if not finished:
            # The worker died or ran out of time: whatever it left half-done is finished here.
            from tasks.models import Validation, ValidationStatus

            Task.objects.filter(run=run, claimed_at__isnull=False).update(claimed_at=None)
            Validation.objects.filter(version__task__run=run, status=ValidationStatus.RUNNING).update(
                status=ValidationStatus.QUEUED)
            self.stdout.write("Finishing the construction in this process ...")
            task_services.construct_run(run.pk)

    def _follow(self, run, worker, timeout: float, jobs) -> bool:
        from tasks import services as task_services
        from tasks.models import Task

        jobs.advance_construction.delay(run.pk)
        deadline = time.monotonic() + timeout
        last, last_change = None, time.monotonic()
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                self.stderr.write(f"The worker exited ({worker.returncode}); see its log.")
                return False
            rows = list(Task.objects.filter(run=run).values_list("status", "step", "claimed_at"))
            state = sorted((s, st) for s, st, _ in rows)
            if state != last:
                last, last_change = state, time.monotonic()
                counts = {}
                for status, _ in state:
                    counts[status] = counts.get(status, 0) + 1
                self.stdout.write("  " + ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(counts.items())))
            if not any(status in task_services.OPEN_STATUSES for status, _, _ in rows):
                return True
            if time.monotonic() - last_change > 90:
                # Nothing moved for a while: hand the open steps out again (claims make it harmless).
                jobs.advance_construction.delay(run.pk)
                last_change = time.monotonic()
            time.sleep(1)
        self.stderr.write(f"The worker did not finish within {timeout:.0f} s.")
        return False

    @staticmethod
    def _stop(worker: subprocess.Popen) -> None:
        if worker.poll() is not None:
            return
        try:
            os.killpg(worker.pid, signal.SIGTERM)  # a warm shutdown: the job in hand finishes first
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
        except ProcessLookupError:
            pass

    # --- the report -------------------------------------------------------------------------------

    def report(self, run, docker_problem: str) -> None:
        from tasks import services as task_services
        from tasks.models import Task, TaskStatus

        tasks = list(Task.objects.filter(run=run).select_related("environment").order_by("id"))
        self.stdout.write(f"\nTasks of run #{run.pk}:")
        for task in tasks:
            self.stdout.write(f"  #{task.pk:<4} {task.get_status_display():<20} {task.name[:70]}")
            for line in task_story(task):
                self.stdout.write(f"          {line}")
        self.stdout.write("\nFunnel (Table 5):")
        for row in task_services.funnel(run):
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
