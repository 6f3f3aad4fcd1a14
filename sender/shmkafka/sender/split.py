"""Splitting a batch the broker refused as too large (MESSAGE_TOO_LARGE, KIP-126).

Rules:
- Only the Sender splits, and only drained batches: the halves are new batches on new slabs,
  queued first in the original's deque, and the original's memory is freed.
- A half remembers its parent (batch id, generation, offset delta of its first record), so
  its completion resolves exactly the parent's records it holds (see ``completion_for``).
"""

from __future__ import annotations

from collections.abc import Sequence

from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.batches import BatchInfo
from shmkafka.protocol.records import HEADER_SIZE, Record, decode_batch, encode_record
from shmkafka.shm.layout import NO_PARENT, SEALED


def split_batch(acc: RecordAccumulator, batch: DrainedBatch, now_ms: int) -> list[DrainedBatch]:
    """Split a drained batch in two halves by record count, queued first in its deque in
    its place; the original's memory is freed. Each half completes its part of the
    original records (see ``completion_for``). Raises BufferExhaustedError if the
    halves find no memory at once."""
    info = acc.pool.batches.read(batch.batch_id)
    records = decode_batch(bytes(acc.finalize(batch))).records
    parent = (
        (info.parent_batch, info.parent_generation, info.parent_delta)
        if info.parent_batch != NO_PARENT
        else (info.batch_id, info.generation, 0)
    )
    middle = len(records) // 2
    halves: list[DrainedBatch] = []
    try:
        for part, first in ((records[:middle], 0), (records[middle:], middle)):
            halves.append(_copy_records(acc, batch, info, part, parent, first, now_ms))
    except BaseException:
        for half in halves:
            acc.complete(half)
        raise
    with acc.pool.locks.held(acc.pool.layout.stripe_lock(info.deque_id)):
        for half in reversed(halves):
            acc.pool.deques.push_first(info.deque_id, half.batch_id)
    acc.complete(batch)
    return halves


def _copy_records(
    acc: RecordAccumulator,
    batch: DrainedBatch,
    info: BatchInfo,
    records: Sequence[Record],
    parent: tuple[int, int, int],
    first: int,
    now_ms: int,
) -> DrainedBatch:
    encoded = [
        encode_record(i, r.timestamp - records[0].timestamp, r.key, r.value, r.headers)
        for i, r in enumerate(records)
    ]
    size = HEADER_SIZE + sum(len(e) for e in encoded)
    buffers = acc.pool.buffers
    run = buffers.allocate(size, 0)
    batches = acc.pool.batches
    base_ts = records[0].timestamp
    batches.open(run.first, info.deque_id, run.count, HEADER_SIZE, base_ts, info.created_ms)
    start = acc.pool.layout.slab_at(run.first) + HEADER_SIZE
    acc.pool.segment.buf[start : start + size - HEADER_SIZE] = b"".join(encoded)
    max_ts = max(r.timestamp for r in records)
    batches.publish(run.first, size, len(records), max_ts, now_ms)
    batches.set_appenders(run.first, info.appenders)
    batches.set_parent(run.first, parent[0], parent[1], parent[2] + first)
    batches.set_attempts(run.first, info.attempts + 1)
    batches.set_state(run.first, SEALED)
    buffers.commit(run)
    return DrainedBatch(batch.topic, batch.partition, batches.read(run.first))
