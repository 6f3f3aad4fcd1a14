"""The value types of the confluent-kafka API: confluent-kafka's own classes when it is
installed (so ``except confluent_kafka.KafkaException`` and ``isinstance(err,
confluent_kafka.KafkaError)`` hold for what shmkafka gives), else the pure-Python ones of
``pure`` with the same behaviour.
"""

from __future__ import annotations

try:
    from confluent_kafka import (
        OFFSET_INVALID,
        TIMESTAMP_CREATE_TIME,
        TIMESTAMP_LOG_APPEND_TIME,
        TIMESTAMP_NOT_AVAILABLE,
        KafkaError,
        KafkaException,
        Message,
        TopicPartition,
    )

    PEER_INSTALLED = True
except ImportError:  # pragma: no cover - tests/facades/test_peer_modules_types.py runs this branch
    from shmkafka.facades.confluent.pure import (  # type: ignore[assignment]
        OFFSET_INVALID,
        TIMESTAMP_CREATE_TIME,
        TIMESTAMP_LOG_APPEND_TIME,
        TIMESTAMP_NOT_AVAILABLE,
        KafkaError,
        KafkaException,
        Message,
        TopicPartition,
    )

    PEER_INSTALLED = False

__all__ = [
    "OFFSET_INVALID",
    "PEER_INSTALLED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "KafkaError",
    "KafkaException",
    "Message",
    "TopicPartition",
]
