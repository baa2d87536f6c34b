"""Celery worker processes the tests start: the one way to spawn one (`facet worker` on chosen
queues, its output in a log file, in a session of its own) and to stop it with everything it started."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class WorkerProcess:
    """One `facet worker` process. `poll()` is None while it runs; `log_tail()` is the end of its log."""

    def __init__(self, *, name: str, queues: str, log_path: Path, env: dict, concurrency: int = 1,
                 beat: bool = True):
        self.name, self.log_path = name, Path(log_path)
        with open(self.log_path, "w") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "facet_site.cli", "worker", "-Q", queues, "-c", str(concurrency),
                 *([] if beat else ["--no-beat"]), "-l", "INFO", "-n", f"{name}@%h"],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log()[-chars:]

    def children(self) -> list[int]:
        """The worker's child processes (its pool; with beat, the beat process too), from /proc."""
        pids: list[int] = []
        for task in Path(f"/proc/{self.proc.pid}/task").glob("*"):
            try:
                pids += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
        return pids

    def kill(self) -> None:
        """SIGKILL to the worker's whole process group: no warm shutdown, no acknowledgement."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self) -> None:
        """A warm shutdown of the worker's whole process group: the job in hand finishes first."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)

    def wait(self, timeout: float) -> None:
        """Wait for the worker to exit; kill its process group if it takes longer than `timeout`."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20) -> None:
        self.terminate()
        self.wait(timeout)


def worker_env(data_dir: Path, **extra: str) -> dict:
    """The environment of a worker serving this test process: its test database (a URL) and the
    broker folder settings fixed when they loaded (under FACET_DATA_DIR)."""
    from tests.conftest import database_url

    return dict(os.environ, DATABASE_URL=database_url(), DJANGO_SETTINGS_MODULE="facet_site.test_settings",
                FACET_DATA_DIR=str(data_dir), **extra)
