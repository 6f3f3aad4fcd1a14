"""Batch descriptors and partition deques: the shared accumulator's bookkeeping.

Rules:
- A batch's id is its first slab's index: a batch owns its slab run, so ids never collide
  and need no allocator of their own. ``generation`` grows each time the id is reused, so a
  (batch id, generation) pair names one batch for the life of the pool.
- A queued batch (in a deque) is written only under its deque's stripe lock. Appenders
  publish a record with ``publish_record``: record bytes, times, then ``write_pos`` and
  ``record_count`` in one 8-byte store (see layout.py). Once drained, only the Sender
  writes it.
- ``open`` writes the descriptor with state FREE and sets the state last, so a process
  killed midway leaves a FREE descriptor, never a torn OPEN one.
- A deque is a linked list of batches through their descriptors' ``B_NEXT``, with both
  ends in one u64 (first | last << 32). A push writes the old last batch's ``B_NEXT``, then
  the ends (publish last); a walk starts at first and stops at last, so a ``B_NEXT`` no
  ends-store has published is never followed. All under the stripe lock; the Sender reads
  the ends without it.
- A deque's ACTIVE byte is set before a batch is pushed, and cleared only by the Sender,
  under the stripe lock, when it finds the deque empty: a deque holding batches is always
  active, and the Sender looks at no other.
"""

from __future__ import annotations

import itertools
import re
from typing import NamedTuple

from shmkafka.shm.layout import (
    B_ATTEMPTS,
    B_BASE_SEQUENCE,
    B_DEQUE,
    B_GENERATION,
    B_NEXT,
    B_PARENT,
    B_PRODUCER_EPOCH,
    B_PRODUCER_ID,
    B_PUBLISH,
    B_PUBLISH_TIMES,
    B_RECOVERED,
    B_SLAB_COUNT,
    B_STATE,
    BATCH,
    BATCH_BODY,
    BATCH_SIZE_BYTES,
    D_ENDS,
    D_NEXT_SEQUENCE,
    D_PARTITION,
    D_RUN_HINT,
    D_STICKY,
    EMPTY_ENDS,
    FREE,
    I32,
    NO_BATCH,
    NO_PARENT,
    OPEN,
    PARENT,
    PUBLISH_TIMES,
    U32,
    Layout,
)
from shmkafka.shm.rings import appender_slots
from shmkafka.shm.segment import Segment

_SET_BYTE = re.compile(rb"[^\x00]")


def publish_record(
    buf: memoryview,
    words: memoryview,
    at: int,
    write_pos: int,
    count: int,
    max_ts: int,
    now_ms: int,
) -> None:
    """Publish a batch's records up to ``write_pos`` (the descriptor at ``at``): the times,
    then write_pos and count in one aligned 8-byte store (``words`` is the segment as u64)."""
    PUBLISH_TIMES.pack_into(buf, at + B_PUBLISH_TIMES, max_ts, now_ms)
    words[(at + B_PUBLISH) >> 3] = write_pos | count << 32


class BatchInfo(NamedTuple):
    """A batch descriptor as read (a NamedTuple: the Sender reads these all the time)."""

    batch_id: int
    state: int
    generation: int
    deque_id: int
    first_slab: int
    slab_count: int
    attempts: int
    write_pos: int
    record_count: int
    max_timestamp: int
    last_append_ms: int
    base_timestamp: int
    created_ms: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    appenders_raw: bytes
    parent_batch: int = NO_PARENT
    parent_generation: int = 0
    parent_delta: int = 0

    @property
    def appenders(self) -> frozenset[int]:
        """The process slots that appended to the batch."""
        return frozenset(appender_slots(self.appenders_raw))


class Batches:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.layout: Layout = segment.layout

    def head(self, batch_id: int) -> tuple[int, int, int, int, int, int]:
        """What ``ready()`` asks of a queued batch, in one unpack: (slab count, attempts,
        write position, record count, created ms, last append ms)."""
        (_, _, _, _, count, attempts, pos, records, _, last, _, created, _, _, _) = (
            BATCH.unpack_from(self.segment.buf, self.layout.batch_at(batch_id))
        )  # fmt: skip
        return count, attempts, pos, records, created, last

    def read(self, batch_id: int) -> BatchInfo:
        fields = BATCH.unpack_from(self.segment.buf, self.layout.batch_at(batch_id))
        (state, gen, deque, first, count, attempts, pos, records, max_ts, last, base_ts,
         created, pid, epoch, seq) = fields  # fmt: skip
        at = self.layout.appenders_of(batch_id)
        appenders = bytes(self.segment.buf[at : at + self.layout.appenders_size])
        parent, parent_gen, parent_delta = PARENT.unpack_from(
            self.segment.buf, self.layout.batch_at(batch_id) + B_PARENT
        )
        return BatchInfo(
            batch_id, state, gen, deque, first, count, attempts, pos, records, max_ts, last,
            base_ts, created, pid, epoch, seq, appenders, parent, parent_gen,
            parent_delta,
        )  # fmt: skip

    def open(
        self,
        batch_id: int,
        deque_id: int,
        slab_count: int,
        write_pos: int,
        base_ts: int,
        now_ms: int,
    ) -> int:
        """Start a batch on the slab run beginning at ``batch_id``; returns its generation."""
        at = self.layout.batch_at(batch_id)
        buf = self.segment.buf
        generation: int = (U32.unpack_from(buf, at + B_GENERATION)[0] + 1) & 0xFFFFFFFF
        # The generation in one store (a pack_into would zero it first: a kill then would
        # restart the id's generations), then the body; the state stays FREE meanwhile.
        self.segment.store_u32(at + B_GENERATION, generation)
        BATCH_BODY.pack_into(
            buf, at + B_DEQUE, deque_id, batch_id, slab_count, 0, write_pos, 0,
            base_ts, now_ms, base_ts, now_ms, -1, -1, -1,
        )  # fmt: skip
        appenders_at, size = self.layout.appenders_of(batch_id), self.layout.appenders_size
        buf[appenders_at : appenders_at + size] = bytes(size)
        PARENT.pack_into(buf, at + B_PARENT, NO_PARENT, 0, 0)
        self.set_state(batch_id, OPEN)  # last: a descriptor that is not FREE is whole
        return generation

    def set_parent(self, batch_id: int, parent: int, generation: int, delta: int) -> None:
        PARENT.pack_into(
            self.segment.buf, self.layout.batch_at(batch_id) + B_PARENT, parent, generation, delta
        )

    def set_appenders(self, batch_id: int, appenders: frozenset[int]) -> None:
        size = self.layout.appenders_size
        raw = sum(1 << slot for slot in appenders if slot < 8 * size).to_bytes(size, "little")
        at = self.layout.appenders_of(batch_id)
        self.segment.buf[at : at + size] = raw

    def set_state(self, batch_id: int, state: int) -> None:
        self.segment.store_u32(self.layout.batch_at(batch_id) + B_STATE, state)

    def state(self, batch_id: int) -> int:
        state: int = U32.unpack_from(self.segment.buf, self.layout.batch_at(batch_id) + B_STATE)[0]
        return state

    def publish(self, batch_id: int, write_pos: int, count: int, max_ts: int, now_ms: int) -> None:
        publish_record(
            self.segment.buf, self.segment.words, self.layout.batch_at(batch_id),
            write_pos, count, max_ts, now_ms,
        )  # fmt: skip

    def add_appender(self, batch_id: int, slot: int) -> None:
        at = self.layout.appenders_of(batch_id) + (slot >> 3)
        buf = self.segment.buf
        buf[at] |= 1 << (slot & 7)

    def set_slab_count(self, batch_id: int, slab_count: int) -> None:
        """Shrink a drained batch's run (the Sender, before it frees the tail)."""
        self.segment.store_u32(self.layout.batch_at(batch_id) + B_SLAB_COUNT, slab_count)

    def set_attempts(self, batch_id: int, attempts: int) -> None:
        self.segment.store_u32(self.layout.batch_at(batch_id) + B_ATTEMPTS, attempts)

    def set_producer_state(
        self, batch_id: int, producer_id: int, epoch: int, sequence: int
    ) -> None:
        at = self.layout.batch_at(batch_id)
        buf = self.segment.buf
        self.segment.store_u64(at + B_PRODUCER_ID, producer_id & 0xFFFFFFFFFFFFFFFF)
        buf[at + B_PRODUCER_EPOCH : at + B_PRODUCER_EPOCH + 2] = (epoch & 0xFFFF).to_bytes(
            2, "little"
        )
        self.segment.store_u32(at + B_BASE_SEQUENCE, sequence)

    def set_recovered(self, batch_id: int) -> None:
        """Recovery made this batch (recovery.py): its results are counted, not posted."""
        self.segment.store_u32(self.layout.batch_at(batch_id) + B_RECOVERED, 1)

    def recovered(self, batch_id: int) -> bool:
        return bool(self.segment.halfwords[(self.layout.batch_at(batch_id) + B_RECOVERED) >> 2])

    def clear(self, batch_id: int) -> None:
        """Mark the descriptor free (its slabs are returned separately)."""
        self.set_state(batch_id, FREE)

    def problem(self, info: BatchInfo, deques_used: int, header_size: int) -> str | None:
        """What is wrong with a drained batch's descriptor, or None. The Sender checks every
        descriptor before it touches the slabs it names: shared memory is writable by every
        producer process, and a corrupted descriptor must fail its batch, not the Sender."""
        slabs = self.layout.config.num_slabs
        if info.first_slab != info.batch_id or not 1 <= info.slab_count <= slabs - info.batch_id:
            return f"slab run {info.first_slab}+{info.slab_count} is not this batch's"
        if not header_size < info.write_pos <= self.capacity(info.slab_count):
            return f"write position {info.write_pos} outside the batch"
        if not 1 <= info.record_count <= info.write_pos - header_size:
            return f"record count {info.record_count} does not fit {info.write_pos} bytes"
        if not 0 <= info.deque_id < deques_used:
            return f"deque {info.deque_id} does not exist"
        if info.parent_batch != NO_PARENT and (
            info.parent_batch >= slabs or info.parent_delta + info.record_count >= 1 << 31
        ):
            return f"parent {info.parent_batch}/{info.parent_delta} does not exist"
        return None

    def run_in_bounds(self, info: BatchInfo) -> bool:
        slabs = self.layout.config.num_slabs
        return info.first_slab == info.batch_id and 1 <= info.slab_count <= slabs - info.batch_id

    def data(self, info: BatchInfo) -> memoryview:
        """The batch's bytes: header reserve and records up to the published write position."""
        start = self.layout.slab_at(info.first_slab)
        return self.segment.buf[start : start + info.write_pos]

    def capacity(self, slab_count: int) -> int:
        return slab_count * self.layout.config.slab_size

    @property
    def size(self) -> int:
        return BATCH_SIZE_BYTES


class Deques:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.layout: Layout = segment.layout
        self._base = self.layout.deques_at
        self._size = self.layout.deque_size
        self._batches = self.layout.batches_at
        self._num_slabs = self.layout.config.num_slabs

    def _ends(self, deque_id: int) -> tuple[int, int, int]:
        """(where the deque is, its first batch, its last batch): NO_BATCH when empty."""
        at = self._base + deque_id * self._size
        ends: int = self.segment.words[(at + D_ENDS) >> 3]  # (one load: read without locks)
        return at, ends & 0xFFFFFFFF, ends >> 32

    def _next(self, batch_id: int) -> int:
        at = self._batches + batch_id * BATCH_SIZE_BYTES + B_NEXT
        nxt: int = U32.unpack_from(self.segment.buf, at)[0]
        return nxt

    def _walk(self, deque_id: int) -> tuple[list[int], str | None]:
        """The queued ids first to last, and what is damaged (None: nothing): a walk is
        bounded by the slab count, so a damaged link never loops."""
        _, first, last = self._ends(deque_id)
        if first == NO_BATCH and last == NO_BATCH:
            return [], None
        ids: list[int] = []
        batch_id = first
        while True:
            if batch_id >= self._num_slabs:
                return ids, f"deque {deque_id} holds batch id {batch_id} (of {self._num_slabs})"
            ids.append(batch_id)
            if batch_id == last:
                return ids, None
            if len(ids) >= self._num_slabs:
                return ids, f"deque {deque_id} does not end at its last batch {last}"
            batch_id = self._next(batch_id)

    def _store(self, at: int, ids: list[int]) -> None:
        """Link ``ids`` in order, then publish them as the deque in one store. The links
        are written last to first: a batch's link is set before any batch links to it, so
        a kill midway leaves a walk that still ends at the last batch (a batch inserted is
        reached only once its own link is right)."""
        for batch_id, nxt in reversed(list(itertools.pairwise(ids))):
            self.segment.store_u32(self._batches + batch_id * BATCH_SIZE_BYTES + B_NEXT, nxt)
        ends = ids[0] | ids[-1] << 32 if ids else EMPTY_ENDS
        self.segment.store_u64(at + D_ENDS, ends)

    def problem(self, deque_id: int) -> str | None:
        """What is wrong with a deque's links, or None: a deque is read without locks by the
        Sender and written by every producer, so memory damage must be caught before a list
        is walked or an id in it is used."""
        return self._walk(deque_id)[1]

    def reset(self, deque_id: int) -> None:
        """Empty a damaged deque (under its stripe lock)."""
        self.segment.store_u64(self._base + deque_id * self._size + D_ENDS, EMPTY_ENDS)

    def batch_ids(self, deque_id: int) -> list[int]:
        """The queued batch ids, first to last; a damaged deque shows only its valid ids
        (``problem`` reports the damage)."""
        return self._walk(deque_id)[0]

    def length(self, deque_id: int) -> int:
        return len(self.batch_ids(deque_id))

    def is_empty(self, deque_id: int) -> bool:
        return self._ends(deque_id)[1] == NO_BATCH

    def first(self, deque_id: int) -> int | None:
        """The first batch id, or None when empty or damaged (the Sender's periodic
        ``integrity.quarantine_damaged`` then empties the deque)."""
        _, first, last = self._ends(deque_id)
        if first >= self._num_slabs or last >= self._num_slabs:
            return None
        return first

    def first_and_length(self, deque_id: int) -> tuple[int | None, int]:
        """The first batch id (None when empty or damaged, as ``first``) and how many are
        queued, counting at most 2: one load."""
        _, first, last = self._ends(deque_id)
        if first >= self._num_slabs or last >= self._num_slabs:
            return None, 0
        return first, 1 if first == last else 2

    def last_and_length(self, deque_id: int) -> tuple[int | None, int]:
        """The last batch id and how many are queued, counting at most 2 (callers ask
        only whether the last batch is the only one)."""
        _, first, last = self._ends(deque_id)
        if first >= self._num_slabs or last >= self._num_slabs:
            return None, 0  # empty, or damaged (see ``first``)
        return last, 1 if first == last else 2

    def push_last(self, deque_id: int, batch_id: int) -> None:
        at, first, last = self._ends(deque_id)
        self.mark_active(deque_id)  # before the batch is visible (see the rules)
        if first == NO_BATCH or last >= self._num_slabs:
            self.segment.store_u64(at + D_ENDS, batch_id | batch_id << 32)
            return
        self.segment.store_u32(self._batches + last * BATCH_SIZE_BYTES + B_NEXT, batch_id)
        self.segment.store_u64(at + D_ENDS, first | batch_id << 32)  # publish last

    def push_first(self, deque_id: int, batch_id: int) -> None:
        at, first, last = self._ends(deque_id)
        self.mark_active(deque_id)
        if first == NO_BATCH or first >= self._num_slabs:
            self.segment.store_u64(at + D_ENDS, batch_id | batch_id << 32)
            return
        self.segment.store_u32(self._batches + batch_id * BATCH_SIZE_BYTES + B_NEXT, first)
        self.segment.store_u64(at + D_ENDS, batch_id | last << 32)

    def pop_first(self, deque_id: int) -> int:
        at, first, last = self._ends(deque_id)
        assert first != NO_BATCH, "pop from an empty deque"
        if first == last:
            self.segment.store_u64(at + D_ENDS, EMPTY_ENDS)
        else:
            self.segment.store_u64(at + D_ENDS, self._next(first) | last << 32)
        return first

    def remove(self, deque_id: int, batch_id: int) -> None:
        at = self._base + deque_id * self._size
        self._store(at, [b for b in self.batch_ids(deque_id) if b != batch_id])

    def replace(self, deque_id: int, ids: list[int]) -> None:
        """Make the deque hold exactly ``ids``, in order (under the stripe lock)."""
        if ids:
            self.mark_active(deque_id)
        self._store(self._base + deque_id * self._size, ids)

    # ------------------------------------------------------------------ the active set

    def mark_active(self, deque_id: int) -> None:
        at = self.layout.active_byte_at(deque_id)
        if not self.segment.buf[at]:
            self.segment.buf[at] = 1

    def clear_active(self, deque_id: int) -> None:
        """The Sender, under the stripe lock, for a deque it found empty."""
        self.segment.buf[self.layout.active_byte_at(deque_id)] = 0

    def active(self, deques_used: int) -> list[int]:
        """The deques that may hold batches (one scan of the ACTIVE bytes)."""
        start = self.layout.active_at
        view = self.segment.buf[start : start + deques_used]
        try:
            return [m.start() for m in _SET_BYTE.finditer(view)]
        finally:
            view.release()

    def partition(self, deque_id: int) -> int:
        partition: int = I32.unpack_from(
            self.segment.buf, self.layout.deque_at(deque_id) + D_PARTITION
        )[0]
        return partition

    def sticky(self, deque_id: int) -> int | None:
        """The sticky partition recorded in this (partition 0's) deque, if any."""
        value: int = U32.unpack_from(self.segment.buf, self.layout.deque_at(deque_id) + D_STICKY)[0]
        return value - 1 if value else None

    def set_sticky(self, deque_id: int, partition: int) -> None:
        self.segment.store_u32(self.layout.deque_at(deque_id) + D_STICKY, partition + 1)

    def run_hint(self, deque_id: int) -> int:
        """How many slabs this partition's next batch asks for (at least 1; layout.py)."""
        hint: int = U32.unpack_from(self.segment.buf, self.layout.deque_at(deque_id) + D_RUN_HINT)[
            0
        ]
        return min(max(hint, 1), self.layout.config.max_run)

    def set_run_hint(self, deque_id: int, slabs: int) -> None:
        """Under the deque's stripe lock."""
        hint = min(max(slabs, 1), self.layout.config.max_run)
        self.segment.store_u32(self.layout.deque_at(deque_id) + D_RUN_HINT, hint)

    def next_sequence(self, deque_id: int) -> int:
        seq: int = I32.unpack_from(
            self.segment.buf, self.layout.deque_at(deque_id) + D_NEXT_SEQUENCE
        )[0]
        return seq

    def set_next_sequence(self, deque_id: int, sequence: int) -> None:
        self.segment.store_u32(self.layout.deque_at(deque_id) + D_NEXT_SEQUENCE, sequence)
