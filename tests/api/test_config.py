"""Argument and property checking of both drop-in APIs: every error comes before anything
reaches shared memory (no broker, no pool is made)."""

from __future__ import annotations

import os

import pytest

from shmkafka import KafkaProducer, Producer
from shmkafka.errors import KafkaConfigurationError
from shmkafka.producer.confluent import KafkaError, KafkaException
from shmkafka.producer.confluent_config import parse


def _pools() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("shmkafka.p")}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lingr_ms": 5}, "unknown KafkaProducer argument 'lingr_ms'; did you mean 'linger_ms'"),
        ({"bootstrap_server": "x"}, "did you mean 'bootstrap_servers'"),
        ({"security_protocol": "SSL"}, "PLAINTEXT only"),
        ({"transactional_id": "t"}, "transactions are not supported"),
        ({"acks": 2}, "acks must be 0, 1, -1 or 'all'"),
        ({"compression_type": "brotli"}, "compression_type"),
        ({"linger_ms": -1}, "linger_ms must be >= 0"),
        ({"batch_size": 10}, "batch_size must be an integer within"),
        ({"key_serializer": 5}, "key_serializer must be callable"),
        ({"delivery_timeout_ms": 10}, "delivery_timeout_ms must be >="),
        ({"enable_idempotence": True, "acks": 1}, "enable_idempotence requires acks=all"),
        ({"pool": "bad name!"}, "invalid pool name"),
    ],
)
def test_kafka_producer_rejects_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    before = _pools()
    with pytest.raises(KafkaConfigurationError, match=message):
        KafkaProducer(bootstrap_servers="127.0.0.1:1", **kwargs)
    assert isinstance(KafkaConfigurationError("x"), ValueError)  # kafka-python catches these
    assert _pools() == before


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"lingr.ms": 5}, "No such configuration property: 'lingr.ms' (did you mean 'linger.ms'"),
        ({"acks": "two"}, "acks: expected all, -1, 0 or 1"),
        ({"linger.ms": "soon"}, "linger.ms: expected an integer"),
        ({"enable.idempotence": "maybe"}, "enable.idempotence: expected true or false"),
        ({"partitioner": "crc"}, "partitioner: expected one of random, consistent"),
        ({"compression.codec": "brotli"}, "compression.codec: expected none, gzip"),
        ({"security.protocol": "SSL"}, "only plaintext"),
        ({"transactional.id": "t"}, "transactions are not supported"),
        ({"on_delivery": 3}, "on_delivery: expected a callable"),
        ({"message.timeout.ms": 100}, "delivery_timeout_ms must be >="),
    ],
)
def test_producer_rejects_bad_properties(conf: dict[str, object], message: str) -> None:
    before = _pools()
    with pytest.raises(KafkaException) as raised:
        Producer({"bootstrap.servers": "127.0.0.1:1", **conf})
    error = raised.value.args[0]
    assert error.code() == KafkaError._INVALID_ARG and error.name() == "_INVALID_ARG"
    assert message in error.str()
    assert _pools() == before


def test_producer_needs_a_dict_and_bootstrap_servers() -> None:
    with pytest.raises(TypeError, match="expected configuration dict"):
        Producer("bootstrap.servers=x")  # type: ignore[arg-type]
    with pytest.raises(KafkaException, match=r"bootstrap\.servers is required"):
        Producer({"linger.ms": 5})


def test_librdkafka_properties_map_onto_settings() -> None:
    settings, ignored = parse({
        "bootstrap.servers": "a:1", "queue.buffering.max.ms": "7", "compression.codec": "lz4",
        "message.timeout.ms": 60000, "enable.idempotence": "true", "acks": "1",
        "queue.buffering.max.kbytes": 1024, "socket.keepalive.enable": True, "debug": "all",
    })  # fmt: skip
    assert settings["linger_ms"] == 7 and settings["compression_type"] == "lz4"
    assert settings["delivery_timeout_ms"] == 60000 and settings["buffer_kbytes"] == 1024
    assert settings["enable_idempotence"] and settings["acks"] == -1  # idempotence forces all
    assert settings["partitioner"] == "consistent_random"  # librdkafka's default
    assert sorted(ignored) == ["debug", "socket.keepalive.enable"]


def test_kafka_error_objects_behave_like_confluent_kafkas() -> None:
    error = KafkaError(KafkaError._MSG_TIMED_OUT)
    assert error.code() == -192 and error.name() == "_MSG_TIMED_OUT"
    assert error.str() == "Local: Message timed out" and str(error) == error.str()
    assert error == KafkaError._MSG_TIMED_OUT and not error.retriable() and not error.fatal()
    broker = KafkaError(10)
    assert broker.name() == "MESSAGE_TOO_LARGE" and broker == KafkaError.MSG_SIZE_TOO_LARGE
    assert KafkaException(error).args[0] is error
