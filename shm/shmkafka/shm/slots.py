"""Process slots: one per attached process, identified by (pid, start time).

Rules:
- Slot state, pid and start time change only under the slot-table kernel lock (a record lock
  on the segment file, released by the kernel if its holder dies), so claiming a slot needs
  no pool lock and no slot of its own.
- Slots are claimed lowest first, and ``slots_high`` (the header) is one past the highest
  ever claimed: a slot's memory is reserved when it is first claimed, and every scan of the
  table stops at ``slots_high``, so the table costs memory for the most processes attached at
  once, not for ``max_processes``.
- A slot whose process is gone, or whose pid now belongs to another process (another start
  time), is dead. A slot claimed from another PID namespace (``S_PID_NS``; containers that
  share /dev/shm but not their PIDs) is never dead from here: its pid means nothing here,
  so ``identity`` gives its start time as ``OUT_OF_SIGHT``, which ``is_alive`` takes for
  alive. Dead slots are reclaimed by a live process (``SharedPool.reclaim_dead``),
  holding the slot-table lock throughout: first the locks it may hold are recovered, then
  its memory is returned, then the slot is freed here.
"""

from __future__ import annotations

from shmkafka.shm.errors import CapacityError
from shmkafka.shm.layout import (
    H_SLOTS_HIGH,
    I32,
    I64,
    NO_SLAB,
    PENDING,
    S_AWAITING,
    S_FLUSHING,
    S_PENDING,
    S_PID,
    S_PID_NS,
    S_START,
    S_STATE,
    SLOT_TABLE_BYTE,
    U32,
    U64,
    Layout,
)
from shmkafka.shm.locks import KernelLock
from shmkafka.shm.procs import OUT_OF_SIGHT, is_alive, pid_namespace
from shmkafka.shm.segment import Segment

FREE_SLOT = 0
ACTIVE_SLOT = 1


class SlotTable:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.layout: Layout = segment.layout
        assert self.layout.slot_size % 4 == 0 and self.layout.slot_at(0) % 4 == 0

    def lock(self) -> KernelLock:
        return self._lock()

    def _lock(self) -> KernelLock:
        return KernelLock.for_segment(self.segment, SLOT_TABLE_BYTE)

    def claim(self, pid: int, started: int) -> int:
        """Take a free slot for (pid, started); CapacityError when every slot is live."""
        with self._lock():
            return self.claim_held(pid, started)

    def claim_held(self, pid: int, started: int) -> int:
        """``claim``, with the slot-table lock already held by the caller."""
        buf = self.segment.buf
        high = self.high()
        for slot in range(high):
            if U32.unpack_from(buf, self.layout.slot_at(slot) + S_STATE)[0] == FREE_SLOT:
                self._take(slot, pid, started)
                return slot
        if high < self.layout.config.max_processes:
            self.segment.reserve(self.layout.slot_at(high), self.layout.slot_size)
            self._take(high, pid, started)
            self.segment.store_u32(H_SLOTS_HIGH, high + 1)  # (after: the slot is whole)
            return high
        raise CapacityError(
            f"all {self.layout.config.max_processes} process slots of pool "
            f"{self.segment.pool!r} are in use (max_processes)"
        )

    def _take(self, slot: int, pid: int, started: int) -> None:
        at, size, buf = self.layout.slot_at(slot), self.layout.slot_size, self.segment.buf
        buf[at : at + size] = bytes(size)  # fresh counters, ring, intents
        PENDING.pack_into(buf, at + S_PENDING, NO_SLAB, 0)
        self.segment.store_u32(at + S_PID, pid)
        self.segment.store_u64(at + S_START, started)
        self.segment.store_u64(at + S_PID_NS, pid_namespace())
        self.segment.store_u32(at + S_STATE, ACTIVE_SLOT)

    def high(self) -> int:
        """One past the highest slot ever claimed: the slots whose memory is reserved."""
        high: int = U32.unpack_from(self.segment.buf, H_SLOTS_HIGH)[0]
        return min(high, self.layout.config.max_processes)

    def free(self, slot: int) -> None:
        with self._lock():
            self.free_held(slot)

    def free_held(self, slot: int) -> None:
        """``free``, with the slot-table lock already held by the caller."""
        at = self.layout.slot_at(slot)
        self.segment.store_u32(at + S_FLUSHING, 0)  # a dead process may have flushed
        self.segment.store_u32(at + S_AWAITING, 0)  # (or waited for a result)
        self.segment.store_u32(at + S_STATE, FREE_SLOT)
        self.segment.store_u32(at + S_PID, 0)

    def identity(self, slot: int) -> tuple[int, int, int]:
        """(state, pid, start time); the start time ``OUT_OF_SIGHT`` for a process of
        another PID namespace."""
        at = self.layout.slot_at(slot)
        buf = self.segment.buf
        namespace = U64.unpack_from(buf, at + S_PID_NS)[0]
        foreign = namespace != 0 and namespace != pid_namespace()
        return (
            U32.unpack_from(buf, at + S_STATE)[0],
            I32.unpack_from(buf, at + S_PID)[0],
            OUT_OF_SIGHT if foreign else I64.unpack_from(buf, at + S_START)[0],
        )

    def active(self) -> list[tuple[int, int, int]]:
        """(slot, pid, start) of every slot in use, live or dead."""
        out = []
        for slot in range(self.high()):
            state, pid, started = self.identity(slot)
            if state == ACTIVE_SLOT:
                out.append((slot, pid, started))
        return out

    def flushing(self) -> bool:
        """True while a process waits in flush() or close(). (The Sender asks every round:
        one strided read of every slot's flag; a freed slot's flag is 0.)"""
        first = (self.layout.slot_at(0) + S_FLUSHING) >> 2
        stride = self.layout.slot_size >> 2
        return any(self.segment.halfwords[first : first + self.high() * stride : stride])

    def set_flushing(self, slot: int, flushing: bool) -> None:
        self.segment.store_u32(self.layout.slot_at(slot) + S_FLUSHING, int(flushing))

    def set_awaiting(self, slot: int, awaiting: bool) -> None:
        self.segment.store_u32(self.layout.slot_at(slot) + S_AWAITING, int(awaiting))

    def in_a_hurry(self, slot: int) -> bool:
        """A thread of ``slot``'s process waits for a result, or flushes: the Sender wakes
        it at once (result_wakes.py)."""
        at, words = self.layout.slot_at(slot), self.segment.halfwords
        return bool(words[(at + S_AWAITING) >> 2] or words[(at + S_FLUSHING) >> 2])

    def dead(self) -> list[int]:
        return [slot for slot, pid, started in self.active() if not is_alive(pid, started)]

    def live(self) -> list[int]:
        return [slot for slot, pid, started in self.active() if is_alive(pid, started)]
