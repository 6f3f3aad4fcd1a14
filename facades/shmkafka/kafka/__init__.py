"""kafka-python's import paths over shmkafka: change ``kafka`` to ``shmkafka.kafka`` and
``from shmkafka.kafka import KafkaProducer`` gives shmkafka's producer, with
``shmkafka.kafka.errors``, ``.partitioner``, ``.serializer``, ``.producer`` and ``.structs``
under kafka-python's names.

kafka-python's other classes (``KafkaConsumer``, ``KafkaAdminClient``...) are not
shmkafka's: with kafka-python installed they are passed through from it, so one import line
serves an app that also consumes.
"""

from __future__ import annotations

from typing import Any

from shmkafka.facades.kafka_python.producer import KafkaProducer
from shmkafka.facades.peer_modules import from_peer
from shmkafka.kafka import errors, partitioner, producer, serializer, structs
from shmkafka.kafka.structs import TopicPartition

__all__ = [
    "KafkaProducer",
    "TopicPartition",
    "errors",
    "partitioner",
    "producer",
    "serializer",
    "structs",
]


def __getattr__(name: str) -> Any:
    return from_peer("kafka", "shmkafka.kafka", "producer", name)
