"""Every error name kafka-python's ``kafka.errors`` exports, with kafka-python's meaning, plus
shmkafka's own (the pool's). ``shmkafka.kafka.errors`` is this module under kafka-python's
path.

Rules:
- Every class derives from ``shmkafka.protocol.errors.KafkaError`` (retriable ones from
  ``RetriableError``). Broker error codes keep their one class each from the protocol's
  table (``for_code``); ``kafka_errors`` maps every code kafka-python maps, 0 included.
- When kafka-python is installed, the errors the ``KafkaProducer`` API raises are also
  instances of kafka-python's class of the same name (``shmkafka.producer.peer_errors``),
  so ``except kafka.errors.KafkaTimeoutError`` keeps working after the import switch.
"""

from __future__ import annotations

from typing import ClassVar

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


class KafkaTimeoutError(RetriableError):
    """Metadata, memory or delivery did not come in time (``max_block_ms``,
    ``delivery_timeout_ms``, or a caller's timeout)."""


class KafkaConfigurationError(KafkaError, ValueError):
    """A configuration key or value is not accepted; the message names it."""


class IllegalStateError(KafkaError):
    """The producer cannot do this now (for example it is closed)."""


class IllegalArgumentError(KafkaError, ValueError):
    """An argument is out of range."""


class KafkaConnectionError(InvalidMetadataError):
    """A connection to a broker failed."""


class NodeNotReadyError(RetriableError):
    """The broker connection is not ready yet."""


class NoBrokersAvailable(KafkaError):
    """None of the bootstrap servers answered."""


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


class TransactionAbortedError(KafkaError):
    """The transaction was aborted (kafka-python's name; no transactions here)."""


class NoError(BrokerResponseError):
    """Code 0: no error (kafka-python names it; ``for_code`` never returns it)."""

    code: ClassVar[int] = 0
    errno: ClassVar[int] = 0
    name: ClassVar[str] = "NONE"
    message: ClassVar[str] = "NO_ERROR"


# shmkafka's own


class MemoryExhaustedError(KafkaTimeoutError):
    """The pool had no memory for the record within ``max_block_ms`` (kafka-python raises
    ``KafkaTimeoutError`` here; confluent-kafka's ``produce`` raises ``BufferError``)."""


class PoolSettingsMismatchError(KafkaConfigurationError):
    """The pool exists with other pool-level or Sender-level settings."""


class PoolError(KafkaError):
    """The host's shared-memory pool cannot serve the call: /dev/shm is full, a fixed
    capacity of the pool (topics, partitions, processes) is reached, the pool belongs to
    another user, or it vanished."""


class PoolCapacityError(PoolError):
    """A limit of the pool that the call needs more of (topics, partitions, processes, or
    /dev/shm itself); the message names the limit and the setting that raises it. Only the
    call or record that needs more fails: the pool and its other topics carry on."""


class ResultLostError(KafkaError):
    """The record's batch no longer holds it and no result came for it: its process fails
    it rather than wait for ever. The record may or may not have reached the broker. This is
    an internal error of shmkafka (counted in ``shmkafka stat`` and the metrics as
    ``internal errors``, and logged at ERROR): a bug to report, never a normal path."""


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
