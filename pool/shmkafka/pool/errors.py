"""shmkafka's own errors, and those of the shared-memory pool as the producer's callers see
them: only the ``KafkaError`` tree leaves the producer (``kafka_error``, ``with kafka_errors:``).

The classes here are the ones the app processes and the Sender both raise. kafka-python's
full table of names (``shmkafka.errors``, facades/) re-exports them beside its own."""

from __future__ import annotations

import posix_ipc

from shmkafka.protocol.broker_errors import MessageSizeTooLargeError, error_for
from shmkafka.protocol.errors import InvalidMetadataError, KafkaError, RetriableError
from shmkafka.shm.errors import (
    BufferExhaustedError,
    CapacityError,
    LayoutMismatchError,
    LockTimeoutError,
    RecordTooLargeError,
    SegmentSpaceError,
    ShmConfigError,
    ShmError,
)
from shmkafka.shm.rings import (
    CORRUPT_DESCRIPTOR,
    DELIVERY_TIMEOUT,
    SSL_HANDSHAKE_FAILED,
    TXN_ABORTED,
    Completion,
)


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


class NoBrokersAvailable(KafkaError):
    """None of the bootstrap servers answered."""


class TransactionAbortedError(KafkaError):
    """The transaction was aborted (kafka-python's name; no transactions here)."""


class MemoryExhaustedError(KafkaTimeoutError):
    """The pool had no memory for the record within ``max_block_ms`` (kafka-python raises
    ``KafkaTimeoutError`` here; confluent-kafka's ``produce`` raises ``BufferError``)."""


class DurabilityTimeoutError(KafkaTimeoutError):
    """A ``sync`` pool's disk did not finish the commit of a record within
    ``delivery_timeout_ms``.
    The record was accepted (its future or report comes as any other's); it is not known to
    be on the disk."""


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


SHM_ERRORS = (ShmError, posix_ipc.Error, OSError)  # what the pool under us may raise


def kafka_error(exc: ShmError | posix_ipc.Error | OSError) -> KafkaError:
    """The Kafka error a producer's caller sees for an error of the shared-memory pool."""
    text = str(exc)
    if isinstance(exc, RecordTooLargeError):
        return MessageSizeTooLargeError(text)
    if isinstance(exc, BufferExhaustedError):
        return MemoryExhaustedError(f"failed to allocate memory within max_block_ms: {text}")
    if isinstance(exc, LockTimeoutError):
        return KafkaTimeoutError(text)
    if isinstance(exc, LayoutMismatchError):
        return PoolSettingsMismatchError(text)
    if isinstance(exc, ShmConfigError):
        return KafkaConfigurationError(text)
    if isinstance(exc, (CapacityError, SegmentSpaceError)):  # (a full /dev/shm is a limit)
        return PoolCapacityError(text)
    return PoolError(text or type(exc).__name__)


class _KafkaErrors:
    """``with kafka_errors:`` a shared-memory error raised inside leaves as ``kafka_error``.
    (A class, not a generator: entering it costs about a tenth as much.)"""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> None:  # fmt: skip
        if isinstance(exc, SHM_ERRORS):
            raise kafka_error(exc) from exc


kafka_errors = _KafkaErrors()


def completion_error(completion: Completion) -> KafkaError | None:
    """The error a record's future gets for its batch's result (None: delivered)."""
    if not completion.error_code:  # (ErrorCode.NONE, 0: an enum member's lookup costs a
        return None  # paced app's completion thread more than the rest of this test)
    if completion.error_code == DELIVERY_TIMEOUT:
        return KafkaTimeoutError("delivery.timeout.ms expired before the record was acknowledged")
    if completion.error_code == SSL_HANDSHAKE_FAILED:
        return KafkaConnectionError(
            "SSL handshake failed with every broker (error_cb / the log says why): not sent"
        )
    if completion.error_code == TXN_ABORTED:
        return TransactionAbortedError("Failing batch since transaction was aborted")
    if completion.error_code == CORRUPT_DESCRIPTOR:
        return KafkaError(
            "the Sender found this record's batch corrupted in shared memory: not sent"
        )
    return error_for(completion.error_code)
