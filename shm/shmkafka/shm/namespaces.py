"""Pools shared across PID namespaces (containers that share /dev/shm but not their
processes): told by the Sender's kernel lock, which the kernel answers for any namespace.

Rules:
- A process tells a live process from a dead one by pid and start time; from another PID
  namespace every process of the pool looks dead. Such a process must not attach: attaching
  reclaims the slots of "dead" processes, which would take live producers' slots.
- So ``refuse_out_of_sight`` runs before a process takes a slot: if the pool's Sender runs
  (its lock is held, its heartbeat fresh) but its recorded process is not alive from here,
  the process is refused, with the cause named. It is seen so for ``OUT_OF_SIGHT_S`` first:
  a Sender taking over from one that just died looks so until it records itself.
"""

from __future__ import annotations

import time

from shmkafka.shm.errors import ShmError
from shmkafka.shm.layout import (
    SENDER_BYTE,
)
from shmkafka.shm.locks import KernelLock
from shmkafka.shm.segment import Segment
from shmkafka.shm.sender_counters import recorded_sender, recorded_sender_alive

FRESH_HEARTBEAT_MS = 2000  # the Sender beats every 100 ms
OUT_OF_SIGHT_S = 1.0


class OtherNamespaceError(ShmError):
    """The pool's Sender runs in a PID namespace this process cannot see into."""


def sender_out_of_sight(segment: Segment) -> bool:
    """The pool's Sender runs, heartbeating, and holds its lock, but the process it recorded
    is not alive from here. (The heartbeat's monotonic clock is the host's, whatever the
    namespace.)"""
    pid, _, beat = recorded_sender(segment)
    stale = int(time.monotonic() * 1000) - beat > FRESH_HEARTBEAT_MS
    if pid <= 0 or stale or recorded_sender_alive(segment):
        return False
    return KernelLock.for_segment(segment, SENDER_BYTE).held_by_another()


def refuse_out_of_sight(segment: Segment) -> None:
    """Raise OtherNamespaceError if the pool's Sender stays out of sight."""
    deadline = time.monotonic() + OUT_OF_SIGHT_S
    while sender_out_of_sight(segment):
        if time.monotonic() > deadline:
            pid = recorded_sender(segment)[0]
            raise OtherNamespaceError(
                f"pool {segment.pool!r} has a Sender (pid {pid} as recorded) that this "
                "process cannot see: the pool is shared across PID namespaces. Share the PID "
                "namespace (Kubernetes: shareProcessNamespace: true; Docker: "
                "--pid=container:NAME), or give each container its own pool"
            )
        time.sleep(0.05)
