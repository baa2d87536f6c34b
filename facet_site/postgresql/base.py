"""Django's PostgreSQL backend with a cap on the connections one process holds open at once.

An llm worker runs 64 threads (FACET_LLM_CONCURRENCY), and Django gives every thread its own
connection. Each thread already closes its connection while its call waits on the endpoint
(scenarios.throughput.release_connection), but when a stage starts, all 64 threads claim an item in
the same instant and would open 64 connections; two workers then pass PostgreSQL's
max_connections (100 by default) and jobs are refused. With `CONNECTIONS_PER_PROCESS` set in the
database's settings (the llm worker sets it from FACET_LLM_DB_CONNECTIONS), a thread waits for a
free slot before it connects and frees the slot when it closes, so the process never holds more
connections than that, however many threads it runs.

The cap is a semaphore, not a pool: connections are still opened and closed per job (psycopg's
pool, Django's `OPTIONS["pool"]`, would also reuse them, but needs the psycopg-pool package). A
thread that waits longer than `CONNECTION_WAIT_S` gets an OperationalError, which jobs treat as
transient (they retry later). A connection dropped without close (its thread ended) frees its
slot when the connection object is collected (a wait of COLLECT_AFTER_S runs the collector).
"""
from __future__ import annotations

import gc
import os
import threading
import weakref

from django.db.backends.postgresql import base

CONNECTION_WAIT_S = 120.0
COLLECT_AFTER_S = 5.0

_slots: dict[tuple[int, str, int], threading.BoundedSemaphore] = {}
_slots_lock = threading.Lock()


def slots(alias: str, cap: int) -> threading.BoundedSemaphore:
    """This process's slots for one database (keyed by pid too: a forked child starts with its own)."""
    key = (os.getpid(), alias, cap)
    with _slots_lock:
        if key not in _slots:
            _slots[key] = threading.BoundedSemaphore(cap)
        return _slots[key]


class DatabaseWrapper(base.DatabaseWrapper):
    _slot: weakref.finalize | None = None

    @property
    def connection_cap(self) -> int:
        return int(self.settings_dict.get("CONNECTIONS_PER_PROCESS") or 0)

    def get_new_connection(self, conn_params):
        cap = self.connection_cap
        if not cap:
            return super().get_new_connection(conn_params)
        gate = slots(self.alias, cap)
        # a long wait may mean slots held by connections of ended threads, which only the cycle
        # collector frees (a wrapper refers to itself): collect once, then wait out the rest
        if not gate.acquire(timeout=COLLECT_AFTER_S):
            gc.collect()
            if not gate.acquire(timeout=CONNECTION_WAIT_S - COLLECT_AFTER_S):
                raise self.Database.OperationalError(
                    f"no database connection free in this process within {CONNECTION_WAIT_S:g}s "
                    f"(CONNECTIONS_PER_PROCESS={cap})")
        try:
            connection = super().get_new_connection(conn_params)
        except BaseException:
            gate.release()
            raise
        # freed by _close, or when the connection is collected if its thread ends without closing
        self._slot = weakref.finalize(connection, gate.release)
        return connection

    def _close(self):
        try:
            return super()._close()
        finally:
            slot, self._slot = self._slot, None
            if slot is not None:
                slot()  # a finalize runs once: a later collection of the connection frees nothing more
