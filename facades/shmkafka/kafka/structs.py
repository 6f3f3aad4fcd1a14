"""``kafka.structs``' names that the producer API uses."""

from __future__ import annotations

from shmkafka.producer.futures import RecordMetadata, TopicPartition

__all__ = ["RecordMetadata", "TopicPartition"]
