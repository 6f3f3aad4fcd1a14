"""Splitting a batch the broker refused as too large (MESSAGE_TOO_LARGE, KIP-126).

Rules:
- Only the Sender splits, and only drained batches: the halves are new batches on new slabs,
  queued first in the original's deque, and the original's memory is freed.
- A half remembers its parent (batch id, generation, offset delta of its first record), so
  its completion resolves exactly the parent's records it holds (see ``completion_for``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.batches import BatchInfo
from shmkafka.protocol.records import Record, decode_batch, encode_record
from shmkafka.shm.layout import NO_PARENT


def split_batch(
    acc: RecordAccumulator,
    batch: DrainedBatch,
    now_ms: int,
    free: Callable[[DrainedBatch], None] | None = None,
) -> list[DrainedBatch]:
    """Split a drained batch in two halves by record count, queued first in its deque in
    its place; the original's memory is freed (by ``free``, when given: a durable pool
    commits the halves before the original goes). Each half completes its part of the
    original records (see ``completion_for``). Raises BufferExhaustedError if the
    halves find no memory at once."""
    info = acc.pool.batches.read(batch.batch_id)
    records = decode_batch(b"".join(acc.finalize(batch))).records
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
    (free or acc.complete)(batch)
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
    base_ts = records[0].timestamp
    encoded = [
        encode_record(i, r.timestamp - base_ts, r.key, r.value, r.headers)
        for i, r in enumerate(records)
    ]
    timestamps = [r.timestamp for r in records]
    half = acc.open_split(info, encoded, timestamps, (parent[0], parent[1], parent[2] + first),
                          now_ms)  # fmt: skip
    return DrainedBatch(batch.topic, batch.partition, half)
