"""kafka-python 3.x's KafkaProducer contract beyond send/flush: resolved configuration,
Serializer and Partitioner objects, the public methods its tests use, and its exception
classes. kafka-python's own KafkaProducer runs beside ours on the same Tansu broker."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from typing import Any

import kafka
import kafka.errors
import kafka.partitioner
import kafka.serializer
import pytest

from shmkafka.kafka import KafkaProducer
from shmkafka.kafka.errors import KafkaConfigurationError
from shmkafka.kafka.partitioner import DefaultPartitioner, Partitioner
from shmkafka.kafka.serializer import JsonSerializer, Serializer
from tests.integration.kafka_io import cluster, unique_topic
from tests.peers import Peer

pytestmark = [
    pytest.mark.usefixtures("pool_removed"),
    # kafka-python's own producer leaves sockets to the collector when its __init__ raises
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
PARTITIONS = 3


@pytest.fixture(autouse=True)
def collect_peer_sockets() -> Iterator[None]:
    """kafka-python's producers leave their wakeup socket pairs to the collector: collect
    them here, under this module's warning filter, not in a later test."""
    yield
    gc.collect()


@pytest.fixture
def topic(tansu: Peer) -> str:
    name = unique_topic("kapi")
    with cluster(tansu) as c:
        c.ensure_topic(name, PARTITIONS)
    return name


def _both(tansu: Peer, pool_name: str, **configs: Any) -> tuple[Any, Any]:
    mine = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, **configs)
    theirs = kafka.KafkaProducer(bootstrap_servers=tansu.bootstrap, **configs)
    return mine, theirs


@pytest.mark.parametrize(
    "configs",
    [
        {},
        {"acks": "all"},
        {"acks": 1},
        {"retries": 0},
        {"max_in_flight_requests_per_connection": 10},
        {"enable_idempotence": False, "acks": 0},
        {"acks": 1, "compression_type": "gzip"},
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "defaults",
)
def test_resolved_config_is_kafka_pythons(
    tansu: Peer, pool_name: str, configs: dict[str, Any]
) -> None:
    mine, theirs = _both(tansu, pool_name, **configs)
    try:
        for key in ("acks", "enable_idempotence", "retries", "compression_type", "linger_ms"):
            assert mine.config[key] == theirs.config[key], key
        assert mine.max_usable_produce_magic(mine.config["api_version"]) == 2
        assert theirs.max_usable_produce_magic(theirs.config["api_version"]) == 2
    finally:
        mine.close(5)
        theirs.close(5)


@pytest.mark.parametrize(
    "configs",
    [
        {"enable_idempotence": True, "acks": 1},
        {"enable_idempotence": True, "acks": 0, "retries": 0},
        {"enable_idempotence": True, "max_in_flight_requests_per_connection": 6},
        {"delivery_timeout_ms": 1000},
    ],
)
def test_conflicts_are_refused_with_kafka_pythons_words(
    tansu: Peer, pool_name: str, configs: dict[str, Any]
) -> None:
    with pytest.raises(kafka.errors.KafkaConfigurationError) as theirs:
        kafka.KafkaProducer(bootstrap_servers=tansu.bootstrap, **configs).close(1)
    gc.collect()  # (its half-built client's sockets: collected here, under this test's filter)
    with pytest.raises(kafka.errors.KafkaConfigurationError) as mine:
        KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, **configs)
    assert isinstance(mine.value, KafkaConfigurationError)
    assert mine.value.args == theirs.value.args


class Recording(kafka.serializer.Serializer):  # kafka-python's own interface
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.closed = False

    def serialize(self, topic: str, headers: Any, data: Any) -> Any:
        self.calls.append((type(headers).__name__, data))
        return None if data is None else repr(data).encode()

    def close(self) -> None:
        self.closed = True


class OldStyle:  # kafka-python 2.x: serialize(topic, data)
    def serialize(self, topic: str, data: Any) -> bytes:
        return b"old:" + str(data).encode()


def test_serializers_are_called_as_kafka_python_calls_them(
    tansu: Peer, topic: str, pool_name: str
) -> None:
    recorders = {who: (Recording(), Recording()) for who in ("mine", "theirs")}
    producers = {
        "mine": KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name,
                              key_serializer=recorders["mine"][0],
                              value_serializer=recorders["mine"][1]),
        "theirs": kafka.KafkaProducer(bootstrap_servers=tansu.bootstrap,
                                      key_serializer=recorders["theirs"][0],
                                      value_serializer=recorders["theirs"][1]),
    }  # fmt: skip
    sizes = {}
    for who, producer in producers.items():
        futures = [producer.send(topic, {"n": 1}, key="a"), producer.send(topic, None, key="b"),
                   producer.send(topic, 7, headers=[("h", b"1")])]  # fmt: skip
        sizes[who] = [(f.get(30).serialized_key_size, f.get(30).serialized_value_size)
                      for f in futures]  # fmt: skip
        producer.close(5)
    assert sizes["mine"] == sizes["theirs"]
    for (key_mine, value_mine), (key_theirs, value_theirs) in [
        (recorders["mine"], recorders["theirs"])
    ]:
        assert key_mine.calls == key_theirs.calls and value_mine.calls == value_theirs.calls
        assert key_mine.closed and value_mine.closed and key_theirs.closed


def test_our_serializer_classes_and_old_style_objects(
    tansu: Peer, topic: str, pool_name: str
) -> None:
    assert issubclass(JsonSerializer, Serializer)
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name,
                       value_serializer=JsonSerializer(),
                       key_serializer=OldStyle()) as p:  # fmt: skip
        metadata = p.send(topic, {"a": [1, 2]}, key=5).get(30)
    assert metadata.serialized_value_size == len(b'{"a": [1, 2]}')
    assert metadata.serialized_key_size == len(b"old:5")


class ByValue(Partitioner):
    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def partition(self, topic: str, key: Any, serialized_key: Any, value: Any,
                  serialized_value: Any, cluster: Any) -> int:  # fmt: skip
        every = sorted(cluster.partitions_for_topic(topic))
        available = cluster.available_partitions_for_topic(topic)
        self.seen.append((key, serialized_key, value, len(every), available == set(every)))
        return every[int(value) % len(every)]


class PeerByValue(kafka.partitioner.Partitioner):
    def partition(self, topic: str, key: Any, serialized_key: Any, value: Any,
                  serialized_value: Any, cluster: Any) -> int:  # fmt: skip
        return sorted(cluster.partitions_for_topic(topic))[int(value) % PARTITIONS]


def test_partitioner_objects_and_callables(tansu: Peer, topic: str, pool_name: str) -> None:
    ours = ByValue()
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, partitioner=ours,
                       value_serializer=lambda v: str(v).encode()) as p:  # fmt: skip
        placed = [p.send(topic, i, key=b"k").get(30).partition for i in range(6)]
    assert placed == [i % PARTITIONS for i in range(6)]
    assert ours.seen[0] == (b"k", b"k", 0, PARTITIONS, True)
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name,
                       partitioner=PeerByValue(),
                       value_serializer=lambda v: str(v).encode()) as p:  # fmt: skip
        assert [p.send(topic, i).get(30).partition for i in range(3)] == [0, 1, 2]
    legacy = lambda key, every, available: every[-1]  # noqa: E731  (kafka-python 2.x's form)
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, partitioner=legacy) as p:
        assert p.send(topic, b"x").get(30).partition == PARTITIONS - 1
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name,
                       partitioner=kafka.partitioner.DefaultPartitioner()) as p:  # fmt: skip
        assert p._custom_partitioner is False  # the pool's own choice (murmur2, sticky)
        assert p.send(topic, b"x", key=b"key").get(30).partition in range(PARTITIONS)
    assert DefaultPartitioner().partition("t", None, b"key", None, None, _Cluster()) == (
        kafka.partitioner.DefaultPartitioner().partition("t", None, b"key", None, None, _Cluster())
    )


class _Cluster:
    def topics(self) -> set[str]:
        return {"t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0, 1, 2}

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return {0, 1, 2}


def test_public_surface_and_exception_classes(tansu: Peer, topic: str, pool_name: str) -> None:
    mine, theirs = _both(tansu, pool_name)
    try:
        for p in (mine, theirs):
            with pytest.raises(kafka.errors.IllegalStateError):
                p.begin_transaction()
            with pytest.raises(kafka.errors.MessageSizeTooLargeError) as raised:
                p.send(topic, b"x" * 2_000_000)
            assert type(raised.value).__name__ == "MessageSizeTooLargeError"
            with pytest.raises(ValueError, match="Invalid timeout"):
                p.close(-1)
        assert mine.partitions_for(topic) == theirs.partitions_for(topic)
        assert mine.bootstrap_connected()
    finally:
        mine.close(5)
        theirs.close(5)


def test_send_that_cannot_be_delivered_fails_with_kafka_pythons_timeout(pool_name: str) -> None:
    p = KafkaProducer(bootstrap_servers="127.0.0.1:1", pool=pool_name, max_block_ms=300)
    with pytest.raises(kafka.errors.KafkaTimeoutError):
        p.send("nowhere", b"x")
    p.close(0)


def test_sender_errors_are_logged_for_kafka_python_apps(
    pool_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="shmkafka.sender"):
        p = KafkaProducer(bootstrap_servers="127.0.0.1:1", pool=pool_name, max_block_ms=200)
        with pytest.raises(kafka.errors.KafkaTimeoutError):  # (the first use starts the relay)
            p.send("t", b"v")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
            "brokers are down" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.05)
    lines = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert ("shmkafka.sender", "ERROR", "1/1 brokers are down") in lines
    assert any(n == "shmkafka.sender" and "Connect to 127.0.0.1:1 failed" in m for n, _, m in lines)
    p.close(0)
