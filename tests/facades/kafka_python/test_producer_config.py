"""Argument checking of ``KafkaProducer``: every error comes before anything reaches shared
memory (no broker, no pool is made). The confluent API's:
tests/facades/confluent/test_config.py."""

from __future__ import annotations

import os

import pytest

from shmkafka import KafkaProducer
from shmkafka.errors import KafkaConfigurationError


def _pools() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("shmkafka.p")}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lingr_ms": 5}, "unknown KafkaProducer argument 'lingr_ms'; did you mean 'linger_ms'"),
        ({"bootstrap_server": "x"}, "did you mean 'bootstrap_servers'"),
        ({"ssl_context": object()}, "ssl_context cannot cross into the Sender process"),
        ({"security_protocol": "SASL_SSL"}, "sasl_mechanism is required with SASL_SSL"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"}, "not supported"),
        ({"security_protocol": "TLS"}, "security_protocol must be one of"),
        (
            {"transactional_id": "t", "enable_idempotence": False},
            "Cannot set transactional_id without enable_idempotence",  # kafka-python's words
        ),
        ({"acks": 2}, "acks must be 0, 1, -1 or 'all'"),
        ({"compression_type": "brotli"}, "Not supported codec: brotli"),
        ({"linger_ms": -1}, "linger_ms must be >= 0"),
        ({"batch_size": 10}, "batch_size must be an integer within"),
        ({"key_serializer": 5}, "key_serializer must be callable"),
        ({"delivery_timeout_ms": 10}, "Must set delivery_timeout_ms higher than linger_ms"),
        ({"enable_idempotence": True, "acks": 1}, "incompatible with user-provided acks=1"),
        (
            {"enable_idempotence": True, "acks": 0, "retries": 0},
            r"incompatible with user-provided acks=0, retries=0",  # all named together
        ),
        ({"enable_idempotence": True, "api_version": (0, 10)}, "requires broker >= 0.11"),
        ({"pool": "bad name!"}, "invalid pool name"),
    ],
)
def test_kafka_producer_rejects_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    before = _pools()
    with pytest.raises(KafkaConfigurationError, match=message):
        KafkaProducer(bootstrap_servers="127.0.0.1:1", **kwargs)
    assert isinstance(KafkaConfigurationError("x"), ValueError)  # kafka-python catches these
    assert _pools() == before


def test_batch_size_is_the_most_a_batch_grows_to() -> None:
    """config reports kafka-python's default; not given, the pool's batches grow with their
    load up to 1 MB; given, it is the most a batch holds."""
    import kafka

    from shmkafka.facades.kafka_python.producer import resolved_config, settings_for

    assert resolved_config({})["batch_size"] == kafka.KafkaProducer.DEFAULT_CONFIG["batch_size"]
    assert resolved_config({})["batch_size"] == 16384
    assert settings_for({}).pool.batch_size == 1_000_000
    assert settings_for({}).pool.max_run == 61  # from one 16 KiB slab up to 61
    small = settings_for({"batch_size": 16384}).pool
    assert (small.batch_size, small.max_run, small.batch_max_records) == (16384, 1, 0)
