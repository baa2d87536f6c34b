"""Whether anyone runs the queued jobs: `facet serve` runs the site and a worker together and stops
both on Ctrl-C; the worker's heartbeat shows on the pages; a page says plainly when jobs wait and no
worker has been seen, instead of leaving them "Queued" forever."""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from facet_site.celery import app
from facet_site.models import WorkerHeartbeat
from tests.workers import REPO, worker_env


@pytest.fixture
def queued_job():
    """One job waiting on the default queue of this test process's broker (emptied before, since
    earlier tests may leave jobs no worker took, and after)."""
    def purge():
        with app.connection_for_write() as conn:
            for queue in ("default", "llm", "docker"):
                conn.default_channel.queue_purge(queue)

    purge()
    app.send_task("tasks.jobs.resume_waiting", queue="default")
    yield
    purge()


def banner(html: str) -> str:
    if 'class="notice worker-notice"' not in html:
        return ""
    return html.split('class="notice worker-notice"', 1)[1].split(">", 1)[1].split("</p>", 1)[0]


def test_a_page_says_no_worker_is_running_while_a_job_waits(client_as, queued_job):
    client = client_as("viewer")
    text = banner(client.get("/").content.decode())
    assert "No worker is running: 1 job waits on the default queue and will stay queued until one starts" in text
    assert "Start one with `.venv/bin/facet worker`" in text and "make serve" in text


def test_a_worker_seen_recently_silences_it_and_one_gone_quiet_does_not(client_as, queued_job):
    client = client_as("viewer")
    now = timezone.now()
    worker = WorkerHeartbeat.objects.create(hostname="w1@box", queues="default,llm,docker", started_at=now,
                                            seen_at=now)
    assert banner(client.get("/").content.decode()) == ""
    worker.seen_at = now - timedelta(seconds=settings.FACET_WORKER_SEEN_S + 5)
    worker.save()
    assert "No worker is running" in banner(client.get("/").content.decode())


def test_a_worker_on_other_queues_does_not_count_for_the_waiting_one(client_as, queued_job):
    now = timezone.now()
    WorkerHeartbeat.objects.create(hostname="docker-only@box", queues="docker", started_at=now, seen_at=now)
    text = banner(client_as("viewer").get("/").content.decode())
    assert text.startswith("No worker runs the default queue: 1 job waits on the default queue"), text


def test_no_banner_without_waiting_jobs(client_as):
    assert banner(client_as("viewer").get("/").content.decode()) == ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.django_db(transaction=True)
def test_facet_serve_runs_the_site_and_a_worker_and_ctrl_c_stops_both(tmp_path):
    port = free_port()
    data_dir = Path(settings.BROKER_DIR).parent
    out = tmp_path / "serve.out"
    with open(out, "w") as fh:
        # Started as a script's background job starts it (`facet serve &` in a non-interactive shell, or
        # under a runner launched so): SIGINT ignored. Ctrl-C must still stop it, as it says.
        serve = subprocess.Popen([sys.executable, "-m", "facet_site.cli", "serve", f"127.0.0.1:{port}"],
                                 cwd=REPO, env=worker_env(data_dir), stdout=fh, stderr=subprocess.STDOUT,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not WorkerHeartbeat.objects.filter(beat=True).exists():
            assert serve.poll() is None, out.read_text()
            time.sleep(0.5)
        # `facet worker` on every queue runs two Celery workers (a thread pool for llm): both are seen
        seen = {q for h in WorkerHeartbeat.objects.all() for q in h.queue_list}
        assert seen == {"default", "llm", "docker"} or time.sleep(15) or {
            q for h in WorkerHeartbeat.objects.all() for q in h.queue_list} == {"default", "llm", "docker"}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=10) as response:
            assert response.status == 200 and b"Log in" in response.read()
        printed = out.read_text()
        assert f"Serving facet at http://127.0.0.1:{port}/ with a worker on default,llm,docker and beat" in printed
        worker_pid = int(printed.split("(pid ", 1)[1].split(",", 1)[0])
    finally:
        serve.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal sends
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()  # and the worker, in a session of its own, so that nothing outlives the test
            printed = out.read_text()
            if "(pid " in printed:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(printed.split("(pid ", 1)[1].split(",", 1)[0]), signal.SIGKILL)
            pytest.fail(f"facet serve did not stop within 60 s of SIGINT; it printed:\n{printed}")
    printed = out.read_text()
    assert "Stopping the worker ...\nStopped." in printed, printed
    with pytest.raises(ProcessLookupError):
        os.kill(worker_pid, 0)
    assert not WorkerHeartbeat.objects.exists()  # a worker stopping on purpose removes its heartbeat
    log = (data_dir / "logs" / "worker.log").read_text()
    assert "SIGTERM" not in log and "exited with signal" not in log, log[-3000:]
