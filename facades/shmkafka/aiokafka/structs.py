"""aiokafka.structs: RecordMetadata and TopicPartition (aiokafka's own when installed)."""

from __future__ import annotations

import importlib
from typing import Any

from shmkafka.facades.aiokafka.types import RecordMetadata
from shmkafka.producer.futures import TopicPartition

__all__ = ["RecordMetadata", "TopicPartition"]


def __getattr__(name: str) -> Any:
    try:
        return getattr(importlib.import_module("aiokafka.structs"), name)
    except ImportError:
        raise AttributeError(
            f"module 'shmkafka.aiokafka.structs' has no attribute {name!r}"
        ) from None
