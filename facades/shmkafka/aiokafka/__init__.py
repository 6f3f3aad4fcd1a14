"""aiokafka's import paths over shmkafka: change ``aiokafka`` to ``shmkafka.aiokafka`` and
``from shmkafka.aiokafka import AIOKafkaProducer`` gives shmkafka's asyncio producer, with
``shmkafka.aiokafka.errors``, ``.structs``, ``.abc`` and ``.helpers`` under aiokafka's
names.

aiokafka's other classes (``AIOKafkaConsumer``...) are not shmkafka's: with aiokafka
installed they are passed through from it. Its producer classes never are.
"""

from __future__ import annotations

from typing import Any

from shmkafka.aiokafka import abc, errors, helpers, structs
from shmkafka.aiokafka.structs import TopicPartition
from shmkafka.facades.aiokafka.producer import AIOKafkaProducer
from shmkafka.facades.peer_modules import from_peer

__all__ = ["AIOKafkaProducer", "TopicPartition", "abc", "errors", "helpers", "structs"]


def __getattr__(name: str) -> Any:
    return from_peer("aiokafka", "shmkafka.aiokafka", "producer", name)
