"""``kafka.producer``: ``from shmkafka.kafka.producer import KafkaProducer``."""

from __future__ import annotations

from shmkafka.producer.futures import Future as FutureRecordMetadata
from shmkafka.producer.futures import RecordMetadata
from shmkafka.producer.kafka_python import KafkaProducer

__all__ = ["FutureRecordMetadata", "KafkaProducer", "RecordMetadata"]
