"""Errors under kafka-python's names, so ``except kafka.errors.X`` code ports by changing the
import to ``shmkafka.errors``. Every class derives from ``shmkafka.protocol.errors.KafkaError``
(retriable ones from ``RetriableError``); broker error codes keep their classes from the
protocol table, and the ones kafka-python names differently get its name as an alias.
"""

from __future__ import annotations

from shmkafka.protocol.broker_errors import (
    MessageTooLargeError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    for_code,
)
from shmkafka.protocol.errors import (
    BrokerResponseError,
    InvalidMetadataError,
    KafkaError,
    RetriableError,
)

__all__ = [
    "BrokerResponseError",
    "IllegalArgumentError",
    "IllegalStateError",
    "InvalidMetadataError",
    "KafkaConfigurationError",
    "KafkaError",
    "KafkaTimeoutError",
    "MemoryExhaustedError",
    "MessageSizeTooLargeError",
    "NotLeaderForPartitionError",
    "PoolError",
    "PoolSettingsMismatchError",
    "RetriableError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "for_code",
]


class KafkaTimeoutError(RetriableError):
    """Metadata, memory or delivery did not come in time (``max_block_ms``,
    ``delivery_timeout_ms``, or a caller's timeout)."""


class KafkaConfigurationError(KafkaError, ValueError):
    """A configuration key or value is not accepted; the message names it."""


class MemoryExhaustedError(KafkaTimeoutError):
    """The pool had no memory for the record within ``max_block_ms`` (kafka-python raises
    ``KafkaTimeoutError`` here; confluent-kafka's ``produce`` raises ``BufferError``)."""


class PoolSettingsMismatchError(KafkaConfigurationError):
    """The pool exists with other pool-level or Sender-level settings."""


class PoolError(KafkaError):
    """The host's shared-memory pool cannot serve the call: /dev/shm is full, a fixed
    capacity of the pool (topics, partitions, processes) is reached, the pool belongs to
    another user, or it vanished."""


class IllegalStateError(KafkaError):
    """The producer cannot do this now (for example it is closed)."""


class IllegalArgumentError(KafkaError, ValueError):
    """An argument is out of range."""


# Broker errors whose kafka-python names differ from Kafka's own.
MessageSizeTooLargeError = MessageTooLargeError
NotLeaderForPartitionError = NotLeaderOrFollowerError
