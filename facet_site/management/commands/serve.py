"""`facet serve` (what `make serve` and the end of `make demo` run): the site and a Celery worker
with beat, together, so that a job started in the browser runs; Ctrl-C stops both.

The worker's output goes to a log file under FACET_DATA_DIR/logs; this command prints where.
"""
from __future__ import annotations

import errno
import os
import signal
import socket
from io import StringIO

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from facet_site.workers import WorkerProcess, logs_dir


def port_is_free(addr: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


class Command(BaseCommand):
    help = ("Serve the site and run a Celery worker with beat (queues default, llm and docker) beside it; Ctrl-C "
            "stops both. The worker logs to FACET_DATA_DIR/logs/worker.log.")

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")
        parser.add_argument("--no-worker", action="store_true",
                            help="Serve only (workers run elsewhere, e.g. `facet worker -Q docker` on another machine).")
        parser.add_argument("--queues", "-Q", default="default,llm,docker")
        parser.add_argument("--concurrency", "-c", type=int, default=2)

    def handle(self, *args, addrport, no_worker, queues, concurrency, **options):
        addr, _, port = addrport.rpartition(":")
        addr = addr.strip("[]") or "127.0.0.1"
        try:
            port_n = int(port)
        except ValueError:
            raise CommandError(f"{addrport!r} is not ADDRESS:PORT") from None
        if not port_is_free(addr, port_n):
            raise CommandError(f"port {port_n} on {addr} is in use: is facet already served? "
                               f"(`facet serve {addr}:{port_n + 1}` serves on another port)")
        worker = None
        if not no_worker:
            worker = WorkerProcess(queues=queues, name=f"serve-{os.getpid()}@%h", log_path=logs_dir() / "worker.log",
                                   concurrency=concurrency)
            worker.start()
        host = f"[{addr}]" if ":" in addr else addr
        with_worker = ("without a worker (--no-worker)" if worker is None else
                       f"with a worker on {queues} and beat (pid {worker.pid}, log {worker.log_path})")
        self.stdout.write(self.style.SUCCESS(f"Serving facet at http://{host}:{port_n}/") + f" {with_worker}. "
                          + ("Ctrl-C stops it." if worker is None else "Ctrl-C stops both."))
        self.stdout.flush()  # at once, also when the output goes to a file
        previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the worker too, as Ctrl-C does
        # A shell starting us as a background job of a script (`facet serve &`) leaves SIGINT ignored, and
        # Python then keeps it so: Ctrl-C (or a supervisor's SIGINT) would do nothing. It stops us, as said.
        previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            # runserver's own banner repeats the address and warns about the development server; the
            # line above says what matters. Requests still log to stderr.
            call_command("runserver", f"{host}:{port_n}", use_reloader=False, stdout=StringIO())
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)
            if worker is not None:
                self.stdout.write("Stopping the worker ...")
                self.stdout.flush()
                worker.stop()
                self.stdout.write("Stopped.")


def _interrupt(signum, frame):
    raise KeyboardInterrupt
