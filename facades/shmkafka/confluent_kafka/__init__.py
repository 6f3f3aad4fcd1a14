"""confluent-kafka's import paths over shmkafka: ``import shmkafka.confluent_kafka as
confluent_kafka`` (or ``from shmkafka.confluent_kafka import Producer, KafkaError,
KafkaException, Message, TopicPartition``) gives shmkafka's ``Producer`` and
``SerializingProducer`` with confluent-kafka's own value types (pure-Python equivalents
without confluent-kafka).

confluent-kafka's other classes (``Consumer``, ``admin``...) are not shmkafka's: with
confluent-kafka installed they are passed through from it.
"""

from __future__ import annotations

import importlib
from typing import Any

from shmkafka import __version__
from shmkafka.facades.confluent.producer import Producer
from shmkafka.facades.confluent.serializing import SerializingProducer
from shmkafka.facades.confluent.types import (
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from shmkafka.facades.peer_modules import from_peer

OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED = -2, -1, -1000


def version() -> tuple[str, int]:
    """shmkafka's version, as ``confluent_kafka.version()`` gives the binding's."""
    major, minor, patch = (int(p) for p in __version__.split(".")[:3])
    return __version__, major << 24 | minor << 16 | patch << 8


def libversion() -> tuple[str, int]:
    """The protocol library's version: shmkafka's own (no librdkafka here)."""
    return version()


__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "KafkaError",
    "KafkaException",
    "Message",
    "Producer",
    "SerializingProducer",
    "TopicPartition",
    "libversion",
    "version",
]


def __getattr__(name: str) -> Any:
    if name == "aio":  # (ours, imported when first used: it brings asyncio)
        return importlib.import_module("shmkafka.confluent_kafka.aio")
    return from_peer("confluent_kafka", "shmkafka.confluent_kafka", "Producer", name)
