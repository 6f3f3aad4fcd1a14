"""``kafka.producer``: ``from shmkafka.kafka.producer import KafkaProducer``."""

from __future__ import annotations

from shmkafka.facades.kafka_python.producer import KafkaProducer
from shmkafka.producer.futures import Future as FutureRecordMetadata
from shmkafka.producer.futures import RecordMetadata

__all__ = ["FutureRecordMetadata", "KafkaProducer", "RecordMetadata"]
