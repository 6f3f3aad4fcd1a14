"""broker_stub with real clients: confluent-kafka and kafka-python producers and consumers,
shmkafka's own producer, each fault kind as a confluent-kafka producer sees it, acks=all
waiting for the high watermark, and a leader move followed by the client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import confluent_kafka
import pytest

from shmkafka.broker_stub.server import BrokerStub
from tests.integration.kafka_io import consume_all, kafka_python_consume_all

COUNT = 200


@pytest.fixture
def stub() -> Iterator[BrokerStub]:
    with BrokerStub(nodes=3, partitions=4, replication_factor=3) as s:
        yield s


def _peer(stub: BrokerStub) -> Any:
    return SimpleNamespace(bootstrap=stub.bootstrap, kafka_python_api_version=None)


def _produce(stub: BrokerStub, topic: str, count: int = COUNT, **conf: Any) -> list[Any]:
    """Produce with confluent-kafka; returns the delivery reports as (error, partition,
    offset, value)."""
    producer = confluent_kafka.Producer({
        "bootstrap.servers": stub.bootstrap, "linger.ms": 5, "enable.idempotence": True,
        "log_level": 2, **conf,
    })  # fmt: skip
    reports: list[Any] = []

    def report(error: Any, msg: Any) -> None:
        reports.append((error, msg.partition(), msg.offset(), msg.value()))

    for i in range(count):
        producer.produce(topic, b"v%d" % i, b"k%d" % i, on_delivery=report)
    assert producer.flush(30) == 0
    return reports


def test_both_clients_produce_and_both_consumers_read_back(stub: BrokerStub) -> None:
    from kafka import KafkaProducer

    reports = _produce(stub, "cf")
    assert all(e is None for e, *_ in reports)
    kp = KafkaProducer(bootstrap_servers=stub.bootstrap, linger_ms=5)
    futures = [kp.send("kp", b"v%d" % i, key=b"k%d" % i) for i in range(COUNT)]
    kp.flush(30)
    assert all(f.succeeded() for f in futures)
    kp.close()
    expected = {b"v%d" % i for i in range(COUNT)}
    for topic in ("cf", "kp"):
        got = consume_all(_peer(stub), topic, [0, 1, 2, 3], COUNT)
        assert sorted(m.value() for m in got) == sorted(expected), topic
        got_kp = kafka_python_consume_all(_peer(stub), topic, [0, 1, 2, 3], COUNT)
        assert sorted(r.value for r in got_kp) == sorted(expected), topic  # type: ignore[attr-defined]
    placed = {v: (p, o) for _, p, o, v in reports}
    assert {
        m.value(): (m.partition(), m.offset())
        for m in consume_all(_peer(stub), "cf", [0, 1, 2, 3], COUNT)
    } == placed


def test_shmkafka_producer_on_the_stub(
    stub: BrokerStub, pool_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shmkafka import KafkaProducer

    monkeypatch.setenv("SHMKAFKA_SENDER_IDLE_EXIT_MS", "300")
    with KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name, linger_ms=5) as p:
        futures = [p.send("ours", b"v%d" % i, key=b"k%d" % i) for i in range(COUNT)]
        p.flush(30)
        offsets = {(f.get(0).partition, f.get(0).offset) for f in futures}
    got = consume_all(_peer(stub), "ours", [0, 1, 2, 3], COUNT)
    assert {(m.partition(), m.offset()) for m in got} == offsets and len(got) == COUNT
    deadline = time.monotonic() + 15
    import os

    while os.path.exists(f"/dev/shm/shmkafka.{pool_name}"):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_retriable_errors_are_retried_and_fatal_ones_reported(stub: BrokerStub) -> None:
    stub.control("fail_produce", code=6, count=3, topic="retry")  # NOT_LEADER_OR_FOLLOWER
    reports = _produce(stub, "retry", 50)
    assert all(e is None for e, *_ in reports)
    assert stub.errors_sent().get(6) == 3
    stub.control("fail_produce", code=87, count=1000, topic="fatal")  # INVALID_RECORD
    reports = _produce(stub, "fatal", 5, **{"message.timeout.ms": 5000})
    assert {e.code() for e, *_ in reports} == {87}
    assert len(consume_all(_peer(stub), "retry", [0, 1, 2, 3], 50)) == 50


@pytest.mark.parametrize("when", ["before", "after"])
def test_dropped_connections_lose_and_duplicate_nothing(stub: BrokerStub, when: str) -> None:
    stub.control("drop_connection", when=when, count=2, api_key=0)  # Produce
    reports = _produce(stub, f"drop-{when}", 100)
    assert all(e is None for e, *_ in reports)
    got = consume_all(_peer(stub), f"drop-{when}", [0, 1, 2, 3], 100)
    assert sorted(m.value() for m in got) == sorted(b"v%d" % i for i in range(100))


def test_latency_pause_and_throttle_delay_delivery(stub: BrokerStub) -> None:
    stub.run(lambda: stub.faults.latency_ms.update({None: 300}))
    start = time.monotonic()
    _produce(stub, "slow", 10)
    assert time.monotonic() - start >= 0.3
    stub.run(stub.faults.clear)
    _produce(stub, "paused", 1)  # metadata and connections first
    leaders = {stub.leader("paused", p) for p in range(4)}
    for node in leaders:
        stub.pause_node(node)
    threading.Timer(0.6, lambda: [stub.resume_node(n) for n in leaders]).start()
    start = time.monotonic()
    reports = _produce(stub, "paused", 20)
    assert time.monotonic() - start >= 0.5 and all(e is None for e, *_ in reports)
    stub.run(lambda: stub.faults.throttle_ms.update(dict.fromkeys(stub.cluster.node_ids, 200)))
    start = time.monotonic()
    _produce(stub, "throttled", 5)
    assert time.monotonic() - start >= 0.2


def test_a_leader_move_is_followed_by_the_client(stub: BrokerStub) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": stub.bootstrap, "linger.ms": 1,
                                        "enable.idempotence": True})  # fmt: skip
    reports: list[Any] = []

    def send(start: int) -> None:
        for i in range(start, start + 50):
            producer.produce("moving", b"v%d" % i, partition=0,
                             on_delivery=lambda e, m: reports.append((e, m.offset())))  # fmt: skip
        assert producer.flush(30) == 0

    send(0)
    old = stub.leader("moving", 0)
    new = next(n for n in stub.cluster.topics["moving"][0].replicas if n != old)
    stub.move_leader("moving", 0, new)
    send(50)
    assert stub.leader("moving", 0) == new
    assert stub.errors_sent().get(6, 0) >= 1  # the client was told, refreshed, and moved on
    assert all(e is None for e, _ in reports) and [o for _, o in reports] == list(range(100))
    got = consume_all(_peer(stub), "moving", [0], 100)
    assert [m.value() for m in got] == [b"v%d" % i for i in range(100)]


def test_acks_all_waits_for_the_high_watermark() -> None:
    with BrokerStub(nodes=2, partitions=1, replication_factor=2, replication_lag_ms=400) as stub:
        _produce(stub, "warm", 1, acks=1, **{"enable.idempotence": False})
        for acks, at_least, at_most in ((1, 0.0, 0.35), ("all", 0.4, 10)):
            start = time.monotonic()
            reports = _produce(stub, f"acks-{acks}", 1, acks=acks, **{"enable.idempotence": False})
            took = time.monotonic() - start
            assert reports[0][0] is None and at_least <= took <= at_most, (acks, took)
        # acks=1 answered before replication: consumers do not see it until the HW moves
        assert stub.high_watermark("acks-1", 0) in (0, 1)


def test_min_insync_replicas_refuses_acks_all() -> None:
    with BrokerStub(nodes=2, partitions=1, replication_factor=2, min_insync_replicas=2) as stub:
        _produce(stub, "isr", 1)
        follower = next(n for n in (1, 2) if n != stub.leader("isr", 0))
        stub.kill_node(follower)
        reports = _produce(stub, "isr", 1, **{"message.timeout.ms": 1500})
        assert reports[0][0] is not None
        assert stub.errors_sent().get(19, 0) >= 1  # NOT_ENOUGH_REPLICAS
        stub.restart_node(follower)


def test_acks_all_times_out_while_followers_cannot_reach_the_leader() -> None:
    """Kafka's purgatory: an acks=all batch the followers cannot copy is answered
    REQUEST_TIMED_OUT at the request's timeout; the client retries it, and once the links
    are back it is written once."""
    with BrokerStub(nodes=3, partitions=1, replication_factor=3, min_insync_replicas=2) as stub:
        _produce(stub, "cut", 1)
        leader = stub.leader("cut", 0)
        every = {(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a != b}
        cut = {(a, b) for a, b in every if b != leader}  # no follower reaches the leader
        stub.run(lambda: stub.cluster.set_links(cut, 0))
        healer = threading.Timer(1.5, lambda: stub.run(lambda: stub.cluster.set_links(every, 0)))
        healer.start()
        try:
            reports = _produce(stub, "cut", 20, **{"request.timeout.ms": 400})
        finally:
            healer.join()
        assert stub.errors_sent().get(7, 0) >= 1  # REQUEST_TIMED_OUT, then retried
        assert all(error is None for error, *_ in reports) and stub.leader("cut", 0) == leader
        got = consume_all(_peer(stub), "cut", [0], 21)
        assert [m.value() for m in got] == [b"v0"] + [b"v%d" % i for i in range(20)]


def test_log_append_time_topics() -> None:
    with BrokerStub(nodes=1, partitions=1, log_append_time_topics=frozenset({"lat"})) as stub:
        before = int(time.time() * 1000)
        _produce(stub, "lat", 3, **{"enable.idempotence": False})
        got = consume_all(_peer(stub), "lat", [0], 3)
        kinds = {m.timestamp()[0] for m in got}
        assert kinds == {confluent_kafka.TIMESTAMP_LOG_APPEND_TIME}
        assert all(m.timestamp()[1] >= before for m in got)
