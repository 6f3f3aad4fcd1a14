"""Errors of the shared-memory pool as the producer's callers see them: only the
``KafkaError`` tree leaves the producer (``kafka_error``, ``with kafka_errors:``)."""

from __future__ import annotations

import posix_ipc

from shmkafka.errors import (
    KafkaConfigurationError,
    KafkaTimeoutError,
    MemoryExhaustedError,
    MessageSizeTooLargeError,
    PoolCapacityError,
    PoolError,
    PoolSettingsMismatchError,
)
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm.errors import (
    BufferExhaustedError,
    CapacityError,
    LayoutMismatchError,
    LockTimeoutError,
    RecordTooLargeError,
    ShmConfigError,
    ShmError,
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
    if isinstance(exc, CapacityError):
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
