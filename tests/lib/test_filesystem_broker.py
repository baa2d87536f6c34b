"""The serverless broker (facet_site/lib/filesystem_broker.py) against real folders and real processes:
every message a producer puts arrives whole, once, while workers poll as fast as they can; a file in
the queue that is not a message is set aside with an error naming it, and the worker goes on."""

import logging
import multiprocessing
import os
import time
from pathlib import Path

import pytest
from kombu import Connection
from kombu.exceptions import ChannelError
from kombu.transport import virtual

from facet_site.lib import filesystem_broker

QUEUE = "jobs"
# big enough that writing one takes a while, which is when kombu's own transport let a reader in
PADDING = "x" * 400_000


def folders(root: Path) -> dict:
    for sub in ("queue", "processed", "control"):
        (root / sub).mkdir(exist_ok=True)
    return {"data_folder_in": str(root / "queue"), "data_folder_out": str(root / "queue"),
            "processed_folder": str(root / "processed"), "control_folder": str(root / "control"),
            "store_processed": False}


def connect(options: dict, transport=filesystem_broker.Transport) -> Connection:
    # kombu keeps which exchanges and bindings were declared in a class-level state, while the
    # exchange tables live in each test's own control folder: a fresh state per connection
    fresh = type(transport.__name__, (transport,), {"global_state": virtual.BrokerState()})
    return Connection("filesystem://", transport=fresh, transport_options=options)


def produce(options: dict, count: int, transport) -> None:
    with connect(options, transport) as conn:
        queue = conn.SimpleQueue(QUEUE)
        for n in range(count):
            queue.put({"n": n, "padding": PADDING})
        queue.close()


def consume(options: dict, expected: int, transport, results, delivered) -> None:
    """Take messages until `expected` arrived in all consumers together or nothing came for 5 s;
    report what this consumer took, or the error that stopped it."""
    taken = []
    try:
        with connect(options, transport) as conn:
            queue = conn.SimpleQueue(QUEUE)
            idle_since = time.monotonic()
            while delivered.value < expected and time.monotonic() - idle_since < 5:
                try:
                    message = queue.get(block=True, timeout=0.2)
                except queue.Empty:
                    continue
                idle_since = time.monotonic()
                body = message.payload
                assert body["padding"] == PADDING, f"message {body['n']} arrived cut short"
                taken.append(body["n"])
                with delivered.get_lock():
                    delivered.value += 1
                message.ack()
            queue.close()
        results.put(("ok", taken))
    except Exception as exc:
        results.put(("error", f"{type(exc).__name__}: {exc}", taken))


def race(tmp_path: Path, transport, count: int = 300) -> list:
    options = folders(tmp_path)
    ctx = multiprocessing.get_context("fork")
    results, delivered = ctx.Queue(), ctx.Value("i", 0)
    consumers = [ctx.Process(target=consume, args=(options, count, transport, results, delivered))
                 for _ in range(2)]
    for process in consumers:
        process.start()
    producer = ctx.Process(target=produce, args=(options, count, transport))
    producer.start()
    producer.join(120)
    outcomes = [results.get(timeout=120) for _ in consumers]
    for process in consumers:
        process.join(30)
    return outcomes


def test_every_message_arrives_whole_and_once_while_two_workers_poll(tmp_path):
    outcomes = race(tmp_path, filesystem_broker.Transport)
    errors = [outcome for outcome in outcomes if outcome[0] == "error"]
    assert not errors, errors
    taken = sorted(n for _, numbers in outcomes for n in numbers)
    assert taken == list(range(300))  # none lost, none delivered twice
    assert os.listdir(tmp_path / "queue") == [] and os.listdir(tmp_path / "processed") == []


def test_a_file_in_the_queue_that_is_not_a_message_is_set_aside_and_the_next_one_delivered(tmp_path, caplog):
    options = folders(tmp_path)
    queue_dir = tmp_path / "queue"
    # what a full disk or a hand in the folder leaves: empty, cut short, not UTF-8, JSON but no object
    (queue_dir / f"1_a.{QUEUE}.msg").write_bytes(b"")
    (queue_dir / f"2_b.{QUEUE}.msg").write_bytes(b'{"body": "eyJ')
    (queue_dir / f"3_c.{QUEUE}.msg").write_bytes(b"\xff\xfe\x00binary")
    (queue_dir / f"4_d.{QUEUE}.msg").write_bytes(b"[1, 2]")
    with connect(options) as conn, caplog.at_level(logging.ERROR, logger="facet_site.lib.filesystem_broker"):
        queue = conn.SimpleQueue(QUEUE)
        queue.put({"job": "after the damage"})
        message = queue.get(block=True, timeout=5)
        assert message.payload == {"job": "after the damage"}
        message.ack()
        with pytest.raises(queue.Empty):
            queue.get(block=False)
        queue.close()
    damaged = sorted(os.listdir(tmp_path / "damaged"))
    assert damaged == [f"1_a.{QUEUE}.msg", f"2_b.{QUEUE}.msg", f"3_c.{QUEUE}.msg", f"4_d.{QUEUE}.msg"]
    assert (tmp_path / "damaged" / f"2_b.{QUEUE}.msg").read_bytes() == b'{"body": "eyJ'  # kept as it was
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for name in damaged:
        assert f"broker message file {name}" in logged and "set aside" in logged


def test_a_message_being_written_is_not_listed_or_counted(tmp_path):
    options = folders(tmp_path)
    (tmp_path / "queue" / f".9_z.{QUEUE}.msg{filesystem_broker.PARTIAL_SUFFIX}").write_bytes(b'{"half')
    with connect(options) as conn:
        queue = conn.SimpleQueue(QUEUE)
        assert queue.qsize() == 0
        queue.put({"job": 1})
        assert queue.qsize() == 1
        message = queue.get(block=True, timeout=5)
        assert message.payload == {"job": 1}  # the put's message, not the half-written one
        message.ack()
        with pytest.raises(queue.Empty):
            queue.get(block=False)
        queue.close()
    # the put left no partial file of its own behind
    assert sorted(p.name for p in (tmp_path / "queue").iterdir() if p.name.endswith(".part")) == [
        f".9_z.{QUEUE}.msg.part"]


@pytest.mark.skipif(not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(__file__).st_dev,
                    reason="needs a second filesystem at /dev/shm")
def test_a_processed_folder_on_another_filesystem_is_an_error_naming_both_folders(tmp_path):
    options = folders(tmp_path)
    elsewhere = Path("/dev/shm") / f"facet-broker-{os.getpid()}"
    elsewhere.mkdir(exist_ok=True)
    options["processed_folder"] = str(elsewhere)
    try:
        with connect(options) as conn:
            queue = conn.SimpleQueue(QUEUE)
            queue.put({"job": 1})
            with pytest.raises(ChannelError, match="both must be on one filesystem") as raised:
                queue.get(block=False)
            assert str(tmp_path / "queue") in str(raised.value) and str(elsewhere) in str(raised.value)
            queue.close()
        assert len(os.listdir(tmp_path / "queue")) == 1  # the message is still there for a worker set up right
    finally:
        for child in elsewhere.iterdir():
            child.unlink()
        elsewhere.rmdir()


def test_partial_files_of_dead_writers_are_removed_and_nothing_else(tmp_path):
    folder = tmp_path / "queue"
    folder.mkdir()
    old = folder / f".1_a.{QUEUE}.msg{filesystem_broker.PARTIAL_SUFFIX}"
    fresh = folder / f".2_b.{QUEUE}.msg{filesystem_broker.PARTIAL_SUFFIX}"
    message = folder / f"3_c.{QUEUE}.msg"
    old_message = folder / f"0_d.{QUEUE}.msg"
    for path in (old, fresh, message, old_message):
        path.write_bytes(b"{}")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    os.utime(old_message, (two_hours_ago, two_hours_ago))  # a message waiting long is still a message

    assert filesystem_broker.remove_stale_partials(folder) == [str(old)]
    assert sorted(p.name for p in folder.iterdir()) == sorted([fresh.name, message.name, old_message.name])
    assert filesystem_broker.remove_stale_partials(tmp_path / "absent") == []
