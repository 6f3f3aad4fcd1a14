"""BufferPool: the pool's memory as ``buffer_memory / slab_size`` slabs shared by all processes.

Contract (as Kafka's BufferPool, across processes):
- ``allocate(size, max_block_ms, want)`` returns a run of contiguous slabs holding ``size``
  bytes: ``want`` slabs when such a run is free (a batch sized for its partition's load),
  else the longest free run that still holds ``size`` (next fit: the first such run from the
  allocation cursor on, see ``_take``). A size above ``buffer_memory`` can never be served:
  ``RecordTooLargeError`` at once.
- ``deallocate_many(runs)`` gives back runs in one hold of the pool lock (a drain's unused
  tails, after it let go of its stripes).
- When memory is short the caller blocks (never while holding a deque lock) until memory is
  freed, or raises ``BufferExhaustedError`` after ``max_block_ms``. A wait that ends by any
  exception (a signal handler's too) leaves the queue and wakes the next in line.
- Fairness: waiting processes are served in arrival order (a FIFO of process slots in shared
  memory); while anyone waits and memory is short (less than ``1/PLENTY_FRACTION`` of the
  slabs free), newcomers queue behind them. With plenty free a newcomer takes its run and
  wakes the head: a queue left from a moment of exhaustion must not turn every later
  allocation into a hand-off between processes (a convoy). Threads of one process queue on
  a process-local lock first.
- Runs under pressure: while memory is short, an allocation takes the run it wants (its
  partition's batch size) or, if none is free, queues and holds out for it up to
  ``RUN_PATIENCE_S`` (woken by each free) before it takes the longest shorter run. Taking
  the first crumb would keep every later batch as short as the crumbs, and the Sender's
  cost per record high. (The C append takes a shorter run only while memory is plenty.)
- Crash safety: an allocation is recorded in the owner's slot (``pending``) before the free
  map marks it used, and stays recorded until a batch owns it; the reclaimer of a dead slot
  frees a pending run no batch owns. A dead waiter is dropped from the queue by whoever
  finds it at the head.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

import posix_ipc

from shmkafka.shm import waits
from shmkafka.shm.errors import BufferExhaustedError, RecordTooLargeError
from shmkafka.shm.layout import (
    H_ALLOC_CURSOR,
    H_WAITQ_HEAD,
    H_WAITQ_TAIL,
    NO_SLAB,
    PENDING,
    POOL_LOCK,
    S_PENDING,
    S_WAITING_ALLOC,
    U32,
    U64,
    Layout,
)
from shmkafka.shm.locks import LockSet
from shmkafka.shm.procs import is_alive
from shmkafka.shm.segment import Segment, semaphore_name
from shmkafka.shm.slots import SlotTable

POLL_S = 0.05
_FREE_RUN = re.compile(b"\x00+")
PLENTY_FRACTION = 8  # memory is short while fewer than 1/8 of the slabs are free
# While memory is short, a waiter holds out this long for the run it wants before it takes
# a shorter one: freed batches sit next to each other (next fit) and merge into long runs
# within a response or two, where taking the first crumb keeps every later batch as short
# as the crumbs (and the Sender's cost per record up). Within max_block_ms, always.
RUN_PATIENCE_S = 0.05


@dataclass(frozen=True)
class SlabRun:
    first: int
    count: int


class BufferPool:
    def __init__(self, segment: Segment, locks: LockSet, slots: SlotTable, slot: int) -> None:
        self.segment = segment
        self.layout: Layout = segment.layout
        self.locks = locks
        self.slots = slots
        self.slot = slot
        self.slab_size = self.layout.config.slab_size
        self.num_slabs = self.layout.config.num_slabs
        self._local = threading.Lock()  # held from allocate() until commit()/abandon()
        self._sems: dict[int, posix_ipc.Semaphore] = {}

    def close(self) -> None:
        for sem in self._sems.values():
            sem.close()
        self._sems.clear()

    def _sem(self, slot: int) -> posix_ipc.Semaphore:
        sem = self._sems.get(slot)
        if sem is None:
            name = semaphore_name(self.segment.pool, "a", slot)
            sem = self._sems[slot] = posix_ipc.Semaphore(name, posix_ipc.O_CREAT, 0o600, 0)
        return sem

    # ------------------------------------------------------------------ allocate

    def slabs_for(self, size: int) -> int:
        return max(1, -(-size // self.slab_size))

    def allocate(self, size: int, max_block_ms: int, want: int = 1) -> SlabRun:
        """Reserve slabs for ``size`` bytes, ``want`` of them if a run that long is free.
        The caller must ``commit`` or ``abandon`` it."""
        buffer_memory = self.num_slabs * self.slab_size
        if size > buffer_memory:
            raise RecordTooLargeError(
                f"{size} bytes can never fit in buffer_memory={buffer_memory}"
            )
        count = self.slabs_for(size)
        want = max(count, min(want, self.num_slabs))
        deadline = time.monotonic() + max_block_ms / 1000
        if not self._local.acquire(timeout=max(0.0, max_block_ms / 1000)):
            raise BufferExhaustedError(f"failed to allocate {size} bytes within {max_block_ms} ms")
        try:
            return self._allocate(count, want, deadline, size, max_block_ms)
        except BaseException:
            self._local.release()
            raise

    def _allocate(
        self, count: int, want: int, deadline: float, size: int, max_block_ms: int
    ) -> SlabRun:
        with self.locks.held(POOL_LOCK):
            waiting = self._queue() != []
            short = self.free_slabs() < count + self.num_slabs // PLENTY_FRACTION
            if not waiting or not short:
                # (memory short: the run it wants, or it queues and holds out for it)
                run = self._take(count, want, want if short and max_block_ms > 0 else count)
                if run is not None:
                    if waiting:
                        self._wake_head()  # (they may take from the plenty too)
                    return run
            self._enqueue()
        try:
            return self._wait_queued(count, want, deadline, size, max_block_ms)
        except BaseException:
            # (the deadline passed, or a signal handler raised: a queued slot left at the
            # head would hold every other process's allocation up while memory is short)
            with self.locks.held(POOL_LOCK):
                self._dequeue()
                self._wake_head()
            raise

    def _wait_queued(
        self, count: int, want: int, deadline: float, size: int, max_block_ms: int
    ) -> SlabRun:
        """Queued: wait to be the head with a run free, until the deadline."""
        sem = self._sem(self.slot)
        patience = time.monotonic() + min(RUN_PATIENCE_S, max_block_ms / 2000)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:  # (the caller leaves the queue, as for any exception)
                raise BufferExhaustedError(
                    f"failed to allocate {size} bytes within {max_block_ms} ms "
                    f"({self.free_slabs()} of {self.num_slabs} slabs free)"
                )
            holding_out = patience - time.monotonic()
            woken = waits.acquire(
                sem, min(remaining, POLL_S, holding_out if holding_out > 0 else POLL_S)
            )
            with self.locks.held(POOL_LOCK):
                # A dead head wakes nobody: its liveness (a /proc read, under the pool lock
                # every allocation and free needs) is checked only after a wait in vain.
                queue = self._queue() if woken else self._drop_dead_head()
                least = want if time.monotonic() < patience else count  # (RUN_PATIENCE_S)
                if (
                    queue
                    and queue[0] == self.slot
                    and (run := self._take(count, want, least)) is not None
                ):
                    self._dequeue()
                    if self.free_slabs():  # the next in line only when there is some for it
                        self._wake_head()
                    return run

    def commit(self, run: SlabRun) -> None:
        """A batch descriptor now owns ``run``: forget it as pending."""
        at = self.layout.slot_at(self.slot) + S_PENDING
        PENDING.pack_into(self.segment.buf, at, NO_SLAB, 0)
        self._local.release()

    def abandon(self, run: SlabRun) -> None:
        """Give back an allocation no batch took (another process opened a batch first)."""
        try:
            self.deallocate(run)
            PENDING.pack_into(
                self.segment.buf, self.layout.slot_at(self.slot) + S_PENDING, NO_SLAB, 0
            )
        finally:
            self._local.release()

    def deallocate(self, run: SlabRun) -> None:
        """Return slabs to the pool and wake the longest waiter."""
        self.deallocate_many([run])

    def deallocate_many(self, runs: list[SlabRun]) -> None:
        """``deallocate`` for several runs, in one hold of the pool lock."""
        with self.locks.held(POOL_LOCK):
            for run in runs:
                self._mark(run, 0)
            self._wake_head()

    # ------------------------------------------------------------------ under the pool lock

    def _take(self, count: int, want: int | None = None, least: int = 0) -> SlabRun | None:
        """The first free run of ``want`` slabs from the allocation cursor on (next fit:
        batches are freed about in the order they were taken, so the memory ahead of the
        cursor is one long hole, where first fit packs new batches between old ones),
        else the longest shorter one if it holds ``count``."""
        start = self.layout.freemap_at
        freemap = bytes(self.segment.buf[start : start + self.num_slabs])
        length = max(count, want or count)
        cursor = U32.unpack_from(self.segment.buf, H_ALLOC_CURSOR)[0]
        first = freemap.find(bytes(length), cursor if cursor < self.num_slabs else 0)
        if first < 0:
            first = freemap.find(bytes(length))
        if first < 0 and length > count:
            # the longest shorter run; of equal ones the first from the cursor on (next fit,
            # as the C append's find_run)
            runs = [m.span() for m in _FREE_RUN.finditer(freemap)]
            n, at = self.num_slabs, cursor if cursor < self.num_slabs else 0
            first, end = max(
                runs, key=lambda r: (r[1] - r[0], -((r[0] - at) % n)), default=(-1, -1)
            )
            length = end - first
        if first < 0 or length < max(count, least):
            return None
        run = SlabRun(first, length)
        # Record the allocation in our slot first: if we die before a batch owns it, the
        # reclaimer frees it (freeing an unmarked run is harmless).
        PENDING.pack_into(
            self.segment.buf, self.layout.slot_at(self.slot) + S_PENDING, first, length
        )
        self._mark(run, 1)
        self.segment.store_u32(H_ALLOC_CURSOR, first + length)
        return run

    def _mark(self, run: SlabRun, value: int) -> None:
        at = self.layout.freemap_at + run.first
        self.segment.buf[at : at + run.count] = bytes([value]) * run.count

    def _queue(self) -> list[int]:
        buf = self.segment.buf
        head = U64.unpack_from(buf, H_WAITQ_HEAD)[0]
        tail = U64.unpack_from(buf, H_WAITQ_TAIL)[0]
        cap, high = self.layout.config.max_processes, self.slots.high()
        if head <= tail <= head + cap:
            queue = [
                U32.unpack_from(buf, self.layout.waitq_entry_at(i))[0] for i in range(head, tail)
            ]
            if all(slot < high for slot in queue):  # (no slot past the reserved ones)
                return queue
        return self._rebuild_queue()

    def _rebuild_queue(self) -> list[int]:
        """The wait queue's memory is damaged: queue again every slot flagged as waiting
        (in slot order; their arrival order is lost with the damage)."""
        buf = self.segment.buf
        flags = (self.layout.slot_at(slot) + S_WAITING_ALLOC for slot in range(self.slots.high()))
        queue = [slot for slot, at in enumerate(flags) if U32.unpack_from(buf, at)[0] == 1]
        self.segment.store_u64(H_WAITQ_HEAD, 0)
        self._write_queue(queue)
        return queue

    def _write_queue(self, queue: list[int]) -> None:
        buf = self.segment.buf
        head = U64.unpack_from(buf, H_WAITQ_HEAD)[0]
        for i, slot in enumerate(queue):
            self.segment.store_u32(self.layout.waitq_entry_at(head + i), slot)
        self.segment.store_u64(H_WAITQ_TAIL, head + len(queue))

    def _enqueue(self) -> None:
        queue = [s for s in self._queue() if s != self.slot]
        self._write_queue([*queue, self.slot])
        self.segment.store_u32(self.layout.slot_at(self.slot) + S_WAITING_ALLOC, 1)

    def _dequeue(self) -> None:
        self.remove_waiter(self.slot)

    def remove_waiter(self, slot: int) -> None:
        self._write_queue([s for s in self._queue() if s != slot])
        self.segment.store_u32(self.layout.slot_at(slot) + S_WAITING_ALLOC, 0)

    def _drop_dead_head(self) -> list[int]:
        queue = self._queue()
        while queue:
            state, pid, started = self.slots.identity(queue[0])
            if state and is_alive(pid, started):
                break
            self.remove_waiter(queue[0])
            queue = queue[1:]
        return queue

    def _wake_head(self) -> None:
        """Wake the first waiter. (Not checked for life here, which costs a /proc read per
        freed batch: a dead head is dropped by the waiters behind it, who look each
        ``POLL_S``.)"""
        queue = self._queue()
        if queue:
            self._sem(queue[0]).release()

    # ------------------------------------------------------------------ inspection

    def free_slabs(self) -> int:
        start = self.layout.freemap_at
        return bytes(self.segment.buf[start : start + self.num_slabs]).count(0)

    def waiters(self) -> int:
        return self.waiting_processes(self.segment)

    @staticmethod
    def waiting_processes(segment: Segment) -> int:
        """How many processes wait in the queue for memory (read without the lock)."""
        buf = segment.buf
        count = U64.unpack_from(buf, H_WAITQ_TAIL)[0] - U64.unpack_from(buf, H_WAITQ_HEAD)[0]
        return int(min(max(count, 0), segment.layout.config.max_processes))  # (damage bounded)

    @staticmethod
    def used_slabs(segment: Segment) -> int:
        start = segment.layout.freemap_at
        return bytes(segment.buf[start : start + segment.layout.config.num_slabs]).count(1)

    def used_map(self) -> bytes:
        start = self.layout.freemap_at
        return bytes(self.segment.buf[start : start + self.num_slabs])
