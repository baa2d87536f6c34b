"""Faults around a validation, for real: the Docker daemon restarting in the middle of a trial, and a
solution printing more than the sandbox keeps in memory (the full log is still downloadable).

The restart test runs its own Docker daemon (scripts/start-dockerd with FACET_DOCKERD_ROOT: own data
root, exec root, containerd and socket) and restarts that one, so it never touches the machine's
engine that other test runs and workers share. It needs root and about a minute, so it is opt-in:
FACET_DOCKER_RESTART_TEST=1 (.ci/run sets it).
"""
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from facet_site.lib import docker_engine as de
from facet_site.lib import harbor
from tasks import construction, validating, versions, workspace
from tasks.models import Task, TaskStatus, ValidationStatus
from tests.conftest import REPO

pytestmark = pytest.mark.docker

RESTART_OPT_IN = os.environ.get("FACET_DOCKER_RESTART_TEST") == "1"
PRIVATE_ROOT = Path(os.environ.get("FACET_DOCKER_RESTART_ROOT", "/var/lib/facet-restart-test-engine"))


def imported_task(tmp_path, solve_sh: str, *, timeout: float = 120.0) -> Task:
    cfg = harbor.TaskConfig(agent_timeout_sec=timeout, verifier_timeout_sec=60.0)
    bundle = harbor.TaskBundle(name="fault", instruction="Write /app/out.txt containing ok.", config=cfg, files={
        "environment/Dockerfile": b"FROM facet-base:bookworm\nWORKDIR /app\n",
        "solution/solve.sh": solve_sh.encode(),
        "tests/test.sh": b"#!/bin/bash\nif grep -qx ok /app/out.txt 2>/dev/null; then echo 1; else echo 0; fi "
                         b"> /logs/verifier/reward.txt\n",
    })
    return versions.import_task_dir(harbor.write_task_dir(bundle, tmp_path / "fault"))


# --- the full trial log -------------------------------------------------------------------------

NUMBERS = 300_000  # `seq 1 300000` prints 1,988,895 bytes: nearly twice what a sandbox keeps in memory
FULL_OUTPUT = "".join(f"{i}\n" for i in range(1, NUMBERS + 1)).encode()


def _download(client, trial, name):
    response = client.get(f"/tasks/trials/{trial.pk}/logs/{name}")
    assert response.status_code == 200
    return b"".join(response.streaming_content)


@pytest.mark.django_db
def test_the_whole_output_of_a_solution_is_downloadable_while_the_database_keeps_a_capped_copy(
        engine, tmp_path, client_as):
    task = imported_task(tmp_path, f"#!/bin/bash\nseq 1 {NUMBERS}\necho ok > /app/out.txt\n")
    validation = validating.validate(validating.request_validation(task.current_version).pk)
    assert validation.accepted, validation.reason
    assert len(FULL_OUTPUT) > 1.8 * de.SandboxLimits().output_bytes
    oracles = list(validation.trials.filter(kind="oracle"))
    assert len(oracles) == 2  # the oracle runs twice in every validation; each keeps its own log
    for oracle in oracles:
        assert len(oracle.solution_output) < 40_000 and oracle.solution_output.startswith("1\n2\n3\n")
        assert "\n150000\n" not in oracle.solution_output  # the middle is not in the database ...
        log = _download(client_as("viewer"), oracle, "solution.log")
        assert log == FULL_OUTPUT  # ... but every byte is in the downloadable log


@pytest.mark.django_db
def test_a_trial_log_over_the_cap_is_cut_with_a_marker(engine, tmp_path, client_as, settings):
    settings.FACET_TRIAL_LOG_MAX_BYTES = 1_000_000
    task = imported_task(tmp_path, f"#!/bin/bash\nseq 1 {NUMBERS}\necho ok > /app/out.txt\n")
    validation = validating.validate(validating.request_validation(task.current_version).pk)
    assert validation.accepted, validation.reason
    for oracle in validation.trials.filter(kind="oracle"):
        log = _download(client_as("viewer"), oracle, "solution.log")
        kept, marker = log[:1_000_000], log[1_000_000:]
        assert kept == FULL_OUTPUT[:1_000_000]
        assert marker == (b"\n[facet: log truncated at 1000000 bytes; the command printed "
                          + str(len(FULL_OUTPUT)).encode() + b" bytes in all]\n")


# --- a real daemon restart ----------------------------------------------------------------------


@dataclass
class PrivateEngine:
    url: str
    env: dict

    def start(self) -> None:
        subprocess.run(["bash", str(REPO / "scripts" / "start-dockerd")], env=self.env, check=True, timeout=180,
                       capture_output=True)

    def pid(self) -> int | None:
        try:
            pid = int((PRIVATE_ROOT / "docker.pid").read_text().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """SIGTERM to the daemon we started, then wait until it has exited (it stops its containers)."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        raise AssertionError(f"dockerd {pid} did not stop within 90 s")

    def client(self):
        return de.connect(self.url)

    def sandboxes(self, owner_prefix: str) -> list[dict]:
        client = self.client()
        try:
            rows = client.api.containers(all=True, filters={"label": [f"{de.LABEL_SANDBOX}=1"]})
        finally:
            client.close()
        return [r for r in rows if r["Labels"].get(de.LABEL_OWNER, "").startswith(owner_prefix)]


@pytest.fixture(scope="module")
def private_engine():
    if os.geteuid() != 0:
        pytest.skip("starting a Docker daemon needs root")
    url = f"unix://{PRIVATE_ROOT}/docker.sock"
    env = dict(os.environ, FACET_DOCKERD_ROOT=str(PRIVATE_ROOT), DOCKER_HOST=url)
    engine = PrivateEngine(url, env)
    try:
        engine.start()
        client = engine.client()
        try:
            if de.find_image(client, de.BASE_IMAGE_TAG) is None:
                # The machine's engine has the base image (CI builds it); copy it over once. The
                # private data root is kept between runs, so later runs skip this.
                main = dict(os.environ)
                main.pop("DOCKER_HOST", None)
                save = subprocess.Popen(["docker", "save", de.BASE_IMAGE_TAG], stdout=subprocess.PIPE, env=main)
                subprocess.run(["docker", "load", "-q"], stdin=save.stdout, env=env, check=True, timeout=600,
                               capture_output=True)
                assert save.wait(timeout=60) == 0
        finally:
            client.close()
        yield engine
    finally:
        engine.stop()  # ours: it never outlives the module, whatever happened


def _solution_is_sleeping(engine: PrivateEngine, owner_prefix: str) -> bool:
    client = engine.client()
    try:
        for row in client.api.containers(filters={"label": [f"{de.LABEL_SANDBOX}=1",
                                                             "facet.validation.trial=oracle"]}):
            if not row["Labels"].get(de.LABEL_OWNER, "").startswith(owner_prefix):
                continue
            top = client.api.top(row["Id"])
            if any("sleep 8" in " ".join(p) for p in top.get("Processes") or []):
                return True
    finally:
        client.close()
    return False


@pytest.mark.skipif(not RESTART_OPT_IN, reason="restarts a (private) Docker daemon and needs root; "
                                               "opt in with FACET_DOCKER_RESTART_TEST=1 (.ci/run does)")
@pytest.mark.django_db(transaction=True)
def test_a_daemon_restart_mid_validation_is_recorded_cleaned_up_and_the_task_validates_again(
        private_engine, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "DOCKER_HOST", private_engine.url)
    # One command, so there are no partial solutions: only nop and oracle run.
    task = imported_task(tmp_path, "#!/bin/bash\nsleep 8 && echo ok > /app/out.txt\n")
    validation = validating.request_validation(task.current_version)
    owner = f"{workspace.worker_owner()}:validation-{validation.pk}:"
    outcome = {}

    def validate_in_the_background():
        try:
            outcome["validation"] = validating.validate(validation.pk)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = exc
        finally:
            connection.close()

    worker = threading.Thread(target=validate_in_the_background, daemon=True)
    worker.start()
    try:
        deadline = time.monotonic() + 120
        while not _solution_is_sleeping(private_engine, owner):
            assert worker.is_alive(), outcome
            assert time.monotonic() < deadline, "the oracle's solution never started"
            time.sleep(0.1)
        # The daemon goes down in the middle of solve.sh and comes back, as in a package upgrade.
        private_engine.stop()
    finally:
        private_engine.start()
    worker.join(120)
    assert not worker.is_alive() and "error" not in outcome, outcome

    waiting = outcome["validation"]
    assert waiting.status == ValidationStatus.WAITING_FOR_DOCKER
    assert waiting.reason.startswith("infrastructure: the Docker engine failed during the validation")
    assert "see README" in waiting.reason
    assert not waiting.trials.exists() and waiting.accepted is not True
    # The restart stopped the oracle's sandbox; it stays until the work resumes.
    assert all(row["State"] != "running" for row in private_engine.sandboxes(owner))

    assert construction.resume_waiting() == 0  # no construction task waits; the validation does
    waiting.refresh_from_db()
    assert waiting.status == ValidationStatus.QUEUED
    assert private_engine.sandboxes(owner) == []  # removed by the validation's owner label

    [again] = construction.validate_pending()
    assert again.pk == validation.pk and again.status == ValidationStatus.DONE and again.accepted, again.reason
    # nop and oracle run twice each (FACET_VALIDATION_TRIAL_RUNS), concurrently: the order varies
    assert sorted(again.trials.values_list("kind", "passed")) == [
        ("nop", True), ("nop", True), ("oracle", True), ("oracle", True)]
    assert Task.objects.get(pk=task.pk).status == TaskStatus.VALIDATED
    assert private_engine.sandboxes(f"{workspace.worker_owner()}:") == []
