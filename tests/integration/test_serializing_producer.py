"""confluent-kafka 2.16's SerializingProducer and Producer.cluster_id, side by side: each
behaviour runs against confluent-kafka's own class and shmkafka's on the same Tansu broker;
records are read back with a confluent-kafka consumer and the matching deserializers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.error import KeySerializationError, ValueSerializationError
from confluent_kafka.serialization import (
    IntegerDeserializer,
    IntegerSerializer,
    MessageField,
    SerializationContext,
    StringSerializer,
)

import shmkafka.confluent_kafka
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")
CLASSES = [confluent_kafka.SerializingProducer, shmkafka.confluent_kafka.SerializingProducer]


@pytest.fixture
def topic(tansu: Peer) -> str:
    name = unique_topic("ser")
    with cluster(tansu) as c:
        c.ensure_topic(name, 2)
    return name


def _conf(tansu: Peer, pool_name: str, cls: type, **extra: Any) -> dict[str, Any]:
    conf = {"bootstrap.servers": tansu.bootstrap, **extra}
    if cls is shmkafka.confluent_kafka.SerializingProducer:
        conf["shmkafka.pool"] = pool_name
    return conf


def test_serializers_see_the_context_and_the_records_read_back(
    tansu: Peer, pool_name: str, topic: str
) -> None:
    seen: list[tuple[str, Any, Any, Any]] = []

    def to_json(obj: Any, ctx: SerializationContext) -> bytes:
        seen.append((type_name, ctx.topic, ctx.field, ctx.headers))
        return json.dumps(obj).encode()

    reports: list[tuple[Any, int]] = []
    for cls in CLASSES:
        type_name = cls.__module__
        producer = cls(_conf(tansu, pool_name, cls, **{
            "key.serializer": IntegerSerializer(), "value.serializer": to_json,
        }))  # fmt: skip

        def report(err: Any, msg: Any) -> None:
            reports.append((err, msg.offset()))

        producer.produce(topic, key=7, value={"n": 1}, partition=1, headers=[("h", b"v")],
                         on_delivery=report)  # fmt: skip
        assert producer.flush(30) == 0
        producer.close()
    assert [err for err, _ in reports] == [None, None]
    assert [off for _, off in reports] == [0, 1]
    assert [s[1:3] for s in seen] == [(topic, MessageField.VALUE)] * 2
    assert seen[0][3] == seen[1][3] == [("h", b"v")]
    got = consume_all(tansu, topic, [1], 2)
    keys = [IntegerDeserializer()(m.key(), None) for m in got]
    assert keys == [7, 7] and [json.loads(m.value()) for m in got] == [{"n": 1}] * 2


@pytest.mark.parametrize("cls", CLASSES, ids=["confluent-kafka", "shmkafka"])
def test_serializer_errors_and_checks_before_them(
    tansu: Peer, pool_name: str, topic: str, cls: type
) -> None:
    calls: list[Any] = []

    def broken(obj: Any, ctx: Any) -> bytes:
        calls.append(obj)
        raise ValueError("no")

    producer = cls(_conf(tansu, pool_name, cls, **{
        "key.serializer": StringSerializer(), "value.serializer": broken,
    }))  # fmt: skip
    with pytest.raises(ValueSerializationError) as failed:
        producer.produce(topic, key="k", value="v")
    assert isinstance(failed.value.__cause__ or failed.value.__context__, ValueError)
    with pytest.raises(KeySerializationError):
        producer.produce(topic, key=12, value="v")  # (StringSerializer refuses an int)
    with pytest.raises(TypeError, match="topic must be a str"):
        producer.produce(b"bytes-topic", key="k", value="v")
    assert calls == ["v"]  # the failed key stopped the value's serializer
    producer.close()
    producer.close()  # (a second close does nothing)
    with pytest.raises(RuntimeError, match="Producer has been closed"):
        producer.produce(topic, key="k", value="v")
    assert calls == ["v"]


@pytest.mark.parametrize(
    "make",
    [
        lambda tansu, pool: confluent_kafka.Producer({"bootstrap.servers": tansu.bootstrap}),
        lambda tansu, pool: shmkafka.confluent_kafka.Producer(
            {"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool}
        ),
    ],
    ids=["confluent-kafka", "shmkafka"],
)
def test_cluster_id_is_the_brokers(
    tansu: Peer, pool_name: str, make: Callable[[Peer, str], Any]
) -> None:
    reference = confluent_kafka.Producer({"bootstrap.servers": tansu.bootstrap})
    expected = reference.cluster_id(30)
    reference.flush(1)
    producer = make(tansu, pool_name)
    found = producer.cluster_id(30)
    assert found == expected and found
    producer.flush(1)


@pytest.mark.parametrize("ours", [False, True], ids=["confluent-kafka", "shmkafka"])
def test_aio_producer_futures_give_the_delivered_messages(
    tansu: Peer, pool_name: str, topic: str, ours: bool
) -> None:
    import asyncio

    import confluent_kafka.aio

    import shmkafka.confluent_kafka.aio

    cls = shmkafka.confluent_kafka.aio.AIOProducer if ours else confluent_kafka.aio.AIOProducer
    conf: dict[str, Any] = {"bootstrap.servers": tansu.bootstrap, "enable.idempotence": True}
    if ours:
        conf["shmkafka.pool"] = pool_name

    async def body() -> list[Any]:
        async with cls(conf) as producer:
            futures = [await producer.produce(topic, b"%d" % i, partition=0) for i in range(50)]
            with pytest.raises(NotImplementedError, match="Headers are not supported"):
                await producer.produce(topic, b"h", headers=[("h", b"v")])
            await producer.flush()
            messages = list(await asyncio.gather(*futures))
            assert (await producer.cluster_id()) is not None
            assert topic in (await producer.list_topics(topic, timeout=10)).topics
        return messages

    messages = asyncio.run(body())
    assert [m.value() for m in messages] == [b"%d" % i for i in range(50)]
    assert all(m.error() is None and m.topic() == topic and m.partition() == 0 for m in messages)
    offsets = [m.offset() for m in messages]
    assert offsets == list(range(offsets[0], offsets[0] + 50))


def test_aio_producer_awaits_room_in_a_full_queue(tansu: Peer, pool_name: str, topic: str) -> None:
    """With the queue full (queue.buffering.max.messages), ``await produce()`` waits for
    room instead of raising BufferError; records that find none within the delivery timeout
    get _QUEUE_FULL in their future, as confluent-kafka's AIOProducer reports a refused one."""
    import asyncio

    import shmkafka.confluent_kafka.aio

    async def body() -> list[Any]:
        conf = {"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name,
                "queue.buffering.max.messages": 10}  # fmt: skip
        async with shmkafka.confluent_kafka.aio.AIOProducer(conf) as producer:
            futures = [await producer.produce(topic, b"%d" % i, partition=0) for i in range(200)]
            return list(await asyncio.gather(*futures))

    messages = asyncio.run(body())
    assert [m.value() for m in messages] == [b"%d" % i for i in range(200)]
    offsets = [m.offset() for m in messages]
    assert offsets == list(range(offsets[0], offsets[0] + 200))


def test_aio_producer_fails_a_record_that_finds_no_room_in_time(pool_name: str) -> None:
    import asyncio
    import time

    import shmkafka.confluent_kafka.aio

    async def nowhere() -> list[Any]:
        conf = {"bootstrap.servers": "127.0.0.1:9", "shmkafka.pool": pool_name,
                "queue.buffering.max.messages": 1, "message.timeout.ms": 300}  # fmt: skip
        producer = shmkafka.confluent_kafka.aio.AIOProducer(conf)
        futures = [await producer.produce("nowhere", b"a"), await producer.produce("nowhere", b"b")]
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        await producer.close()
        return [o.args[0].code() for o in outcomes]

    began = time.monotonic()
    first, second = asyncio.run(nowhere())
    # the first times out in the pool; the second waited for room until its own delivery
    # timeout: it fails _QUEUE_FULL, or _MSG_TIMED_OUT if the first's expiry made room just
    # before (both deadlines are 300 ms) -- never a BufferError, never a hang
    assert first == confluent_kafka.KafkaError._MSG_TIMED_OUT
    assert second in (confluent_kafka.KafkaError._QUEUE_FULL,
                      confluent_kafka.KafkaError._MSG_TIMED_OUT)  # fmt: skip
    assert time.monotonic() - began < 10
