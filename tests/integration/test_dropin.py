"""The kafka-python and confluent-kafka drop-ins end to end on Tansu, read back with
confluent-kafka's consumer."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator

import confluent_kafka
import pytest

from shmkafka import KafkaProducer, Producer
from shmkafka.confluent_kafka import KafkaError, KafkaException
from shmkafka.errors import (
    IllegalStateError,
    KafkaConfigurationError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
)
from shmkafka.protocol.hashing import murmur2_partition
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

PARTITIONS = 4
pytestmark = pytest.mark.usefixtures("pool_removed")


@pytest.fixture
def topic(tansu: Peer) -> str:
    name = unique_topic("dropin")
    with cluster(tansu) as c:
        c.ensure_topic(name, PARTITIONS)
    return name


@pytest.fixture
def producer(tansu: Peer, pool_name: str) -> Iterator[KafkaProducer]:
    p = KafkaProducer(bootstrap_servers=tansu.bootstrap, linger_ms=5, pool=pool_name)
    try:
        yield p
    finally:
        p.close(10)


def test_kafka_producer_delivers_every_record_once(
    producer: KafkaProducer, tansu: Peer, topic: str
) -> None:
    futures = [
        producer.send(topic, b"v%d" % i, key=b"k%d" % i if i % 3 else None,
                      headers=[("h", b"%d" % i)] if i % 5 == 0 else None)
        for i in range(300)
    ]  # fmt: skip
    producer.flush(30)
    metadata = [f.get(1) for f in futures]
    for i, md in enumerate(metadata):
        assert md.topic == topic and md.topic_partition == (topic, md.partition)
        assert md.checksum is None and md.serialized_value_size == len(b"v%d" % i)
        assert md.serialized_key_size == (-1 if i % 3 == 0 else len(b"k%d" % i))
        assert md.serialized_header_size == (1 + len(b"%d" % i) if i % 5 == 0 else -1)
        if i % 3:
            assert md.partition == murmur2_partition(b"k%d" % i, PARTITIONS)
    got = consume_all(tansu, topic, list(range(PARTITIONS)), 300)
    by_value = {m.value(): m for m in got}
    assert len(got) == 300 and len(by_value) == 300
    for i, md in enumerate(metadata):
        m = by_value[b"v%d" % i]
        assert (m.partition(), m.offset()) == (md.partition, md.offset)
        assert m.key() == (None if i % 3 == 0 else b"k%d" % i)
    assert producer.partitions_for(topic) == set(range(PARTITIONS))
    assert producer.bootstrap_connected()
    assert producer.metrics()["producer-metrics"]["record-send-total"] >= 300


def test_kafka_producer_callbacks_serializers_and_errors(
    tansu: Peer, topic: str, pool_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with KafkaProducer(
        bootstrap_servers=[tansu.bootstrap], pool=pool_name, linger_ms=1,
        key_serializer=str.encode, value_serializer=lambda v: repr(v).encode(),
    ) as p:  # fmt: skip
        seen: list[object] = []
        future = p.send(topic, {"n": 1}, key="a")
        assert future.add_callback(seen.append).add_errback(seen.append) is future
        future.add_callback(lambda md: 1 / 0)  # logged, never breaks delivery
        with caplog.at_level(logging.ERROR, logger="shmkafka.producer"):
            md = future.get(30)
        assert md.serialized_value_size == len(b"{'n': 1}")
        deadline = time.monotonic() + 5
        while len(seen) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [md]
        with pytest.raises(ValueError, match="Need at least one: key or value"):
            p.send(topic)
        with pytest.raises(TypeError, match="headers must be list-type"):
            p.send(topic, 1, headers={"h": b"x"})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"\(str, bytes\) tuples"):
            p.send(topic, 1, headers=[("h", "text")])  # type: ignore[list-item]
        with pytest.raises(MessageSizeTooLargeError, match="max_request_size"):
            p.send(topic, "x" * 2_000_000, key="k")  # (a None key is serialized too)
    with pytest.raises(IllegalStateError, match="already closed"):
        p.send(topic, 1)
    p.close()  # a second close is a no-op


def test_close_zero_fails_pending_futures(tansu: Peer, topic: str, pool_name: str) -> None:
    p = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, linger_ms=3000,
                      batch_size=1 << 20, delivery_timeout_ms=200_000)  # fmt: skip
    futures = [p.send(topic, b"x", key=b"k") for _ in range(100)]
    assert not any(f.is_done for f in futures)
    p.close(0)
    assert all(f.failed() for f in futures)
    assert all(isinstance(f.exception, KafkaTimeoutError) for f in futures)
    assert "close(0)" in str(futures[0].exception)
    p.close(0)


def test_one_kafka_producer_from_eight_threads(
    producer: KafkaProducer, tansu: Peer, topic: str
) -> None:
    results: dict[int, list[object]] = {}

    def work(t: int) -> None:
        results[t] = [producer.send(topic, b"%d-%d" % (t, i), key=b"t%d" % t) for i in range(200)]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    producer.flush(30)
    for t, futures in results.items():
        offsets = [f.get(0).offset for f in futures]  # type: ignore[attr-defined]
        assert offsets == sorted(offsets) and len(set(offsets)) == 200, t
    got = consume_all(tansu, topic, list(range(PARTITIONS)), 1600)
    expected = sorted(b"%d-%d" % (t, i) for t in range(8) for i in range(200))
    assert sorted(m.value() for m in got) == expected


def test_confluent_producer_reports_in_order_per_partition(
    tansu: Peer, topic: str, pool_name: str
) -> None:
    reports: list[tuple[object, int, int, bytes]] = []
    conf = {"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name, "linger.ms": 5}
    with Producer(conf) as p:
        assert p and len(p) == 0
        for i in range(400):
            key = None if i % 7 == 0 else b"key-%d" % (i % 13)
            p.produce(topic, b"v%d" % i, key, headers={"i": str(i)} if i % 2 else None,
                      on_delivery=lambda err, msg: reports.append(
                          (err, msg.partition(), msg.offset(), msg.value())))  # fmt: skip
        assert len(p) == 400
        assert p.flush(30) == 0
        assert p.poll(0) == 0
        assert p.list_topics(topic).topics[topic].partitions.keys() == set(range(PARTITIONS))
    assert len(reports) == 400 and all(err is None for err, _, _, _ in reports)
    for partition in range(PARTITIONS):
        offsets = [o for _, p_, o, _ in reports if p_ == partition]
        assert offsets == sorted(offsets)
    got = consume_all(tansu, topic, list(range(PARTITIONS)), 400)
    placed = {m.value(): (m.partition(), m.offset()) for m in got}
    assert {v: (p_, o) for _, p_, o, v in reports} == placed
    with pytest.raises(RuntimeError, match="has been closed"):
        p.produce(topic, b"x")
    with pytest.raises(RuntimeError, match="has been closed"):
        p.poll(0)
    assert len(p) == 0


@pytest.mark.parametrize(
    "partitioner", ["consistent_random", "consistent", "murmur2_random", "murmur2", "fnv1a"]
)
def test_confluent_partitioners_place_keys_as_librdkafka_does(
    tansu: Peer, topic: str, pool_name: str, partitioner: str
) -> None:
    keys = [b"key-%d" % i for i in range(60)] + [b""]
    ours: dict[bytes, int] = {}
    theirs: dict[bytes, int] = {}
    conf = {"bootstrap.servers": tansu.bootstrap, "partitioner": partitioner}
    with Producer({**conf, "shmkafka.pool": pool_name}) as p:
        for key in keys:
            p.produce(
                topic, b"v", key, on_delivery=lambda e, m: ours.update({m.key(): m.partition()})
            )
        p.flush(30)
    reference = confluent_kafka.Producer(conf)
    for key in keys:
        reference.produce(
            topic, b"v", key, on_delivery=lambda e, m: theirs.update({m.key(): m.partition()})
        )
    reference.flush(30)
    if partitioner == "consistent_random":
        keys = keys[:-1]  # an empty key is placed at random by both
    assert {k: ours[k] for k in keys} == {k: theirs[k] for k in keys}


def test_confluent_queue_limits_and_purge(tansu: Peer, topic: str, pool_name: str) -> None:
    conf = {"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name,
            "linger.ms": 3000, "batch.size": 1 << 20, "message.timeout.ms": 200_000,
            "queue.buffering.max.messages": 10}  # fmt: skip
    p = Producer(conf)
    errors: list[KafkaError] = []
    for _ in range(10):
        p.produce(topic, b"x", b"k", on_delivery=lambda e, m: errors.append(e))
    with pytest.raises(BufferError):
        p.produce(topic, b"x", b"k")
    with pytest.raises(TypeError):
        p.produce(topic, b"x", headers=[("h", 5)])
    p.purge()
    assert p.poll(1) == 10
    assert [e.code() for e in errors] == [KafkaError._PURGE_QUEUE] * 10
    p.close(5)


def test_confluent_times_out_without_a_broker(pool_name: str) -> None:
    conf = {"bootstrap.servers": "127.0.0.1:1", "shmkafka.pool": pool_name,
            "message.timeout.ms": 1500, "request.timeout.ms": 500}  # fmt: skip
    errors: list[KafkaError] = []
    p = Producer(conf)
    start = time.monotonic()
    p.produce("nowhere", b"x", on_delivery=lambda e, m: errors.append(e))
    assert p.flush(10) == 0
    assert 1.4 < time.monotonic() - start < 8
    assert [e.code() for e in errors] == [KafkaError._MSG_TIMED_OUT]
    with pytest.raises(KafkaException):
        p.list_topics("nowhere", timeout=0.2)
    p.close(1)


def test_conflicting_settings_on_one_pool_name_the_keys(tansu: Peer, pool_name: str) -> None:
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, linger_ms=5) as p:
        with pytest.raises(KafkaConfigurationError) as raised:
            KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, linger_ms=7,
                          acks=1)  # fmt: skip
        message = str(raised.value)
        assert (
            "linger_ms (pool has 5, asked 7)" in message
            and "acks (pool has -1, asked 1)" in message
        )
        same = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, linger_ms=5)
        same.close()
        deadline = time.monotonic() + 10
        while not p.bootstrap_connected():  # the Sender gets its producer id from Tansu
            assert time.monotonic() < deadline, "never connected"
            time.sleep(0.02)


def test_default_pools_follow_the_settings(tansu: Peer) -> None:
    a = KafkaProducer(bootstrap_servers=tansu.bootstrap, linger_ms=5)
    b = KafkaProducer(bootstrap_servers=tansu.bootstrap, linger_ms=5)
    c = KafkaProducer(bootstrap_servers=tansu.bootstrap, linger_ms=6)
    names = [p._client.pool.name for p in (a, b, c)]
    for p in (a, b, c):
        p.close()
    assert names[0] == names[1] != names[2]
    deadline = time.monotonic() + 15
    while any(os.path.exists(f"/dev/shm/shmkafka.{n}") for n in names):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_delivery_callback_exception_propagates_out_of_poll(
    tansu: Peer, topic: str, pool_name: str
) -> None:
    def boom(err: object, msg: object) -> None:
        raise RuntimeError("from the callback")

    with Producer({"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name}) as p:
        p.produce(topic, b"x", b"k", on_delivery=boom)
        with pytest.raises(RuntimeError, match="from the callback"):
            p.flush(30)
        assert len(p) == 0
