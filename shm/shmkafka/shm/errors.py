"""Errors of the shared-memory pool. ``shm`` imports nothing else of shmkafka, so these derive
from builtins; the producer maps them into its KafkaError tree."""

from __future__ import annotations


class ShmError(Exception):
    """Root of the shared-memory pool's errors."""


class ShmConfigError(ShmError, ValueError):
    """A pool name or pool-level setting is invalid."""


class LayoutMismatchError(ShmError):
    """The segment was created with another layout version or other pool-level settings."""

    def __init__(self, message: str, differences: list[str]) -> None:
        super().__init__(message + (": " + "; ".join(differences) if differences else ""))
        self.differences = differences


class SegmentOwnerError(ShmError):
    """The segment belongs to another user."""


class SegmentSpaceError(ShmError):
    """/dev/shm cannot hold the segment (checked at creation, never a SIGBUS later)."""


class PoolNotFoundError(ShmError):
    """No segment of that name exists."""


class CapacityError(ShmError):
    """A fixed capacity of the pool (topics, partitions, processes, queued batches) is full."""


class BufferExhaustedError(ShmError):
    """No memory became free within max_block_ms."""


class RecordTooLargeError(ShmError):
    """A record larger than buffer_memory or max_request_size: it can never be allocated."""


class LockTimeoutError(ShmError):
    """A lock stayed held by a live process past the acquire timeout."""


class LockOrderError(ShmError):
    """A lock was taken against the one lock order (shm/lockdep.py), with SHMKAFKA_LOCKDEP=1."""

    def __init__(self, message: str, held: tuple[str, int], taking: tuple[str, int]) -> None:
        super().__init__(message)
        self.held = held
        self.taking = taking
