"""confluent-kafka 2.16's Schema Registry serializers through SerializingProducer and
AsyncSerializingProducer, side by side: each behaviour runs against confluent-kafka's own
class and shmkafka's on the same Tansu broker; records are read back with a confluent-kafka
consumer and decoded with the matching deserializer and the same registry.

The registry is confluent-kafka's mock: ``SchemaRegistryClient.new_client`` (and the
builders) give a ``MockSchemaRegistryClient`` for a ``mock://`` url, whose schemas live in
that one client object (two clients of the same url share nothing; a plain
``SchemaRegistryClient(conf)`` is a real HTTP client even for ``mock://``). So a record is
decoded with the very client that registered its schema; for a serializer built by a
builder, the one it owns (``serializer_init`` hands the serializer over)."""

from __future__ import annotations

import asyncio
import gc
import inspect
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import confluent_kafka
import confluent_kafka.aio
import pytest
from confluent_kafka.error import KeySerializationError, ValueSerializationError
from confluent_kafka.schema_registry import (
    AssociationCreateOrUpdateInfo,
    AssociationCreateOrUpdateRequest,
    AsyncSchemaRegistryClient,
    SchemaRegistryClient,
)
from confluent_kafka.schema_registry.avro import (
    AsyncAvroDeserializer,
    AsyncAvroSerializer,
    AsyncAvroSerializerBuilder,
    AvroDeserializer,
    AvroSerializer,
    AvroSerializerBuilder,
)
from confluent_kafka.schema_registry.json_schema import (
    AsyncJSONDeserializer,
    AsyncJSONSerializer,
    JSONDeserializer,
    JSONSerializer,
)
from confluent_kafka.schema_registry.protobuf import (
    AsyncProtobufDeserializer,
    AsyncProtobufSerializer,
    ProtobufDeserializer,
    ProtobufSerializer,
)
from confluent_kafka.serialization import (
    MessageField,
    SerializationContext,
    StringDeserializer,
    StringSerializer,
)
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

import shmkafka.confluent_kafka
import shmkafka.confluent_kafka.aio
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

_T = TypeVar("_T")
pytestmark = pytest.mark.usefixtures("pool_removed")
CLASSES = [confluent_kafka.SerializingProducer, shmkafka.confluent_kafka.SerializingProducer]
ASYNC_CLASSES = [
    confluent_kafka.aio.AsyncSerializingProducer,
    shmkafka.confluent_kafka.aio.AsyncSerializingProducer,
]
OURS = (shmkafka.confluent_kafka.SerializingProducer, *ASYNC_CLASSES[1:])

AVRO = """{"type": "record", "name": "User", "namespace": "shmkafka.test",
 "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}"""
JSON_SCHEMA = """{"type": "object", "title": "User",
 "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
 "required": ["name"]}"""


def _user_message_class() -> Any:
    """A protobuf message class made at run time (no protoc): ``shmkafka.test.User``."""
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="shmkafka_test/user.proto", package="shmkafka.test", syntax="proto3"
    )
    user = proto.message_type.add(name="User")
    user.field.add(name="name", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    user.field.add(name="age", number=2, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shmkafka.test.User"))


User = _user_message_class()


def _registry() -> Any:
    return SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})


def _run(body: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run``, then a collection: an asyncio serializer holds its producer's
    cluster-id resolver (a bound ``cluster_id``), and the producer holds the serializer, so
    a dropped producer waits for the cycle collector; confluent-kafka's ``close()`` leaves
    its librdkafka client open until then, and Tansu would wait for that connection when
    the session stops it."""
    try:
        return asyncio.run(body)
    finally:
        gc.collect()


def _async_registry() -> Any:
    return AsyncSchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})


def _associations(topic: str, field: str, cluster_id: str) -> list[Any]:
    """Two associations of ``topic``'s ``field`` ("key" or "value"): subject "by-cluster-id"
    under the broker's cluster id, subject "elsewhere" under another cluster. A serializer
    whose producer hands it the cluster id registers under "by-cluster-id"; one without
    looks up the "-" wildcard, finds both and fails ("Multiple associated subjects")."""
    return [
        AssociationCreateOrUpdateRequest(
            resource_name=topic,
            resource_namespace=namespace,
            resource_id=uuid.uuid4().hex,
            resource_type="topic",
            associations=[AssociationCreateOrUpdateInfo(subject=subject, association_type=field)],
        )
        for namespace, subject in ((cluster_id, "by-cluster-id"), ("other", "elsewhere"))
    ]


def _cluster_id(tansu: Peer) -> str:
    reference = confluent_kafka.Producer({"bootstrap.servers": tansu.bootstrap})
    found = reference.cluster_id(30)
    reference.flush(1)
    assert found
    return str(found)


@pytest.fixture
def topic(tansu: Peer) -> str:
    name = unique_topic("sr")
    with cluster(tansu) as c:
        c.ensure_topic(name, 2)
    return name


def _conf(tansu: Peer, pool_name: str, cls: type, **extra: Any) -> dict[str, Any]:
    conf = {"bootstrap.servers": tansu.bootstrap, **extra}
    if cls in OURS:
        conf["shmkafka.pool"] = pool_name
    return conf


def _by_partition(messages: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {0: [], 1: []}
    for m in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        out[m.partition()].append(m)
    return out


def _value_ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


FORMATS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], list[Any]]] = {
    # format: (serializer for a registry, deserializer for it, the values sent)
    "avro": (
        lambda reg: AvroSerializer(reg, AVRO),
        lambda reg: AvroDeserializer(reg),
        [{"name": "ada", "age": 36}, {"name": "bo", "age": 0}],
    ),
    "json": (
        lambda reg: JSONSerializer(JSON_SCHEMA, reg),
        lambda reg: JSONDeserializer(JSON_SCHEMA, schema_registry_client=reg),
        [{"name": "ada", "tags": ["x", "y"]}, {"name": "bo"}],
    ),
    "protobuf": (
        lambda reg: ProtobufSerializer(User, reg),
        lambda reg: ProtobufDeserializer(User, schema_registry_client=reg),
        [User(name="ada", age=36), User(name="bo")],
    ),
}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_registry_serializers_round_trip(tansu: Peer, pool_name: str, topic: str, fmt: str) -> None:
    make_serializer, make_deserializer, values = FORMATS[fmt]
    registries, errors = [], []
    for partition, cls in enumerate(CLASSES):  # (confluent-kafka's on 0, shmkafka's on 1)
        registry = _registry()
        registries.append(registry)
        producer = cls(_conf(tansu, pool_name, cls, **{
            "key.serializer": StringSerializer(), "value.serializer": make_serializer(registry),
        }))  # fmt: skip
        for i, value in enumerate(values):
            producer.produce(topic, key=f"k{i}", value=value, partition=partition,
                             on_delivery=lambda err, msg: errors.append(err))  # fmt: skip
        assert producer.flush(30) == 0
        producer.close()
        assert errors == [None] * len(values) * (partition + 1)
        assert registry.get_subjects() == [f"{topic}-value"]  # each class registered it
    got = _by_partition(consume_all(tansu, topic, [0, 1], 2 * len(values)))
    for partition, registry in enumerate(registries):
        records = got[partition]
        decode = make_deserializer(registry)
        keys = [StringDeserializer()(m.key(), None) for m in records]
        assert keys == [f"k{i}" for i in range(len(values))]
        assert [decode(m.value(), _value_ctx(topic)) for m in records] == values
        assert all(m.value()[:5] == b"\x00\x00\x00\x00\x01" for m in records)  # magic, id 1
    assert [m.value() for m in got[0]] == [m.value() for m in got[1]]  # the same bytes


def test_builder_serializers_are_owned_and_closed(tansu: Peer, pool_name: str, topic: str) -> None:
    cluster_id = _cluster_id(tansu)
    built: list[Any] = []
    key_registries: list[Any] = []
    key_schema = '{"type": "string"}'
    for partition, cls in enumerate(CLASSES):
        key_registry = _registry()  # (the application's: given ready-made, never closed)
        key_registries.append(key_registry)
        for request in _associations(topic, "key", cluster_id):
            key_registry.create_association(request)
        builder = AvroSerializerBuilder().set_schema(AVRO).set_serializer_init(built.append)
        builder.set_schema_registry_config({"url": f"mock://{uuid.uuid4().hex}"})
        producer = cls(_conf(tansu, pool_name, cls, **{
            "key.serializer": AvroSerializer(key_registry, key_schema),
            "value.serializer.builder": builder,
        }))  # fmt: skip
        serializer = built[-1]
        session = serializer._registry._rest_client.session
        assert len(built) == partition + 1 and not session.is_closed
        producer.produce(topic, key="k", value={"name": cls.__module__, "age": 1},
                         partition=partition)  # fmt: skip
        assert producer.flush(30) == 0
        assert key_registry.get_subjects() == ["by-cluster-id"]  # (the producer's cluster id)
        producer.close()
        assert session.is_closed  # the registry client the builder made, closed with it
        producer.close()  # (a second close does nothing)
        assert not key_registry._rest_client.session.is_closed
        with pytest.raises(ValueError, match="Cannot configure both"):
            cls(_conf(tansu, pool_name, cls, **{
                "value.serializer": StringSerializer(), "value.serializer.builder": builder,
            }))  # fmt: skip
    got = _by_partition(consume_all(tansu, topic, [0, 1], 2))
    for partition, cls in enumerate(CLASSES):
        (record,) = got[partition]
        decode = AvroDeserializer(built[partition]._registry)  # (its schemas outlive close)
        assert decode(record.value(), _value_ctx(topic)) == {"name": cls.__module__, "age": 1}
        key_ctx = SerializationContext(topic, MessageField.KEY)
        decode_key = AvroDeserializer(key_registries[partition], conf={
            "subject.name.strategy.conf": {"subject.name.strategy.kafka.cluster.id": cluster_id},
        })  # fmt: skip
        assert decode_key(record.key(), key_ctx) == "k"


ASYNC_FORMATS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], list[Any]]] = {
    # format: (asyncio serializer for a registry, its deserializer, the values sent)
    "avro": (
        lambda reg: AsyncAvroSerializer(reg, schema_str=AVRO),
        lambda reg: AsyncAvroDeserializer(reg),
        [{"name": "ada", "age": 36}, {"name": "bo", "age": 7}],
    ),
    "json": (
        lambda reg: AsyncJSONSerializer(JSON_SCHEMA, reg),
        lambda reg: AsyncJSONDeserializer(JSON_SCHEMA, schema_registry_client=reg),
        [{"name": "ada", "tags": ["x"]}, {"name": "bo"}],
    ),
    "protobuf": (
        lambda reg: AsyncProtobufSerializer(User, reg),
        lambda reg: AsyncProtobufDeserializer(User, schema_registry_client=reg),
        [User(name="ada", age=36), User(name="bo")],
    ),
}


async def _made(obj: Any) -> Any:
    """An asyncio serde: its construction is awaited when it is awaitable."""
    return (await obj) if inspect.isawaitable(obj) else obj


@pytest.mark.parametrize("fmt", list(ASYNC_FORMATS))
def test_async_producer_serializes_and_reads_back(
    tansu: Peer, pool_name: str, topic: str, fmt: str
) -> None:
    make_serializer, make_deserializer, values = ASYNC_FORMATS[fmt]
    registries = [_async_registry() for _ in ASYNC_CLASSES]

    async def body(partition: int, cls: Any) -> list[Any]:
        serializer = await _made(make_serializer(registries[partition]))
        producer = await cls(_conf(tansu, pool_name, cls, **{
            "key.serializer": lambda key, ctx: f"{ctx.topic}/{key}".encode(),  # (plain sync)
            "value.serializer": serializer,
        }))  # fmt: skip
        assert isinstance(producer, cls)
        futures = [
            await producer.produce(topic, key=i, value=v, partition=partition)
            for i, v in enumerate(values)
        ]
        assert all(isinstance(f, asyncio.Future) for f in futures)
        await producer.flush()
        messages = list(await asyncio.gather(*futures))
        await producer.close()
        decode = await _made(make_deserializer(registries[partition]))
        assert [await decode(m.value(), _value_ctx(topic)) for m in messages] == values
        return messages

    for partition, cls in enumerate(ASYNC_CLASSES):
        messages = _run(body(partition, cls))
        assert all(isinstance(m, confluent_kafka.Message) for m in messages)
        assert [(m.error(), m.topic(), m.partition()) for m in messages] == [
            (None, topic, partition)
        ] * 2
        assert [m.key() for m in messages] == [f"{topic}/0".encode(), f"{topic}/1".encode()]
        assert messages[1].offset() == messages[0].offset() + 1

    got = _by_partition(consume_all(tansu, topic, [0, 1], 4))

    async def decode_all() -> list[list[Any]]:
        out = []
        for partition, registry in enumerate(registries):
            decode = await _made(make_deserializer(registry))
            out.append([await decode(m.value(), _value_ctx(topic)) for m in got[partition]])
        return out

    assert asyncio.run(decode_all()) == [values, values]
    assert [m.value() for m in got[0]] == [m.value() for m in got[1]]


@pytest.mark.parametrize("cls", ASYNC_CLASSES, ids=["confluent-kafka", "shmkafka"])
def test_async_checks_errors_and_close(tansu: Peer, pool_name: str, topic: str, cls: Any) -> None:
    cluster_id = _cluster_id(tansu)
    registry = _async_registry()
    keys: list[Any] = []

    def key_serializer(key: Any, ctx: SerializationContext) -> bytes:
        keys.append(key)
        if not isinstance(key, str):
            raise ValueError("keys are str")
        return key.encode()

    async def body() -> None:
        for request in _associations(topic, "value", cluster_id):
            await registry.create_association(request)
        construction = cls(_conf(tansu, pool_name, cls, **{
            "key.serializer": key_serializer,
            "value.serializer": await AsyncAvroSerializer(registry, schema_str=AVRO),
        }))  # fmt: skip
        assert asyncio.iscoroutine(construction)  # (construction is awaited)
        producer = await construction
        assert isinstance(producer, cls)
        value = {"name": "ada", "age": 1}
        with pytest.raises(TypeError, match="topic must be a str, not bytes"):
            await producer.produce(topic.encode(), key="k", value=value)
        assert keys == [] and await registry.get_subjects() == []  # no serializer ran
        with pytest.raises(KeySerializationError) as failed:
            await producer.produce(topic, key=12, value=value)
        assert isinstance(failed.value.__cause__ or failed.value.__context__, ValueError)
        assert await registry.get_subjects() == []  # (nor did the value's after it)
        with pytest.raises(ValueSerializationError):
            await producer.produce(topic, key="k", value={"name": "no age"})
        with pytest.raises(NotImplementedError, match="Headers are not supported"):  # (after)
            await producer.produce(topic, key="k", value=value, headers=[("h", b"v")])
        future = await producer.produce(topic, key="k", value=value, partition=1)
        await producer.flush()  # (confluent-kafka's would wait for its buffer_timeout)
        delivered = await future
        assert delivered.error() is None and delivered.partition() == 1
        assert await registry.get_subjects() == ["by-cluster-id"]  # (the producer's cluster id)
        await producer.close()
        await producer.close()  # (a second close does nothing)
        with pytest.raises(RuntimeError, match="Producer has been closed"):
            await producer.produce(topic, key="k", value=value)
        assert keys == [12, "k", "k", "k"]

        built: list[Any] = []

        async def keep(serializer: Any) -> None:  # (an async builder's init is awaited)
            built.append(serializer)

        async def reversed_key(key: str, ctx: SerializationContext) -> bytes:
            await asyncio.sleep(0)
            return key[::-1].encode()

        builder = AsyncAvroSerializerBuilder().set_schema(AVRO).set_serializer_init(keep)
        builder.set_schema_registry_config({"url": f"mock://{uuid.uuid4().hex}"})
        producer = await cls(_conf(tansu, pool_name, cls, **{
            "key.serializer": reversed_key, "value.serializer.builder": builder,
        }))  # fmt: skip
        (serializer,) = built
        session = serializer._registry._rest_client.session
        assert not session.is_closed
        future = await producer.produce(topic, key="abc", value=value, partition=0)
        await producer.flush()
        delivered = await future
        assert delivered.key() == b"cba"  # (a coroutine's result, awaited)
        decode = await AsyncAvroDeserializer(serializer._registry)
        assert await decode(delivered.value(), _value_ctx(topic)) == value
        await producer.close()
        assert session.is_closed  # the registry client the builder made, closed with it
        await producer.close()

        with pytest.raises(confluent_kafka.KafkaException, match="Invalid value"):
            await cls(_conf(tansu, pool_name, cls, **{
                "value.serializer.builder": builder, "linger.ms": "soon",
            }))  # fmt: skip
        assert built[1]._registry._rest_client.session.is_closed  # (closed as it failed)

    _run(body())
