"""Errors of the shared-memory pool reach the caller only as the peer's error types: a
``KafkaError`` subclass from ``KafkaProducer`` (kafka-python's API), a ``KafkaException`` (or
``BufferError`` for no memory now) from ``Producer`` (confluent-kafka's). Each public call is
checked with a failure injected into the pool under it."""

from __future__ import annotations

import asyncio
import errno
import re
from collections.abc import Iterator
from typing import Any

import posix_ipc
import pytest

from shmkafka import KafkaProducer, Producer
from shmkafka.aiokafka import AIOKafkaProducer
from shmkafka.confluent_kafka import KafkaException
from shmkafka.errors import (
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    PoolCapacityError,
    PoolError,
    PoolSettingsMismatchError,
)
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer import client as handle_module
from shmkafka.producer.client import Client
from shmkafka.shm.errors import (
    BufferExhaustedError,
    CapacityError,
    LockTimeoutError,
    PoolNotFoundError,
    RecordTooLargeError,
    SegmentSpaceError,
    ShmError,
)
from tests.conftest import publish, wait_removed

pytestmark = pytest.mark.usefixtures("pool_removed")


@pytest.fixture
def kafka_producer(pool_name: str) -> Iterator[KafkaProducer]:
    producer = KafkaProducer(
        bootstrap_servers="127.0.0.1:1",
        pool=pool_name,
        max_block_ms=500,
        request_timeout_ms=500,
        delivery_timeout_ms=1000,  # what no broker takes expires, and the pool goes idle
    )
    publish(producer._handle.pool, {"t": 1})
    yield producer
    producer.close(0)


@pytest.fixture
def confluent_producer(pool_name: str) -> Iterator[Producer]:
    producer = Producer({
        "bootstrap.servers": "127.0.0.1:1", "shmkafka.pool": pool_name + "c",
        "request.timeout.ms": 500, "message.timeout.ms": 1000,
    })  # fmt: skip
    publish(producer._handle.pool, {"t": 1})
    yield producer
    producer.purge()
    producer.close(0)
    wait_removed(pool_name + "c")


def _fail_appends(patch: pytest.MonkeyPatch, handle: Client, error: Any) -> None:
    """Every append raises ``error`` (the C path is switched off so the Python one runs)."""

    def fail(*args: Any, **kwargs: Any) -> None:
        raise error

    patch.setattr(handle, "_fast", None)
    patch.setattr(handle.accumulator, "append_to", fail)


@pytest.mark.parametrize(
    "error",
    [
        SegmentSpaceError("/dev/shm has 1 MiB free, the pool needs 44 MiB"),
        OSError(errno.EMFILE, "Too many open files"),
        posix_ipc.PermissionsError("Permission denied"),
    ],
)
def test_constructors(monkeypatch: pytest.MonkeyPatch, pool_name: str, error: Exception) -> None:
    def fail(*args: Any, **kwargs: Any) -> None:
        raise error

    with monkeypatch.context() as patch:
        patch.setattr(SharedPool, "open", fail)
        with pytest.raises(PoolError, match=re.escape(str(error))) as caught:
            KafkaProducer(bootstrap_servers="127.0.0.1:1", pool=pool_name)
        assert not isinstance(caught.value, ShmError | posix_ipc.Error | OSError)
        with pytest.raises(KafkaException, match=re.escape(str(error))) as raised:
            Producer({"bootstrap.servers": "127.0.0.1:1", "shmkafka.pool": pool_name})
        # a full /dev/shm is a limit of the pool (_QUEUE_FULL, PoolCapacityError); else _FAIL
        full = isinstance(error, SegmentSpaceError)
        assert raised.value.args[0].code() == (-184 if full else -196)
        assert isinstance(caught.value, PoolCapacityError) == full


def test_settings_mismatch_is_a_configuration_error(kafka_producer: KafkaProducer) -> None:
    pool = kafka_producer._client.pool.name
    with pytest.raises(PoolSettingsMismatchError, match="linger_ms") as caught:
        KafkaProducer(bootstrap_servers="127.0.0.1:1", pool=pool, linger_ms=7)
    assert isinstance(caught.value, KafkaConfigurationError)


def test_the_three_apis_share_one_pool_with_equal_settings(pool_name: str) -> None:
    """docs/configuration.md's example: with equal Sender-level settings and pool sizes the
    three APIs join one pool. Before, confluent-kafka's ``batch.num.messages`` (1 and up)
    could never equal the others' (none, not settable), and its SASL mechanism's default
    (GSSAPI) differed from theirs (PLAIN) without SASL in use."""
    common = {"bootstrap_servers": "127.0.0.1:1", "client_id": "web", "acks": "all",
              "linger_ms": 5, "request_timeout_ms": 10_000, "metadata_max_age_ms": 10_000,
              "pool": pool_name, "batch_max_records": 10_000}  # fmt: skip
    kafka = KafkaProducer(**common)
    try:
        confluent = Producer({
            "bootstrap.servers": "127.0.0.1:1", "client.id": "web", "acks": "all",
            "linger.ms": 5, "enable.idempotence": True, "request.timeout.ms": 10_000,
            "message.timeout.ms": 120_000, "metadata.max.age.ms": 10_000,
            "message.max.bytes": 1_048_576, "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 1000, "shmkafka.pool": pool_name,
        })  # fmt: skip
        assert confluent._handle.pool.name == kafka._handle.pool.name == pool_name

        async def aiokafka_joins() -> None:
            producer = AIOKafkaProducer(enable_idempotence=True, **common)
            await producer.start()
            assert producer._client is not None and producer._client.pool.name == pool_name
            await producer.stop()

        asyncio.run(aiokafka_joins())
        with pytest.raises(KafkaException, match="batch_max_records"):
            Producer({"bootstrap.servers": "127.0.0.1:1", "client.id": "web",
                      "shmkafka.pool": pool_name, "batch.num.messages": 500})  # fmt: skip
        confluent.close(0)
    finally:
        kafka.close(0)


class _GoneSemaphore:
    value = 0

    def release(self) -> None:
        raise posix_ipc.ExistentialError("the Sender's semaphore is gone")


def test_asking_for_a_topic(
    kafka_producer: KafkaProducer, confluent_producer: Producer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic not in the pool yet is requested from the Sender (a semaphore post)."""
    with monkeypatch.context() as patch:
        patch.setattr(kafka_producer._handle, "_sender_sem", _GoneSemaphore())
        patch.setattr(confluent_producer._handle, "_sender_sem", _GoneSemaphore())
        with pytest.raises(PoolError, match="semaphore is gone"):
            kafka_producer.partitions_for("unknown-topic")
        with pytest.raises(PoolError, match="semaphore is gone"):
            kafka_producer.send("unknown-topic", b"v")
        with pytest.raises(KafkaException, match="semaphore is gone"):
            confluent_producer.produce("another-unknown-topic", b"v")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (CapacityError("every deque is taken"), PoolCapacityError),
        (LockTimeoutError("lock 3 held by pid 42"), KafkaTimeoutError),
        (BufferExhaustedError("no slab in 500 ms"), KafkaTimeoutError),
        (RecordTooLargeError("a record of 2 MiB"), MessageSizeTooLargeError),
        (posix_ipc.ExistentialError("semaphore gone"), PoolError),
    ],
)
def test_kafka_producer_send(
    kafka_producer: KafkaProducer,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
    expected: type[KafkaError],
) -> None:
    with monkeypatch.context() as patch, pytest.raises(expected, match=str(error)) as caught:
        _fail_appends(patch, kafka_producer._handle, error)
        kafka_producer.send("t", b"v", partition=0)
    assert not isinstance(caught.value, ShmError | posix_ipc.Error)


def test_kafka_producer_flush(
    kafka_producer: KafkaProducer, monkeypatch: pytest.MonkeyPatch
) -> None:
    kafka_producer.send("t", b"v", partition=0)  # pending: no broker answers

    def gone(*args: Any) -> None:
        raise PoolNotFoundError("pool vanished")

    with monkeypatch.context() as patch, pytest.raises(PoolError, match="pool vanished"):
        patch.setattr(kafka_producer._handle.pool.slots, "set_flushing", gone)
        kafka_producer.flush(1)


def test_kafka_producer_partitions_for(
    kafka_producer: KafkaProducer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(topic: str) -> None:
        raise CapacityError("max_topics (8) topic requests pending")

    with monkeypatch.context() as patch, pytest.raises(PoolError, match="topic requests pending"):
        patch.setattr(kafka_producer._handle.pool.directory, "request_topic", full)
        kafka_producer.partitions_for("unknown-topic")


@pytest.mark.parametrize(
    ("error", "expected", "code"),
    [
        (CapacityError("every deque is taken"), KafkaException, -184),  # _QUEUE_FULL: a pool limit
        (LockTimeoutError("lock 3 held by pid 42"), KafkaException, -185),  # _TIMED_OUT
        (RecordTooLargeError("a record of 2 MiB"), KafkaException, 10),  # MSG_SIZE_TOO_LARGE
        (BufferExhaustedError("no slab now"), BufferError, None),  # as librdkafka's queue full
    ],
)
def test_confluent_produce(
    confluent_producer: Producer,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
    expected: type[Exception],
    code: int | None,
) -> None:
    with monkeypatch.context() as patch, pytest.raises(expected) as caught:
        _fail_appends(patch, confluent_producer._handle, error)
        confluent_producer.produce("t", b"v", partition=0)
    if code is not None:
        assert caught.value.args[0].code() == code


def test_confluent_flush(confluent_producer: Producer, monkeypatch: pytest.MonkeyPatch) -> None:
    confluent_producer.produce("t", b"v", partition=0)  # pending: no broker answers

    def gone(sem: Any) -> None:
        raise posix_ipc.ExistentialError("the Sender's semaphore is gone")

    with monkeypatch.context() as patch, pytest.raises(KafkaException, match="semaphore is gone"):
        patch.setattr(handle_module, "wake", gone)
        confluent_producer.flush(1)


def test_confluent_list_topics(
    confluent_producer: Producer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(topic: str) -> None:
        raise CapacityError("max_topics (8) topic requests pending")

    with monkeypatch.context() as patch, pytest.raises(KafkaException, match="requests pending"):
        patch.setattr(confluent_producer._handle.pool.directory, "request_topic", full)
        confluent_producer.list_topics("unknown-topic", timeout=1)
