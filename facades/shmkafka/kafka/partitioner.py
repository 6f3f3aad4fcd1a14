"""``kafka.partitioner``: kafka-python 3.x's partitioner interface, its default, and its
``murmur2`` (the unsigned 32-bit MurmurHash2 of the Java client)."""

from __future__ import annotations

from shmkafka.facades.kafka_python.plugins import DefaultPartitioner, Partitioner
from shmkafka.protocol import hashing


def murmur2(data: bytes | bytearray | memoryview) -> int:
    return hashing.murmur2(data) & 0xFFFFFFFF


__all__ = ["DefaultPartitioner", "Partitioner", "murmur2"]
