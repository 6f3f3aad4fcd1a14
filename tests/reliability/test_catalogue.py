"""Cases of the reliability catalogue (docs/reliability.md)
for shmkafka's own producer, with faults injected by broker_stub. Each case checks the exact
outcome: the typed error, no accepted record lost, no duplicate with idempotence, order per
partition, no wait unbounded, and the pool's invariants afterwards."""

from __future__ import annotations

import time
from typing import Any

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.errors import (
    IllegalArgumentError,
    KafkaConfigurationError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
)
from tests.reliability.conftest import invariants, producer, read_back

pytestmark = pytest.mark.usefixtures("pool_removed")


def test_case_01_record_size_limit(stub: BrokerStub, pool_name: str) -> None:
    """A record over max_request_size fails synchronously; the boundary size is accepted."""
    with producer(stub, pool_name, max_request_size=4096) as p:
        # batch header 61, record framing 21, length varints at their largest 11, key 1
        largest = 4096 - 61 - 21 - 11 - 1
        p.send("sizes", b"x" * largest, key=b"k").get(10)
        for size in (largest + 1, 4096, 4097):
            with pytest.raises(MessageSizeTooLargeError):
                p.send("sizes", b"x" * size, key=b"k")
        assert invariants(pool_name) == []
        assert p._handle.outstanding == 0


@pytest.mark.parametrize("topic", ["topic abc", "", "x" * 250, None, "a/b"])
def test_case_02_invalid_topics_fail_before_shared_memory(
    stub: BrokerStub, pool_name: str, topic: Any
) -> None:
    with producer(stub, pool_name) as p:
        with pytest.raises((ValueError, TypeError)):
            p.send(topic, b"v")
        assert p._handle.outstanding == 0 and invariants(pool_name) == []


def test_case_03_unserialisable_values_and_bad_headers(stub: BrokerStub, pool_name: str) -> None:
    with producer(stub, pool_name, value_serializer=lambda v: v.encode()) as p:
        with pytest.raises(AttributeError):
            p.send("t", 12)  # the serializer rejects it
        with pytest.raises(TypeError):
            p.send("t", "v", headers=[(None, 1)])  # type: ignore[list-item]
        assert p._handle.outstanding == 0 and invariants(pool_name) == []


def test_case_04_and_05_bad_partitions_and_conflicting_config(
    stub: BrokerStub, pool_name: str
) -> None:
    with producer(stub, pool_name) as p:
        with pytest.raises(IllegalArgumentError):
            p.send("parts", b"v", partition=-1)
        p.partitions_for("parts")
        with pytest.raises(ValueError, match="Unrecognized partition 99 for topic parts"):
            p.send("parts", b"v", partition=99)  # (kafka-python's ValueError and words)
    with pytest.raises(KafkaConfigurationError, match="incompatible with user-provided acks=1"):
        producer(stub, pool_name, enable_idempotence=True, acks=1)


def test_case_17_not_leader_is_retried_once_in_order(stub: BrokerStub, pool_name: str) -> None:
    stub.control("fail_produce", code=6, count=3, topic="retry")
    with producer(stub, pool_name, acks="all") as p:
        futures = [p.send("retry", b"%d" % i, partition=0) for i in range(50)]
        offsets = [f.get(30).offset for f in futures]
    assert offsets == sorted(offsets) and len(set(offsets)) == 50
    assert stub.errors_sent().get(6) == 3
    assert [m.value() for m in read_back(stub, "retry", 50)] == [b"%d" % i for i in range(50)]


def test_case_20_and_28_lost_responses_never_duplicate(stub: BrokerStub, pool_name: str) -> None:
    """The connection drops after the broker appended (the response is lost): the Sender
    resends the same sequence, the broker de-duplicates, one copy is kept."""
    stub.control("drop_connection", when="after", count=3, api_key=0)
    with producer(stub, pool_name, acks="all") as p:
        futures = [p.send("dup", b"%d" % i, key=b"k") for i in range(200)]
        p.flush(60)
        assert all(f.succeeded() for f in futures)
    got = read_back(stub, "dup", 200)
    assert sorted(m.value() for m in got) == sorted(b"%d" % i for i in range(200))


def test_case_26_a_broker_slower_than_the_timeouts(stub: BrokerStub, pool_name: str) -> None:
    """Every future fails with a timeout within delivery_timeout_ms (plus slack); none hangs."""
    with producer(stub, pool_name, request_timeout_ms=500, delivery_timeout_ms=1500) as p:
        p.partitions_for("slow")
        stub.run(lambda: stub.faults.latency_ms.update({None: 3000}))
        start = time.monotonic()
        futures = [p.send("slow", b"%d" % i) for i in range(10)]
        for f in futures:
            with pytest.raises(KafkaTimeoutError):
                f.get(10)
        assert time.monotonic() - start < 1.5 + 3
        stub.run(stub.faults.clear)


def test_case_30_buffer_exhausted(stub: BrokerStub, pool_name: str) -> None:
    """Nothing drains (the node is paused): send() blocks up to max_block_ms, then raises."""
    with producer(stub, pool_name, buffer_memory=64 * 1024, batch_size=16384, max_block_ms=700,
                   linger_ms=0, delivery_timeout_ms=60_000) as p:  # fmt: skip
        p.partitions_for("full")
        stub.pause_node(1)
        start = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            for i in range(10_000):
                p.send("full", b"x" * 1000, partition=i % 2)
        waited = time.monotonic() - start
        assert 0.7 <= waited < 0.7 + 1.5
        stub.resume_node(1)
        p.flush(30)


def test_case_18_storage_errors_are_retried(stub: BrokerStub, pool_name: str) -> None:
    stub.control("fail_produce", code=56, count=3, topic="storage")  # KAFKA_STORAGE_ERROR
    with producer(stub, pool_name, acks="all") as p:
        futures = [p.send("storage", b"%d" % i, partition=0) for i in range(20)]
        assert [f.get(30).offset for f in futures] == list(range(20))
    assert stub.errors_sent().get(56) == 3


@pytest.mark.parametrize(("code", "name"), [(87, "INVALID_RECORD"), (29, "TOPIC_AUTHORIZATION")])
def test_case_24_and_25_permanent_errors_fail_without_retry(
    stub: BrokerStub, pool_name: str, code: int, name: str
) -> None:
    stub.control("fail_produce", code=code, count=1000, topic="fatal")
    with producer(stub, pool_name, acks="all") as p:
        futures = [p.send("fatal", b"%d" % i, partition=0) for i in range(10)]
        p.flush(30)
        for f in futures:
            assert f.failed() and name in getattr(f.exception, "name", "")
            assert not f.retriable()
    assert stub.errors_sent().get(code, 0) <= 2  # answered once per request: never retried


def test_case_10_a_waiter_on_a_full_buffer_killed(stub: BrokerStub, pool_name: str) -> None:
    """A process blocked on the full pool is killed: the next ones still get memory once the
    broker drains, and the pool ends with every slab free."""
    import multiprocessing as mp

    from tests.integration import e2e_workers

    config = {"bootstrap_servers": [stub.bootstrap], "linger_ms": 0}
    sizes = {"buffer_memory": 64 * 1024, "batch_size": 16 * 1024}
    with producer(stub, pool_name, linger_ms=0, max_block_ms=20_000, **sizes) as p:
        p.partitions_for("full")
        stub.pause_node(1)  # nothing drains: the pool fills
        for i in range(4):
            p.send("full", b"x" * 15_000, partition=i % 2)
        ctx = mp.get_context("fork")
        last = ctx.Value("q", -1, lock=False)
        waiter = ctx.Process(target=e2e_workers.send_until_killed,
                             args=(pool_name, config, "full", 5, last))  # fmt: skip
        waiter.start()
        buffers = p._handle.pool.buffers
        deadline = time.monotonic() + 30
        while buffers.waiters() < 1:  # it attached and now waits in allocate, queued
            assert waiter.is_alive() and time.monotonic() < deadline, waiter.exitcode
            time.sleep(0.02)
        waiter.kill()
        waiter.join(10)
        assert waiter.exitcode == -9
        stub.resume_node(1)
        after = [p.send("full", b"y" * 15_000, partition=0) for _ in range(8)]
        p.flush(30)
        assert all(f.succeeded() for f in after)
        handle = p._handle
        deadline = time.monotonic() + 10
        while handle.pool.buffers.free_slabs() < handle.pool.config.num_slabs:
            assert time.monotonic() < deadline, "slabs were lost"
            time.sleep(0.05)
        # the dead waiter leaves the queue at the Sender's next reclaim of the dead (every
        # RECLAIM_MS), which may come after the slabs are all free again
        while handle.pool.buffers.waiters():
            assert time.monotonic() < deadline, "the dead waiter stayed queued"
            time.sleep(0.05)


def test_case_11_a_stopped_app_gets_its_results_on_resume(stub: BrokerStub, pool_name: str) -> None:
    """An app SIGSTOPped right after sending: the Sender delivers its records meanwhile,
    others are unaffected, and its futures complete once it runs again."""
    import multiprocessing as mp
    import os
    import signal

    from tests.integration import e2e_workers

    config = {"bootstrap_servers": [stub.bootstrap], "linger_ms": 5}
    with producer(stub, pool_name) as p:
        p.partitions_for("stop")
        ctx = mp.get_context("spawn")
        ready, out = ctx.Event(), ctx.Queue()
        app = ctx.Process(target=e2e_workers.send_and_wait,
                          args=(pool_name, config, "stop", 3, 200, ready, out))  # fmt: skip
        app.start()
        assert ready.wait(60), f"the app did not send (exit code {app.exitcode})"
        os.kill(app.pid, signal.SIGSTOP)  # type: ignore[arg-type]
        try:
            others = [p.send("stop", b"o%d" % i, key=b"k") for i in range(200)]
            p.flush(30)  # unaffected by the stopped process
            assert all(f.succeeded() for f in others)
            time.sleep(1.0)  # its records go out meanwhile: they are in shared memory
        finally:
            os.kill(app.pid, signal.SIGCONT)  # type: ignore[arg-type]
        assert out.get(timeout=60) == 200
        app.join(30)
        assert app.exitcode == 0
    assert len(read_back(stub, "stop", 400)) == 400


def test_case_15_a_stalled_sender_is_replaced(stub: BrokerStub, pool_name: str) -> None:
    """A Sender SIGSTOPped (alive, no heartbeat) is killed and replaced after
    sender_stall_ms; its batches are resent and delivered exactly once."""
    import os
    import signal

    from shmkafka.producer.client import Client

    config = {"bootstrap_servers": [stub.bootstrap], "linger_ms": 5}
    handle = Client(pool_name, config, sender_idle_exit_ms=500, sender_stall_ms=1500)
    try:
        handle.partitions_for("stall")
        stalled = handle.pool.sender()[0]
        os.kill(stalled, signal.SIGSTOP)
        futures = [handle.send("stall", b"%d" % i, b"k") for i in range(100)]
        handle.flush(30)
        assert all(f.succeeded() for f in futures)
        assert handle.pool.sender()[0] != stalled  # a new Sender took over
    finally:
        handle.close(10)
    values = [m.value() for m in read_back(stub, "stall", 100)]
    assert sorted(values) == sorted(b"%d" % i for i in range(100))


def test_case_35_flush_and_close_with_records_pending(stub: BrokerStub, pool_name: str) -> None:
    """flush() sends at once, linger.ms notwithstanding, and completes every future;
    close(0) fails the 100 pending futures; a second close is a no-op. The records close(0)
    gave up on stay in the shared pool (other processes' records share their batches), so
    the Sender still delivers them after linger.ms, unreported, as docs/reliability.md says."""
    p = producer(stub, pool_name, linger_ms=3000, batch_size=1 << 20,
                 delivery_timeout_ms=900_000)  # fmt: skip
    flushed = [p.send("pending", b"f%d" % i, partition=0) for i in range(50)]
    started = time.monotonic()
    p.flush(30)
    assert all(f.succeeded() for f in flushed) and time.monotonic() - started < 1.5
    pending = [p.send("pending", b"c%d" % i, partition=1) for i in range(100)]
    assert not any(f.is_done for f in pending)
    p.close(0)
    assert all(isinstance(f.exception, KafkaTimeoutError) for f in pending)
    assert "close(0)" in str(pending[0].exception)
    p.close(0)
    p.close()
    assert len(read_back(stub, "pending", 150)) == 150
