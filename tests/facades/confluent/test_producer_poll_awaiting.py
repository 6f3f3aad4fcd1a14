"""shmkafka's Producer: a ``poll(timeout)`` that waits for reports says so in the process's
slot, so the Sender wakes the process at once (pool/result_wakes.py), as librdkafka serves
a report to a waiting poll as soon as it has it."""

from __future__ import annotations

import threading
import time

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.confluent_kafka import Producer
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer.process_slot import joined_pools
from shmkafka.shm.layout import S_AWAITING

pytestmark = pytest.mark.usefixtures("pool_removed")


def _pool(name: str) -> SharedPool:
    """Our pool (another test's producer, not yet collected, may keep its own joined)."""
    (pool,) = [pool for pool in joined_pools() if pool.name == name]
    return pool


def _awaiting(name: str) -> int:
    pool = _pool(name)
    return int(pool.segment.halfwords[(pool.layout.slot_at(pool.slot) + S_AWAITING) >> 2])


def test_a_poll_that_waits_for_a_report_raises_the_awaiting_flag(pool_name: str) -> None:
    reports: list[object] = []
    with BrokerStub(partitions=1) as stub:
        producer = Producer({"bootstrap.servers": stub.bootstrap, "shmkafka.pool": pool_name,
                             "linger.ms": 60_000})  # fmt: skip
        producer.produce("t", b"v", on_delivery=lambda err, msg: reports.append(err))
        producer.poll(0)
        polled: list[int] = []
        poller = threading.Thread(target=lambda: polled.append(producer.poll(10)))
        poller.start()
        deadline = time.monotonic() + 5
        while not _awaiting(pool_name):  # (the report lingers for a minute)
            assert time.monotonic() < deadline, "the waiting poll() never said so"
            time.sleep(0.001)
        assert producer.flush(10) == 0
        poller.join(10)
        assert reports == [None] and _awaiting(pool_name) == 0
        producer.poll(0)  # (nothing outstanding: a poll that does not wait leaves it down)
        assert _awaiting(pool_name) == 0
        producer.close()  # (detached now: its Sender exits, and removes the pool)


def test_a_poll_shorter_than_the_hold_leaves_the_flag_down(pool_name: str) -> None:
    """A pacing loop's short polls (here 20 ms, under the Sender's 50 ms hold) take the
    reports a held wake brings: they do not ask for a wake per result."""
    with BrokerStub(partitions=1) as stub:
        producer = Producer({"bootstrap.servers": stub.bootstrap, "shmkafka.pool": pool_name,
                             "linger.ms": 60_000})  # fmt: skip
        producer.produce("t", b"v")
        producer.poll(0)
        pool = _pool(pool_name)
        deadline = time.monotonic() + 10
        while pool.wake_hold_s() != 0.05:  # (the Sender says its linger once it runs)
            assert time.monotonic() < deadline, "the Sender never said its linger"
            time.sleep(0.001)
        stop = threading.Event()

        def pace() -> None:
            while not stop.is_set():
                producer.poll(0.02)

        pacer = threading.Thread(target=pace)
        pacer.start()
        seen, deadline = set(), time.monotonic() + 0.3
        while time.monotonic() < deadline:  # (its polls wait: the record lingers a minute)
            seen.add(_awaiting(pool_name))
            time.sleep(0.0005)
        stop.set()
        pacer.join(10)
        assert seen == {0}
        assert producer.flush(10) == 0
        producer.close()  # (detached now: its Sender exits, and removes the pool)


def test_a_poll_without_a_timeout_raises_the_flag_while_a_topic_is_unknown(
    pool_name: str,
) -> None:
    """``poll()`` waits in short steps while a record's topic is not known yet (it looks at
    the directory often); it is still a wait without a bound, which the Sender must not
    hold."""
    with BrokerStub(partitions=1, auto_create_topics=False) as stub:
        stub.create_topic("known")
        producer = Producer({"bootstrap.servers": stub.bootstrap, "shmkafka.pool": pool_name,
                             "linger.ms": 60_000})  # fmt: skip
        reports: list[object] = []
        producer.produce("known", b"v", on_delivery=lambda err, msg: reports.append(err))
        producer.produce("unknown", b"v")  # (its topic comes only later)
        pool = _pool(pool_name)
        deadline = time.monotonic() + 10
        while pool.wake_hold_s() != 0.05:  # (the Sender says its linger once it runs)
            assert time.monotonic() < deadline, "the Sender never said its linger"
            time.sleep(0.001)
        poller = threading.Thread(target=producer.poll)  # (returns with the report)
        poller.start()
        deadline = time.monotonic() + 5
        while not _awaiting(pool_name):  # (the known topic's report lingers for a minute)
            assert time.monotonic() < deadline, "the waiting poll() never said so"
            time.sleep(0.0005)
        producer.purge()  # (the waiting poll serves the purged records' reports)
        poller.join(10)
        assert not poller.is_alive() and len(reports) == 1
        stub.create_topic("unknown")  # (nothing of it left waiting: the Sender goes idle)
        assert producer.flush(10) == 0
        producer.close()  # (detached now: its Sender exits, and removes the pool)
