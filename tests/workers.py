"""Celery worker processes the tests start: the one way to spawn one (`facet worker` on chosen
queues, its output in a log file, in a session of its own), to stop it with everything it started,
and to wait for what its jobs write while it runs."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

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
        try:  # the group, even when the worker itself has exited: its pools may not have
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def terminate(self) -> None:
        """A warm shutdown of the worker's whole process group: the job in hand finishes first."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)

    def wait(self, timeout: float) -> None:
        """Wait for the worker to exit; kill its process group if it takes longer than `timeout`.
        Whatever of the group outlives the worker (a pool still in warm shutdown, holding a
        database connection) is killed too, so no process of this worker reaches the next test."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 20) -> None:
        self.terminate()
        self.wait(timeout)


def worker_env(data_dir: Path, **extra: str) -> dict:
    """The environment of a worker serving this test process: its test database (a URL) and the
    broker folder settings fixed when they loaded (under FACET_DATA_DIR)."""
    from tests.conftest import database_url

    return dict(os.environ, DATABASE_URL=database_url(), DJANGO_SETTINGS_MODULE="facet_site.test_settings",
                FACET_DATA_DIR=str(data_dir), **extra)


def wait_until(check: Callable[[], object], *, workers: list[WorkerProcess], timeout: float, what: str,
               every: float = 0.1):
    """Poll `check` until it returns something true (returned), failing the test with the workers'
    logs when one of them exits or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        for worker in workers:
            assert worker.poll() is None, f"{worker.name} exited while waiting for {what}\n{worker.log_tail()}"
        time.sleep(every)
    logs = "\n".join(f"--- {w.name}\n{w.log_tail()}" for w in workers)
    raise AssertionError(f"still waiting for {what} after {timeout} s\n{logs}")


@contextlib.contextmanager
def redis_broker(db: int):
    """A Redis broker on database `db` for worker processes, emptied before and after (the test
    skips without Redis): yields (the workers' environment, a Celery client that sends onto it).

    The client is not the current app: jobs other tests queue keep this test process's own
    (filesystem) broker. It routes like the services do (llm_* on llm, the rest on default)."""
    import pytest

    redis = pytest.importorskip("redis")
    from celery import Celery

    from facet_site.celery import app

    url = f"redis://127.0.0.1:6379/{db}"
    try:
        client = redis.Redis.from_url(url)
        client.flushdb()
    except redis.exceptions.ConnectionError as exc:
        pytest.skip(f"no Redis at {url}: {exc}")
    sender = Celery("facet-test-sender", broker=url, set_as_current=False)
    sender.conf.update(task_routes=app.conf.task_routes, task_default_queue=app.conf.task_default_queue)
    try:
        yield {"CELERY_BROKER_URL": url, "FACET_VISIBILITY_TIMEOUT": "5"}, sender
    finally:
        sender.close()
        client.flushdb()


def wait_for_run(run, worker, timeout: float = 240):
    """The synthesis run, reloaded, once it has finished on `worker` (a WorkerProcess or the
    celery_worker fixture); fails with the worker's log if it exits or the run is still going."""
    def finished():
        run.refresh_from_db()
        return run.is_finished

    wait_until(finished, workers=[worker], timeout=timeout, what=f"run {run.pk} to finish", every=0.5)
    return run


def descendants(pid: int) -> set[int]:
    """The processes under pid, from /proc (a worker's pools, Celery's pool children that own the
    sandboxes)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
