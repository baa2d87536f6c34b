"""A process with many threads holds at most CONNECTIONS_PER_PROCESS PostgreSQL connections at once
(facet_site/postgresql): threads beyond it wait for a free one instead of being refused by the
server, and a thread that ends without closing its connection does not keep its slot."""
import threading
import time
import uuid

import pytest
from django.db import connection, connections


@pytest.fixture
def capped(transactional_db):
    """The default database capped at `cap` connections in this process, named in pg_stat_activity."""
    if connection.vendor != "postgresql":
        pytest.skip("the connection cap is PostgreSQL's (DATABASE_URL=postgres://...)")
    db = connections.settings["default"]
    before = db["CONNECTIONS_PER_PROCESS"], dict(db["OPTIONS"]), db["CONN_MAX_AGE"]
    name = f"capped {uuid.uuid4().hex[:8]}"

    def cap(n: int) -> str:
        db["CONNECTIONS_PER_PROCESS"] = n
        db["OPTIONS"] = {**before[1], "application_name": name}
        db["CONN_MAX_AGE"] = 0
        return name

    yield cap
    db["CONNECTIONS_PER_PROCESS"], db["OPTIONS"], db["CONN_MAX_AGE"] = before


def watch_connections(name: str, stop: threading.Event, peak: list[int]) -> None:
    import psycopg

    from tests.conftest import database_url

    with psycopg.connect(database_url(), autocommit=True) as conn:
        while not stop.is_set():
            n = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchone()[0]
            peak[0] = max(peak[0], n)
            stop.wait(0.01)


def test_eight_threads_share_two_connections_and_all_finish(capped):
    name = capped(2)
    peak, stop, finished = [0], threading.Event(), []

    def job():
        for _ in range(3):
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_sleep(0.1)")
            connection.close()  # what every llm job does before its call and at its end
        finished.append(1)

    watcher = threading.Thread(target=watch_connections, args=(name, stop, peak))
    watcher.start()
    started = time.monotonic()
    threads = [threading.Thread(target=job) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - started
    stop.set()
    watcher.join()
    assert len(finished) == 8
    # never more than two at a time: 24 queries of 0.1 s take at least 1.2 s (eight at once: 0.3 s)
    assert elapsed >= 24 * 0.1 / 2
    assert 1 <= peak[0] <= 3, peak  # a connection just closed is listed until its server process exits


def test_a_thread_that_ends_without_closing_gives_its_slot_back(capped):
    capped(1)

    def leave_open():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")

    t = threading.Thread(target=leave_open)
    t.start()
    t.join()
    got = []
    after = threading.Thread(target=lambda: (leave_open(), connection.close(), got.append(1)))
    after.start()
    after.join(30)
    assert got == [1]
