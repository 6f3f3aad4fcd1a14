"""confluent_kafka.aio over shmkafka: ``AIOProducer`` is shmkafka's; the consumers pass
through from confluent-kafka; ``AsyncSerializingProducer`` is refused (not shmkafka's yet)."""

from __future__ import annotations

from typing import Any

from shmkafka.producer.confluent_aio import AIOProducer
from shmkafka.producer.peer_modules import from_peer

__all__ = ["AIOProducer"]


def __getattr__(name: str) -> Any:
    return from_peer("confluent_kafka.aio", "shmkafka.confluent_kafka.aio", "AIOProducer", name)
