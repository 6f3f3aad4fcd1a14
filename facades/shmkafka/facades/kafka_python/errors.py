"""Every error name kafka-python's ``kafka.errors`` exports, with kafka-python's meaning, plus
shmkafka's own (defined in ``shmkafka.pool.errors``, which the client and the Sender raise).
``shmkafka.kafka.errors`` is this module under kafka-python's path.

Rules:
- Every class derives from ``shmkafka.protocol.errors.KafkaError`` (retriable ones from
  ``RetriableError``). Broker error codes keep their one class each from the protocol's
  table (``for_code``); ``kafka_errors`` maps every code kafka-python maps, 0 included.
- When kafka-python is installed, the errors the ``KafkaProducer`` API raises are also
  instances of kafka-python's class of the same name
  (``shmkafka.facades.kafka_python.peer_errors``), so ``except
  kafka.errors.KafkaTimeoutError`` keeps working after the import switch.
"""

from __future__ import annotations

from typing import ClassVar

from shmkafka.pool.errors import (
    IllegalArgumentError,
    IllegalStateError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    MemoryExhaustedError,
    NoBrokersAvailable,
    PoolError,
    PoolSettingsMismatchError,
    ResultLostError,
    TransactionAbortedError,
)
from shmkafka.pool.errors import (
    PoolCapacityError as PoolCapacityError,
)
from shmkafka.protocol import broker_errors
from shmkafka.protocol.broker_errors import *  # noqa: F403  (the broker error classes)
from shmkafka.protocol.errors import (
    BROKER_ERRORS_BY_CODE,
    AuthorizationError,
    BrokerResponseError,
    CorrelationIdError,
    InvalidMetadataError,
    KafkaError,
    RetriableError,
)
from shmkafka.protocol.errors import ProtocolError as KafkaProtocolError
from shmkafka.protocol.other_api_errors import *  # noqa: F403  (and the other APIs')


class NodeNotReadyError(RetriableError):
    """The broker connection is not ready yet."""


class Cancelled(RetriableError):
    """The request was cancelled."""


class TooManyInFlightRequests(RetriableError):
    """The connection has as many requests in flight as it may."""


class StaleMetadata(InvalidMetadataError):
    """The metadata is older than the request needs."""


class MetadataEmptyBrokerList(RetriableError):
    """The metadata lists no broker."""


class UnrecognizedBrokerVersion(KafkaError):
    """The broker's version could not be told."""


class IncompatibleBrokerVersion(KafkaError):
    """The broker does not support what was asked."""


class UnsupportedCodecError(KafkaError):
    """The compression codec's library is not installed."""


class InvalidReceiveError(KafkaProtocolError):
    """A response could not be read."""


class QuotaViolationError(KafkaError):
    """A quota was exceeded."""


class UnknownBrokerIdError(KafkaError):
    """No broker has that id."""


class CommitFailedError(KafkaError):
    """A consumer's offset commit failed (kafka-python's name; no consumer here)."""


class NoOffsetForPartitionError(KafkaError):
    """A consumer has no offset to start from (kafka-python's name; no consumer here)."""


class LogTruncationError(KafkaError):
    """A consumer found its log truncated (kafka-python's name; no consumer here)."""


class NoError(BrokerResponseError):
    """Code 0: no error (kafka-python names it; ``for_code`` never returns it)."""

    code: ClassVar[int] = 0
    errno: ClassVar[int] = 0
    name: ClassVar[str] = "NONE"
    message: ClassVar[str] = "NO_ERROR"


for_code = broker_errors.for_code
CorruptRecordException = CorruptRecordError  # noqa: F405  (kafka-python's alias)
kafka_errors: dict[int, type[BrokerResponseError]] = {0: NoError, **BROKER_ERRORS_BY_CODE}

__all__ = [
    *(cls.__name__ for cls in BROKER_ERRORS_BY_CODE.values()),
    "AuthorizationError",
    "BrokerResponseError",
    "Cancelled",
    "CommitFailedError",
    "CorrelationIdError",
    "CorruptRecordException",
    "IllegalArgumentError",
    "IllegalStateError",
    "IncompatibleBrokerVersion",
    "InvalidMetadataError",
    "InvalidReceiveError",
    "KafkaConfigurationError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaProtocolError",
    "KafkaTimeoutError",
    "LogTruncationError",
    "MemoryExhaustedError",
    "MetadataEmptyBrokerList",
    "NoBrokersAvailable",
    "NoError",
    "NoOffsetForPartitionError",
    "NodeNotReadyError",
    "PoolError",
    "PoolSettingsMismatchError",
    "QuotaViolationError",
    "ResultLostError",
    "RetriableError",
    "StaleMetadata",
    "TooManyInFlightRequests",
    "TransactionAbortedError",
    "UnknownBrokerIdError",
    "UnrecognizedBrokerVersion",
    "UnsupportedCodecError",
    "for_code",
    "kafka_errors",
]
