"""Errors under kafka-python's names, so ``except kafka.errors.X`` code ports by changing the
import to ``shmkafka.errors``. Every class derives from ``shmkafka.protocol.errors.KafkaError``
(retriable ones from ``RetriableError``); broker error codes keep their classes from the
protocol table, and the ones kafka-python names differently get its name as an alias.
"""

from __future__ import annotations

from shmkafka.protocol.errors import (
    BrokerResponseError,
    InvalidMetadataError,
    KafkaError,
    RetriableError,
    for_code,
)

__all__ = [
    "BrokerResponseError",
    "IllegalArgumentError",
    "IllegalStateError",
    "InvalidMetadataError",
    "KafkaConfigurationError",
    "KafkaError",
    "KafkaTimeoutError",
    "MessageSizeTooLargeError",
    "NotLeaderForPartitionError",
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


class IllegalStateError(KafkaError):
    """The producer cannot do this now (for example it is closed)."""


class IllegalArgumentError(KafkaError, ValueError):
    """An argument is out of range."""


# Broker error codes whose kafka-python names differ from Kafka's own.
MessageSizeTooLargeError = for_code(10)  # MESSAGE_TOO_LARGE
UnknownTopicOrPartitionError = for_code(3)
NotLeaderForPartitionError = for_code(6)  # NOT_LEADER_OR_FOLLOWER
UnsupportedVersionError = for_code(35)
