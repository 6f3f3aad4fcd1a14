"""No ceilings (layout v5), on Tansu with default settings: a topic of 2,000 partitions beside
a small one; 300 topics from one producer; and a topic past a limit of the pool, which
fails alone (in each API's form, at once) while the other topics flow and the Sender lives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from shmkafka import KafkaProducer, Producer
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.confluent_kafka import KafkaError, KafkaException
from shmkafka.errors import PoolCapacityError
from shmkafka.pool.shared_pool import SharedPool
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")


def test_a_2000_partition_topic_beside_a_small_one(tansu: Peer, pool_name: str) -> None:
    big, small = unique_topic("big"), unique_topic("small")
    with cluster(tansu) as c:
        c.ensure_topic(big, 2000)
        c.ensure_topic(small, 4)
    reports: list[tuple[Any, Any]] = []
    errors: list[Any] = []
    conf = {"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name,
            "error_cb": errors.append}  # fmt: skip

    def report(error: Any, message: Any) -> None:
        reports.append((error, message))

    with Producer(conf) as p:
        for i in range(4000):  # keyed: spread over every partition
            # (each of 2000 partitions' batches holds a 16 KiB slab of the 32 MiB pool: on a
            # busy machine the pool may fill before the Sender drains; then, as with
            # librdkafka's queue, the app polls and produces again)
            for _ in range(100):
                try:
                    p.produce(big, b"b%d" % i, key=b"k%d" % i, on_delivery=report)
                    break
                except BufferError:
                    p.poll(0.1)
            else:
                raise AssertionError("the pool stayed full for 10 s")
        for i in range(40):
            p.produce(small, b"s%d" % i, on_delivery=report)
        assert p.flush(60) == 0
        assert len(p.list_topics(big, timeout=10).topics[big].partitions) == 2000
    assert errors == [] and len(reports) == 4040 and all(e is None for e, _ in reports)
    placed = {(m.topic(), m.partition(), m.offset()) for _, m in reports}
    assert len(placed) == 4040  # every record has its own offset
    assert len({m.partition() for _, m in reports if m.topic() == big}) > 1500
    values = [m.value() for m in consume_all(tansu, small, [0, 1, 2, 3], 40)]
    assert sorted(values) == sorted(b"s%d" % i for i in range(40))


def test_300_topics_from_one_producer(tansu: Peer, pool_name: str) -> None:
    prefix = unique_topic("tenant")
    topics = [f"{prefix}-{i}" for i in range(300)]
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name) as p:
        futures = [p.send(t, b"one record of " + t.encode()) for t in topics]  # auto-created
        p.flush(60)
        metadata = [f.get(30) for f in futures]
        assert [m.topic for m in metadata] == topics
        pool = SharedPool.open(pool_name)
        try:
            assert len(pool.directory.snapshot().topics) >= 300
        finally:
            pool.detach()
    for sent in metadata[::50]:  # read a sample back
        (message,) = consume_all(tansu, sent.topic, [sent.partition], 1)
        assert message.value() == b"one record of " + sent.topic.encode()


def _sender_pid(pool_name: str) -> int:
    pool = SharedPool.open(pool_name)
    try:
        return pool.sender()[0]
    finally:
        pool.detach()


def test_a_topic_past_a_limit_fails_alone_kafka_python(tansu: Peer, pool_name: str) -> None:
    wide, narrow = unique_topic("wide"), unique_topic("narrow")
    with cluster(tansu) as c:
        c.ensure_topic(wide, 100)
        c.ensure_topic(narrow, 4)
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name,
                       max_partitions=64, max_topics=4) as p:  # fmt: skip
        p.send(narrow, b"first").get(30)
        sender = _sender_pid(pool_name)
        started = time.monotonic()
        with pytest.raises(PoolCapacityError, match="max_partitions"):
            p.send(wide, b"too wide")
        assert time.monotonic() - started < 10  # at once, not after max_block_ms (60 s)
        assert p.send(narrow, b"second").get(30).topic == narrow  # the others flow
        for i in range(3):  # fill max_topics, then one more fails at the call
            p.send(f"{narrow}-{i}", b"x").get(30)
        with pytest.raises(PoolCapacityError, match="max_topics"):
            p.send(f"{narrow}-over", b"x")
        assert _sender_pid(pool_name) == sender  # the Sender never restarted
        p.send(narrow, b"third").get(30)
    values = [m.value() for m in consume_all(tansu, narrow, [0, 1, 2, 3], 3)]
    assert sorted(values) == [b"first", b"second", b"third"]


def test_a_topic_past_a_limit_fails_alone_confluent(tansu: Peer, pool_name: str) -> None:
    wide, narrow = unique_topic("wide"), unique_topic("narrow")
    with cluster(tansu) as c:
        c.ensure_topic(wide, 100)
        c.ensure_topic(narrow, 4)
    reports: list[tuple[Any, Any]] = []
    errors: list[Any] = []
    conf = {"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name,
            "shmkafka.max.partitions": 64, "shmkafka.max.topics": 2,
            "error_cb": errors.append}  # fmt: skip
    with Producer(conf) as p:
        for i in range(5):
            p.produce(wide, b"w%d" % i, on_delivery=lambda e, m: reports.append((e, m)))
            p.produce(narrow, b"n%d" % i, on_delivery=lambda e, m: reports.append((e, m)))
        assert p.flush(30) == 0
        failed = [e for e, m in reports if m.topic() == wide]
        assert len(failed) == 5 and all(e.code() == KafkaError._QUEUE_FULL for e in failed)
        assert "max_partitions" in failed[0].str()
        assert all(e is None for e, m in reports if m.topic() == narrow)
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            p.poll(0.1)
        assert any("max_partitions" in e.str() for e in errors)  # error_cb heard of it
        p.produce(f"{narrow}-2", b"x")  # the second topic fits
        assert p.flush(30) == 0
        with pytest.raises(KafkaException, match="max_topics"):
            p.produce(f"{narrow}-over", b"x")  # a third is refused at the call
    assert len(consume_all(tansu, narrow, [0, 1, 2, 3], 5)) == 5


def test_a_full_dev_shm_refuses_the_topic_that_needs_memory(
    tansu: Peer, pool_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/dev/shm running out while the directory grows is a typed error for the topic that
    needed the memory (SHMKAFKA_FAULT_RESERVE_LIMIT makes the Sender's /dev/shm "full")."""
    wide, narrow = unique_topic("wide"), unique_topic("narrow")
    with cluster(tansu) as c:
        c.ensure_topic(wide, 3000)
        c.ensure_topic(narrow, 2)
    monkeypatch.setenv("SHMKAFKA_FAULT_RESERVE_LIMIT", str(128 * 1024))  # for the Sender
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name) as p:
        p.send(narrow, b"fits").get(30)
        with pytest.raises(PoolCapacityError, match="/dev/shm"):
            p.send(wide, b"needs 3000 deques")
        p.send(narrow, b"still fits").get(30)
    assert os.environ["SHMKAFKA_FAULT_RESERVE_LIMIT"]  # (the test process was not limited)


def test_the_producer_objects_of_a_process_share_its_slot(tansu: Peer, pool_name: str) -> None:
    """16 producers in one process take one slot, and each gets every result of its own
    records, including producers that begin to send while others' results flow."""
    topic = unique_topic("shared")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 4)
    producers = [
        KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, linger_ms=1)
        for _ in range(16)
    ]
    try:
        futures = []
        for i in range(3200):  # producer k sends its first record after 200 * k of the others
            p = producers[min(i // 200, 15 if i >= 3000 else i % (i // 200 + 1))]
            futures.append((p, p.send(topic, b"%d" % i)))
        for p in producers:
            p.flush(30)
        assert all(f.get(30).topic == topic for _, f in futures)
        stat = subprocess.run(
            [sys.executable, "-m", "shmkafka", "stat", "--pool", pool_name, "--json"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        pids = [p["pid"] for p in json.loads(stat.stdout)["processes"]]
        assert pids.count(os.getpid()) == 1  # one slot for 16 producers
    finally:
        for p in producers:
            p.close(10)
    assert len(consume_all(tansu, topic, [0, 1, 2, 3], 3200)) == 3200


def test_many_partitions_on_three_broker_stub_nodes(pool_name: str) -> None:
    """5,000 partitions over 3 nodes (the stub's leaders spread them), with records keyed over
    all of them, beside a small topic: every record is acknowledged at its own offset, and
    the pool's directory holds every partition."""
    with BrokerStub(nodes=3, partitions=1) as stub:
        stub.create_topic("wide", 5000)
        stub.create_topic("narrow", 2)
        with KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name) as p:
            wide = [p.send("wide", b"w%d" % i, key=b"k%d" % i) for i in range(10_000)]
            narrow = [p.send("narrow", b"n%d" % i) for i in range(100)]
            p.flush(60)
            placed = {(m.partition, m.offset) for m in (f.get(30) for f in wide)}
            assert len(placed) == 10_000 and len({part for part, _ in placed}) > 4000
            assert all(f.get(30).topic == "narrow" for f in narrow)
            pool = SharedPool.open(pool_name)
            try:
                assert len(pool.directory.partitions("wide") or ()) == 5000
                assert pool.deques_used() == 5002
            finally:
                pool.detach()


def test_a_callback_may_flush_another_producer_of_its_process(tansu: Peer, pool_name: str) -> None:
    """Both producers share the process's completion thread, which runs the callback: the
    other producer's flush() reads the results there instead of waiting for itself."""
    topic = unique_topic("cbflush")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    first = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    second = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    try:
        pending = second.send(topic, b"second")
        flushed: list[bool] = []
        first.send(topic, b"first").add_callback(
            lambda _: flushed.append(second.flush(10) is None and pending.succeeded())
        )
        first.flush(30)
        deadline = time.monotonic() + 15
        while not flushed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert flushed == [True]
    finally:
        first.close(10)
        second.close(10)
