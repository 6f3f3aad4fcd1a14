"""Process slots: one per attached process, identified by (pid, start time).

Rules:
- Slot state, pid and start time change only under the slot-table kernel lock (a record lock
  on the segment file, released by the kernel if its holder dies), so claiming a slot needs
  no pool lock and no slot of its own.
- A slot whose process is gone, or whose pid now belongs to another process (another start
  time), is dead. Dead slots are reclaimed by a live process (``SharedPool.reclaim_dead``):
  first the locks it may hold are recovered, then its memory is returned, then the slot is
  freed here.
"""

from __future__ import annotations

from shmkafka.shm.errors import CapacityError
from shmkafka.shm.layout import (
    I32,
    I64,
    NO_SLAB,
    PENDING,
    S_FLUSHING,
    S_PENDING,
    S_PID,
    S_START,
    S_STATE,
    SLOT_TABLE_BYTE,
    U32,
    Layout,
)
from shmkafka.shm.locks import KernelLock
from shmkafka.shm.procs import is_alive
from shmkafka.shm.segment import Segment

FREE_SLOT = 0
ACTIVE_SLOT = 1


class SlotTable:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.layout: Layout = segment.layout
        self._slots = self.layout.config.max_processes
        assert self.layout.slot_size % 4 == 0 and self.layout.slot_at(0) % 4 == 0

    def lock(self) -> KernelLock:
        return self._lock()

    def _lock(self) -> KernelLock:
        return KernelLock.for_segment(self.segment, SLOT_TABLE_BYTE)

    def claim(self, pid: int, started: int) -> int:
        """Take a free slot for (pid, started); CapacityError when every slot is live."""
        buf = self.segment.buf
        with self._lock():
            for slot in range(self.layout.config.max_processes):
                at = self.layout.slot_at(slot)
                if U32.unpack_from(buf, at + S_STATE)[0] == FREE_SLOT:
                    size = self.layout.slot_size
                    buf[at : at + size] = bytes(size)  # fresh counters, ring, intents
                    PENDING.pack_into(buf, at + S_PENDING, NO_SLAB, 0)
                    self.segment.store_u32(at + S_PID, pid)
                    self.segment.store_u64(at + S_START, started)
                    self.segment.store_u32(at + S_STATE, ACTIVE_SLOT)
                    return slot
        raise CapacityError(
            f"all {self.layout.config.max_processes} process slots of pool "
            f"{self.segment.pool!r} are in use (max_processes)"
        )

    def free(self, slot: int) -> None:
        with self._lock():
            at = self.layout.slot_at(slot)
            self.segment.store_u32(at + S_FLUSHING, 0)  # a dead process may have flushed
            self.segment.store_u32(at + S_STATE, FREE_SLOT)
            self.segment.store_u32(at + S_PID, 0)

    def identity(self, slot: int) -> tuple[int, int, int]:
        at = self.layout.slot_at(slot)
        buf = self.segment.buf
        return (
            U32.unpack_from(buf, at + S_STATE)[0],
            I32.unpack_from(buf, at + S_PID)[0],
            I64.unpack_from(buf, at + S_START)[0],
        )

    def active(self) -> list[tuple[int, int, int]]:
        """(slot, pid, start) of every slot in use, live or dead."""
        out = []
        for slot in range(self.layout.config.max_processes):
            state, pid, started = self.identity(slot)
            if state == ACTIVE_SLOT:
                out.append((slot, pid, started))
        return out

    def flushing(self) -> bool:
        """True while a process waits in flush() or close(). (The Sender asks every round:
        one strided read of every slot's flag; a freed slot's flag is 0.)"""
        first = (self.layout.slot_at(0) + S_FLUSHING) >> 2
        stride = self.layout.slot_size >> 2
        return any(self.segment.halfwords[first : first + self._slots * stride : stride])

    def set_flushing(self, slot: int, flushing: bool) -> None:
        self.segment.store_u32(self.layout.slot_at(slot) + S_FLUSHING, int(flushing))

    def dead(self) -> list[int]:
        return [slot for slot, pid, started in self.active() if not is_alive(pid, started)]
