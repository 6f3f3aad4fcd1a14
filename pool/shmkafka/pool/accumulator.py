"""RecordAccumulator over the shared pool: append (app processes) and drain (the Sender).
Its append has a C twin, ``_append.c`` (fastpath.py loads it); this Python one is the
reference, and serves where the C one declines or is not built.

Rules:
- append locks by segment, as Java's RecordAccumulator does: lock the partition's stripe →
  try the last batch → unlock; allocate memory with no lock held; lock again → try again
  (another process may have opened a batch meanwhile; then the memory goes back) → open a
  batch.
- Records are written in their final RecordBatch v2 form after the reserved 61-byte header;
  the Sender only fills the header (``finalize``), it never re-encodes a record.
- Publish last: the record's bytes, then the appender bit, then ``publish_record``
  (max_timestamp and last_append_ms, then write_pos and record_count in one 8-byte store).
- Bad input (unknown topic or partition, a record that can never fit) is rejected before
  anything is written to shared memory.
- A caller that resolved the deque at a directory version passes it: under the stripe lock
  the append first checks the directory is still there (StaleRouteError otherwise: resolve
  again), since the Sender gives an idle topic's deques back only under their stripe locks
  and with a new version (shm/directory.py).
- Only the last batch of a deque accepts appends, and only while OPEN. Drained batches are
  SEALED (then IN_FLIGHT); a re-enqueued batch stays SEALED and goes back in sequence order.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, NoReturn

from shmkafka.pool.batches import BatchInfo, publish_record
from shmkafka.pool.bufferpool import SlabRun
from shmkafka.pool.fastpath import FastAppend, fast_path_for
from shmkafka.pool.partition_states import PartitionState, PartitionStates
from shmkafka.pool.result_wakes import ResultWakes
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.compression import BlockMap
from shmkafka.protocol.records import (
    HEADER_SIZE,
    RECORD_OVERHEAD,
    BatchMeta,
    BatchParts,
    HeaderInput,
    encode_record_tail,
    finalize_batch,
    framed_size,
    record_head,
    record_size_bound,
)
from shmkafka.shm import faultpoints
from shmkafka.shm.errors import RecordTooLargeError
from shmkafka.shm.layout import (
    APPEND_VIEW,
    FIRST_STRIPE_LOCK,
    FREE,
    IN_FLIGHT,
    NO_PARENT,
    OPEN,
    SEALED,
)
from shmkafka.shm.rings import Completion, SenderView, ring_entry

log = logging.getLogger("shmkafka.producer")


# What FastAppend.drain_first and its Python twin return when they drain no batch.
DRAIN_EMPTY, DRAIN_POPPED, DRAIN_STOP, DRAIN_BUSY, DRAIN_LEAVE = range(5)


class StaleRouteError(Exception):
    """The directory moved since the caller resolved the deque (its topic may be retired):
    nothing was written; resolve the topic again."""


class AppendResult(NamedTuple):
    """Where a record went. A NamedTuple: built on every append, so it must be cheap."""

    batch_id: int
    generation: int
    offset_delta: int
    batch_is_full: bool
    new_batch_created: bool


@dataclass(frozen=True)
class DrainedBatch:
    topic: str
    partition: int
    info: BatchInfo

    @property
    def batch_id(self) -> int:
        return self.info.batch_id


class RecordAccumulator:
    """``fast_path``: use the C append fast path when it is built (the default); False forces
    the pure-Python path, which is the reference and the fallback. ``c_drain``: drain in C
    when it is built (default: as ``fast_path``; the Sender drains in C, appends in Python)."""

    def __init__(
        self, pool: SharedPool, *, max_block_ms: int = 60_000, fast_path: bool = True,
        c_drain: bool | None = None,
    ) -> None:  # fmt: skip
        self.pool = pool
        self.max_block_ms = max_block_ms
        self._buf = pool.segment.buf
        self._words = pool.segment.words
        self._layout = pool.layout
        self._slab_size = pool.config.slab_size
        self._max_run = pool.config.max_run
        self._max_records = pool.config.batch_max_records or 1 << 32
        self._limit = pool.config.record_limit
        self._deferred: Counter[int] | None = None  # slot → results posted this round
        self.wakes = ResultWakes(pool.rings, pool.slots)  # (the Sender's: result_wakes.py)
        self._unfreed: list[SlabRun] | None = None  # runs of completed batches, while deferred
        self._marked: dict[int, int] = {}  # batch id → generation whose appender bit we set
        self._deques = pool.deques
        self._directory = pool.directory
        self._locks = pool.locks
        self._stripes = pool.config.lock_stripes
        self._fast = fast_path_for(pool) if fast_path else None
        # the drain in C (the Sender's; a kill point inside the drain needs the Python one)
        c_drain = fast_path if c_drain is None else c_drain
        self._drain_fast = None
        if c_drain and "drain.after_shrink" not in faultpoints.ARMED:
            self._drain_fast = self._fast or fast_path_for(pool, for_sends=False)
        self._states = PartitionStates(pool, self._deactivate, self._drain_fast)

    @property
    def fast_path(self) -> FastAppend | None:
        """The C fast path, for Client.send's one-call route (None: pure Python)."""
        return self._fast

    @property
    def drain_fast(self) -> FastAppend | None:  # (the Sender's C path: drain, post, seal)
        return self._drain_fast

    def close(self) -> None:
        """Release the C fast path's view of the segment (before the pool detaches)."""
        if self._drain_fast is not None and self._drain_fast is not self._fast:
            self._drain_fast.close()
        self._drain_fast = None
        if self._fast is not None:
            self._fast.close()
            self._fast = None

    # ------------------------------------------------------------------ append (app side)

    def append_to(
        self,
        deque_id: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[HeaderInput] = (),
        *,
        now_ms: int,
        new_batch: bool = False,
        version: int = -1,
        c_tried: bool = False,
    ) -> AppendResult:
        """Append one record to the partition's deque, which the caller resolved at directory
        ``version`` (-1: unchecked; see the rules). ``new_batch``: the caller just saw the
        partition without an open batch with room, so go straight to opening one (which
        still appends to a batch another opened meanwhile). ``c_tried``: the C append had
        the record and left it: only the Python path (its blocking locks) takes it."""
        if self.pool.forked:
            self.pool.check_owner()
        fast = None if c_tried else self._fast
        if fast is not None and not headers and not new_batch:
            # append_kv takes bytes or None (a bytearray or memoryview goes the general way)
            plain = (key is None or type(key) is bytes) and (value is None or type(value) is bytes)
            if plain:
                if (size := record_size_bound(key, value)) > self._limit:
                    self._too_large(size)
                hit = fast.append_kv(deque_id, timestamp_ms, key, value, now_ms, version)
                if hit is not None:
                    batch_id, generation, offset_delta, full, _ = hit
                    return AppendResult(batch_id, generation, offset_delta, bool(full), False)
        tail = encode_record_tail(key, value, headers)
        needed = HEADER_SIZE + RECORD_OVERHEAD + len(tail)
        if needed > self._limit:
            self._too_large(needed)
        stripe = FIRST_STRIPE_LOCK + deque_id % self._stripes
        if new_batch:
            return self._append_new_batch(deque_id, stripe, timestamp_ms, tail, now_ms, version)
        if fast is not None:
            hit = fast.append(deque_id, timestamp_ms, tail, now_ms, version)
            if hit is not None:
                batch_id, generation, offset_delta, full, _ = hit
                return AppendResult(batch_id, generation, offset_delta, bool(full), False)
        locks = self._locks
        locks.acquire(stripe)
        try:
            self._check_version(version)
            result = self._try_append(deque_id, timestamp_ms, tail, now_ms)
        finally:
            locks.release(stripe)
        if result is not None:
            return result
        return self._append_new_batch(deque_id, stripe, timestamp_ms, tail, now_ms, version)

    def _check_version(self, version: int) -> None:
        """Under the stripe lock: the directory is still at the caller's ``version``."""
        if version >= 0 and self._directory.version() != version:
            raise StaleRouteError(version)

    def _too_large(self, size: int) -> NoReturn:
        """Reject, before anything is written, a record no batch could ever hold."""
        raise RecordTooLargeError(
            f"a record of about {size} bytes exceeds max_request_size/buffer_memory ({self._limit})"
        )

    def _append_new_batch(
        self, deque_id: int, stripe: int, timestamp_ms: int, tail: bytes, now_ms: int,
        version: int = -1,
    ) -> AppendResult:  # fmt: skip
        buffers = self.pool.buffers
        first = HEADER_SIZE + framed_size(len(tail))  # (the batch it opens: exact)
        run = buffers.allocate(first, self.max_block_ms, self._run_wanted(deque_id))
        faultpoints.reached("append.after_allocate")
        committed = False
        try:
            with self.pool.locks.held(stripe):
                faultpoints.reached("append.holding_stripe")
                self._check_version(version)
                result = self._try_append(deque_id, timestamp_ms, tail, now_ms)
                if result is None:
                    result = self._open_batch(deque_id, run, timestamp_ms, tail, now_ms)
                    buffers.commit(run)
                    committed = True
            return result
        finally:
            if not committed:
                buffers.abandon(run)

    def _run_wanted(self, deque_id: int) -> int:
        """How many slabs a new batch of this partition asks for: twice the last batch's
        run when that one is still open (it filled before the Sender took it), else the
        partition's hint, which the Sender sets from what the drained batches held. Read
        without the lock: a stale answer only sizes one batch less well."""
        last, _ = self._deques.last_and_length(deque_id)
        if last is not None:
            info = self.pool.batches.read(last)
            full_by_bytes = info.record_count < self._max_records  # (by count: the hint)
            if info.state == OPEN and info.first_slab == last and full_by_bytes:
                return min(self._max_run, 2 * info.slab_count)
        return self._deques.run_hint(deque_id)

    def _open_batch(
        self, deque_id: int, run: SlabRun, timestamp_ms: int, tail: bytes, now_ms: int
    ) -> AppendResult:
        batches = self.pool.batches
        generation = batches.open(run.first, deque_id, run.count, HEADER_SIZE, timestamp_ms, now_ms)
        result = self._try_append_to(run.first, timestamp_ms, tail, now_ms)
        assert result is not None, "a fresh batch always takes one record"
        try:
            self.pool.deques.push_last(deque_id, run.first)
        except BaseException:
            batches.clear(run.first)
            raise
        return AppendResult(run.first, generation, 0, result.batch_is_full, True)

    def _try_append(
        self, deque_id: int, timestamp_ms: int, tail: bytes, now_ms: int
    ) -> AppendResult | None:
        last, _ = self._deques.last_and_length(deque_id)
        if last is None:
            return None
        return self._try_append_to(last, timestamp_ms, tail, now_ms)

    def _try_append_to(
        self, batch_id: int, timestamp_ms: int, tail: bytes, now_ms: int
    ) -> AppendResult | None:
        buf = self._buf
        at = self._layout.batch_at(batch_id)
        (state, gen, _, first_slab, slab_count, _, write_pos, count, max_ts, _, base_ts) = (
            APPEND_VIEW.unpack_from(buf, at)
        )
        if state != OPEN or count >= self._max_records:
            return None
        head = record_head(count, timestamp_ms - base_ts, len(tail))
        size = len(head) + len(tail)
        end = write_pos + size
        capacity = slab_count * self._slab_size
        if end > capacity:
            return None
        start = self._layout.slabs_at + first_slab * self._slab_size
        tail_at = start + write_pos + len(head)
        buf[start + write_pos : tail_at] = head
        buf[tail_at : start + end] = tail  # (apart: a large tail is not copied to join them)
        if self._marked.get(batch_id) != gen:  # the appender bit is set once per batch
            self.pool.batches.add_appender(batch_id, self.pool.slot)
            self._marked[batch_id] = gen
        faultpoints.reached("append.before_publish")
        publish_record(buf, self._words, at, end, count + 1, max(max_ts, timestamp_ms), now_ms)
        full = capacity - end < size or count + 1 >= self._max_records
        return AppendResult(batch_id, gen, count, full, False)

    # ------------------------------------------------------------------ drain (Sender side)

    def partition_states(self) -> list[PartitionState]:
        """Every partition with queued batches, with what ``ready()`` needs to decide
        (partition_states.py)."""
        return self._states.read()

    def _deactivate(self, deque_id: int) -> None:
        """Take an empty deque out of the active set (under its stripe lock: an appender
        marks it again before its push)."""
        with self.pool.locks.held(self._layout.stripe_lock(deque_id)):
            if self._deques.is_empty(deque_id):
                self._deques.clear_active(deque_id)

    def drain(self, deque_ids: Iterable[int], max_bytes: int) -> list[DrainedBatch]:
        """Seal and pop the first batch of each given deque until ``max_bytes`` is reached
        (the first batch is always taken, so an oversized batch is never stuck). The slabs
        the batches did not fill go back once the stripes are let go."""
        owner = self.pool.directory.owner
        out: list[DrainedBatch] = []
        tails: list[SlabRun] = []
        total = 0
        fast = self._drain_fast
        try:
            for deque_id in deque_ids:
                found = owner(deque_id)
                if found is None:
                    continue
                room = max_bytes - total if out else -1  # (-1: the first goes whatever)
                if out and room < 0:
                    break
                got = DRAIN_BUSY if fast is None else fast.drain_first(deque_id, room)
                if got in (DRAIN_BUSY, DRAIN_LEAVE):  # (C left it: the Python twin)
                    got = self._drain_first(deque_id, room, tails)
                if type(got) is tuple:
                    batch_id, size, tail_first, tail_count = got
                    if tail_count:
                        tails.append(SlabRun(tail_first, tail_count))
                    out.append(DrainedBatch(*found, self.pool.batches.read(batch_id)))
                    total += size
                elif got == DRAIN_STOP:
                    break
        finally:
            if tails:
                self.pool.buffers.deallocate_many(tails)
        return out

    def _drain_first(
        self, deque_id: int, room: int, tails: list[SlabRun]
    ) -> tuple[int, int, int, int] | int:
        """The deque's first batch sealed, popped and trimmed (its unfilled slabs added to
        ``tails``), as (batch id, size, 0, 0); or DRAIN_EMPTY, DRAIN_POPPED (a damaged first
        batch taken off), DRAIN_STOP (larger than ``room``; -1: no limit). The Python twin
        of ``FastAppend.drain_first`` (_append_drain.c), which returns the tail instead."""
        with self.pool.locks.held(self._layout.stripe_lock(deque_id)):
            first = self.pool.deques.first(deque_id)
            if first is None:
                return DRAIN_EMPTY
            queued = self.pool.batches.read(first)
            if queued.state not in (OPEN, SEALED) or self._queued_elsewhere(queued, deque_id):
                # (damaged: it is not queued here; sending it would resend or steal)
                self.pool.deques.pop_first(deque_id)
                return DRAIN_POPPED
            size = queued.write_pos
            if 0 <= room < size:
                return DRAIN_STOP
            self.pool.batches.set_state(first, SEALED)
            self.pool.deques.pop_first(deque_id)
            self._trim(self.pool.batches.read(first), tails)
        return first, size, 0, 0

    def _trim(self, info: BatchInfo, tails: list[SlabRun]) -> BatchInfo:
        """A batch just sealed (stripe lock held): size its partition's next batch from
        what this one held (the slabs it filled; twice as many if it filled its whole run,
        so a busy partition's batches keep growing and an idle one's stay one slab), and
        add the slabs it did not fill to ``tails``, for the caller to free. The descriptor
        shrinks before the tail is freed (a kill between leaks slabs for the next Sender to
        reclaim, never shares)."""
        used = -(-info.write_pos // self._slab_size)
        if info.attempts == 0 and info.parent_batch == NO_PARENT:
            room = info.slab_count * self._slab_size - info.write_pos
            self._deques.set_run_hint(
                info.deque_id, 2 * used if room < self._slab_size // 2 else used
            )
        if not 1 <= used < info.slab_count or not self.pool.batches.run_in_bounds(info):
            return info
        self.pool.batches.set_slab_count(info.batch_id, used)
        faultpoints.reached("drain.after_shrink")
        tails.append(SlabRun(info.first_slab + used, info.slab_count - used))
        return self.pool.batches.read(info.batch_id)

    def _queued_elsewhere(self, info: BatchInfo, deque_id: int) -> bool:
        other = info.deque_id
        return (
            other != deque_id
            and other < self.pool.deques_used()
            and info.batch_id in self._deques.batch_ids(other)
        )

    def expire(self, now_ms: int, delivery_timeout_ms: int) -> list[DrainedBatch]:
        """Pop queued batches created more than ``delivery_timeout_ms`` ago (oldest first)."""
        owner = self.pool.directory.owner
        out: list[DrainedBatch] = []
        for deque_id in self._deques.active(self.pool.deques_used()):
            found = owner(deque_id)
            if self._deques.is_empty(deque_id) or found is None:
                continue
            with self.pool.locks.held(self._layout.stripe_lock(deque_id)):
                while (first := self._deques.first(deque_id)) is not None:
                    info = self.pool.batches.read(first)
                    if now_ms - info.created_ms < delivery_timeout_ms:
                        break
                    self.pool.batches.set_state(first, SEALED)
                    self._deques.pop_first(deque_id)
                    out.append(DrainedBatch(*found, self.pool.batches.read(first)))
        return out

    def in_flight_batches(self) -> list[DrainedBatch]:
        """Batches drained but not completed (SEALED or IN_FLIGHT and in no deque): what a
        restarted Sender must send again."""
        active = self._deques.active(self.pool.deques_used())
        queued = {b for d in active for b in self._deques.batch_ids(d)}
        used, owner = self.pool.deques_used(), self.pool.directory.owner
        out = []
        for batch_id in range(self.pool.config.num_slabs):
            info = self.pool.batches.read(batch_id)
            if info.state in (SEALED, IN_FLIGHT) and batch_id not in queued:
                found = owner(info.deque_id) if info.deque_id < used else None
                if found is not None:
                    out.append(DrainedBatch(*found, info))
        return sorted(out, key=lambda b: (b.info.deque_id, b.info.base_sequence))

    def refresh(self, batch: DrainedBatch) -> DrainedBatch:
        """The batch with its descriptor as it is now in shared memory."""
        return DrainedBatch(batch.topic, batch.partition, self.pool.batches.read(batch.batch_id))

    def mark_in_flight(self, batch: DrainedBatch) -> None:
        self.pool.batches.set_state(batch.batch_id, IN_FLIGHT)

    def reenqueue(self, batch: DrainedBatch, now_ms: int = 0) -> None:
        """Put a drained batch back at the front of its deque, ordered by base sequence
        among the re-enqueued batches already there. ``now_ms`` is the attempt's time
        (kept in last_append_ms: a sealed batch takes no appends) for the retry backoff."""
        batches, deques = self.pool.batches, self.pool.deques
        deque_id = batch.info.deque_id
        info = batches.read(batch.batch_id)
        with self.pool.locks.held(self._layout.stripe_lock(deque_id)):
            batches.set_state(batch.batch_id, SEALED)
            batches.set_attempts(batch.batch_id, info.attempts + 1)
            batches.publish(
                batch.batch_id, info.write_pos, info.record_count, info.max_timestamp, now_ms
            )
            ids = deques.batch_ids(deque_id)
            sealed = [b for b in ids if batches.state(b) == SEALED]
            # (a batch with no sequence yet, a recovered one, goes after: recovery.py)
            before = [b for b in sealed if 0 <= batches.read(b).base_sequence < info.base_sequence]
            if before:
                deques.replace(
                    deque_id, [*before, batch.batch_id, *[b for b in ids if b not in before]]
                )
            else:
                deques.push_first(deque_id, batch.batch_id)

    def finalize(
        self, batch: DrainedBatch, meta: BatchMeta | None = None, map_blocks: BlockMap = map,
        compressed: BatchParts | None = None,
    ) -> BatchParts:  # fmt: skip
        """Fill the batch header (and CRC) in place, or compress (its blocks by
        ``map_blocks``, or take ``compressed``, its ``records`` compressed already): the
        batch's parts, to be written in order."""
        meta = meta or BatchMeta()
        info = self.pool.batches.read(batch.batch_id)
        if meta.producer_id >= 0:
            self.pool.batches.set_producer_state(
                batch.batch_id, meta.producer_id, meta.producer_epoch, meta.base_sequence
            )
        return finalize_batch(
            self.pool.batches.data(info), info.write_pos,
            record_count=info.record_count, last_offset_delta=info.record_count - 1,
            base_timestamp=info.base_timestamp, max_timestamp=info.max_timestamp, meta=meta,
            map_blocks=map_blocks, compressed=compressed,
        )  # fmt: skip

    def records(self, batch: DrainedBatch) -> memoryview:
        """The batch's records as written, after its header (read only: the Sender's
        threads compress them)."""
        info = self.pool.batches.read(batch.batch_id)
        return memoryview(self.pool.batches.data(info))[HEADER_SIZE : info.write_pos]

    def post_completion(self, batch: DrainedBatch, completion: Completion) -> list[int]:
        """Post one result to every process that appended to the batch, then wake them
        (at once, or when ``defer_wakes(False)`` ends a run of posts). Returns the slots
        whose ring was full (the Sender retries them later)."""
        entry = ring_entry(completion)
        if self._drain_fast is not None:  # (the Sender's: in C, as it drains)
            posted, full = self._drain_fast.post_result(batch.info.appenders_raw, entry)
        else:
            posted, full = self.pool.rings.post_to(batch.info.appenders_raw, entry)
        if self._deferred is not None:
            self._deferred.update(posted)
        else:
            self.wakes.wake(Counter(posted))
        return full

    def defer_wakes(self, defer: bool) -> None:
        """While deferred, processes are woken once each when deferral ends (or their wakes
        held: result_wakes.py), and completed batches give their slabs back then, in one
        hold of the pool lock (a Sender killed before leaves slabs no descriptor owns: the
        next one reclaims them)."""
        if defer:
            self._deferred = self._deferred or Counter()
            self._unfreed = self._unfreed if self._unfreed is not None else []
            return
        pending, self._deferred = self._deferred, None
        runs, self._unfreed = self._unfreed, None
        if runs:
            self.pool.buffers.deallocate_many(runs)
        self.wakes.wake(pending or {})

    def finished(self, posted: list[int], runs: list[tuple[int, int]]) -> None:
        """Batches finished already (finishing.py): slots woken, runs freed (or deferred)."""
        if self._deferred is not None and self._unfreed is not None:
            self._deferred.update(posted)
            self._unfreed += [SlabRun(*run) for run in runs]
            return
        if runs:
            self.pool.buffers.deallocate_many([SlabRun(*run) for run in runs])
        self.wakes.wake(Counter(posted))

    def complete(self, batch: DrainedBatch) -> None:
        """The batch is done: free its descriptor and return its slabs."""
        info = batch.info
        self.pool.batches.set_state(info.batch_id, FREE)
        if self.pool.batches.run_in_bounds(info):  # a corrupt descriptor frees no other run
            run = SlabRun(info.first_slab, info.slab_count)
            if self._unfreed is not None:
                self._unfreed.append(run)
            else:
                self.pool.buffers.deallocate(run)

    # ------------------------------------------------------------------ the Sender's repairs

    def seal_queued(self, deque_id: int) -> list[BatchInfo]:
        """A damaged deque emptied (the caller holds its stripe lock): the batches that name
        it (OPEN or SEALED, found by their descriptors) sealed, so that nothing appends to
        them, and returned for the Sender to fail."""
        self._deques.reset(deque_id)
        batches = self.pool.batches
        sealed = []
        for batch_id in range(self.pool.config.num_slabs):
            info = batches.read(batch_id)
            if info.deque_id == deque_id and info.state in (OPEN, SEALED):
                batches.set_state(batch_id, SEALED)
                sealed.append(info)
        return sealed

    def open_split(self, info: BatchInfo, records: Sequence[bytes], timestamps: Sequence[int],
                   parent: tuple[int, int, int], now_ms: int) -> BatchInfo:  # fmt: skip
        """A SEALED batch of some of ``info``'s records (framed, with ``timestamps``), on
        new slabs of its deque, naming ``parent`` (batch id, generation, offset delta of its
        first record): a split half. Raises BufferExhaustedError if no memory is free now."""
        size = HEADER_SIZE + sum(len(record) for record in records)
        run = self.pool.buffers.allocate(size, 0)
        batches = self.pool.batches
        batches.open(run.first, info.deque_id, run.count, HEADER_SIZE, timestamps[0],
                     info.created_ms)  # fmt: skip
        start = self._layout.slab_at(run.first) + HEADER_SIZE
        self._buf[start : start + size - HEADER_SIZE] = b"".join(records)
        batches.publish(run.first, size, len(records), max(timestamps), now_ms)
        batches.set_appenders(run.first, info.appenders)
        batches.set_parent(run.first, *parent)
        batches.set_attempts(run.first, info.attempts + 1)
        batches.set_state(run.first, SEALED)
        self.pool.buffers.commit(run)
        return batches.read(run.first)

    @staticmethod
    def completion_for(
        batch: DrainedBatch,
        base_offset: int,
        error_code: int = 0,
        log_append_time: int = -1,
        log_start_offset: int = -1,
        view: SenderView | None = None,
    ) -> Completion:
        """The result to post for a batch (with the Sender's ``view`` of it, when it was
        sent); a batch split from a larger one completes its parent's records in its delta
        range."""
        info = batch.info
        if info.parent_batch == NO_PARENT:
            return Completion(
                info.batch_id, info.generation, base_offset, log_append_time, log_start_offset,
                error_code, view=view,
            )  # fmt: skip
        return Completion(
            info.parent_batch, info.parent_generation, base_offset, log_append_time,
            log_start_offset, error_code, info.parent_delta,
            info.parent_delta + info.record_count - 1, view,
        )  # fmt: skip
