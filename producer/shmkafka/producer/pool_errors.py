"""Errors of the shared-memory pool as the producer's callers see them: only the
``KafkaError`` tree leaves the producer (``kafka_error``, ``with kafka_errors:``)."""

from __future__ import annotations

import posix_ipc

from shmkafka.errors import (
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    MemoryExhaustedError,
    MessageSizeTooLargeError,
    PoolCapacityError,
    PoolError,
    PoolSettingsMismatchError,
    TransactionAbortedError,
)
from shmkafka.protocol.broker_errors import error_for
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import KafkaError
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
    if completion.error_code == ErrorCode.NONE:
        return None
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
