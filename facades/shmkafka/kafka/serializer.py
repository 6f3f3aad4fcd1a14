"""``kafka.serializer``: kafka-python 3.x's serializer interface and its implementations."""

from __future__ import annotations

from shmkafka.facades.kafka_python.plugins import (
    DefaultSerializer,
    Deserializer,
    DeserializeWrapper,
    JsonSerializer,
    Serializer,
    SerializeWrapper,
)

__all__ = [
    "DefaultSerializer",
    "DeserializeWrapper",
    "Deserializer",
    "JsonSerializer",
    "SerializeWrapper",
    "Serializer",
]
