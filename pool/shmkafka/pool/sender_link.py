"""What a pool's producers and its Sender share to find and wake each other.

Rules:
- One Sender per pool: it holds the kernel record lock on ``SENDER_BYTE`` of the segment
  file for its whole life (``sender_lock(pool).try_acquire()``); the kernel releases it when
  the Sender dies, so a Sender that cannot take it knows another one runs.
- A producer checks for a live Sender and starts one under ``spawn_lock(pool)``, so that
  concurrent producers start at most one between them.
- The Sender records its pid, start time and a heartbeat in the pool header;
  ``sender_alive`` reads them (a reused pid is not mistaken for the Sender). A Sender whose
  lock is held but whose pid is not alive from here runs in another PID namespace
  (namespaces.py): this process cannot tell when it dies, so it may not use the pool.
- App processes wake the Sender by posting the pool's Sender semaphore; one pending post is
  enough (``wake``), the Sender looks at every deque when it wakes.
"""

from __future__ import annotations

import posix_ipc

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.layout import (
    SENDER_BYTE,
    SPAWN_BYTE,
)
from shmkafka.shm.locks import KernelLock
from shmkafka.shm.segment import semaphore_name
from shmkafka.shm.sender_counters import recorded_sender_alive


def sender_semaphore(pool_name: str) -> posix_ipc.Semaphore:
    """The Sender's doorbell, created on first use."""
    return posix_ipc.Semaphore(semaphore_name(pool_name, "s", 0), posix_ipc.O_CREAT, 0o600, 0)


def wake(sem: posix_ipc.Semaphore) -> None:
    """Ring the Sender's doorbell unless a ring is already pending."""
    if sem.value < 1:
        sem.release()


def sender_alive(pool: SharedPool) -> bool:
    return recorded_sender_alive(pool.segment)


def sender_lock(pool: SharedPool) -> KernelLock:
    """Held by the running Sender for its whole life."""
    return KernelLock.for_segment(pool.segment, SENDER_BYTE)


def spawn_lock(pool: SharedPool) -> KernelLock:
    """Held by a producer while it checks for a live Sender and starts one."""
    return KernelLock.for_segment(pool.segment, SPAWN_BYTE)
