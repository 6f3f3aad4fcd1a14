"""confluent_kafka.aio over shmkafka: ``AIOProducer`` and ``AsyncSerializingProducer`` are
shmkafka's; the consumers pass through from confluent-kafka."""

from __future__ import annotations

from typing import Any

from shmkafka.facades.confluent.aio import AIOProducer
from shmkafka.facades.confluent.aio_serializing import AsyncSerializingProducer
from shmkafka.facades.peer_modules import from_peer

__all__ = ["AIOProducer", "AsyncSerializingProducer"]


def __getattr__(name: str) -> Any:
    return from_peer(
        "confluent_kafka.aio", "shmkafka.confluent_kafka.aio",
        "AIOProducer and AsyncSerializingProducer", name,
    )  # fmt: skip
