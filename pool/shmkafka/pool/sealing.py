"""The Sender's sealing of one node's drained batches into a produce request's body, in one
call a round.

``seal_request`` is the Python twin and the reference of ``FastAppend.seal_request``
(``_append_seal.c``); ``Sealer`` calls the C one where it serves: the extension built, the
codec none or lz4 (with lz4's library found by ``_append.load_lz4``), and no batch
compressed ahead by the Sender's compression threads.

Rules:
- Per batch, in this order: its producer id, epoch and base sequence to its descriptor
  (shared memory first: a Sender killed after this resends the batch with them); its
  RecordBatch header and CRC-32C, in place before its records or before its records
  compressed (``records.finalize_batch``); its state IN_FLIGHT.
- The body is framed as ``produce._encode_request`` frames it: the caller's ``head``
  (transactional id, acks, timeout, topic count), each topic's ``prefix`` (name, partition
  count), then per partition its index, its records' size and its records; the flexible
  versions' empty tag sections after each partition, topic and the body.
- A row is ``(batch id, partition, producer id, producer epoch, base sequence,
  attributes)``; the caller (the Sender) has checked the batch's descriptor
  (``BatchTable.problem``) and decided its producer and sequence (idempotence.py).
- A descriptor that no longer holds a batch (changed since the check) raises ValueError.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Sequence

from shmkafka.pool.accumulator import DrainedBatch
from shmkafka.pool.fastpath import FastAppend
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol import compression
from shmkafka.protocol.compression import BlockMap, CompressionType
from shmkafka.protocol.primitives import Buffer, Writer, encode_uvarint
from shmkafka.protocol.records import HEADER_SIZE, BatchMeta, BatchParts, crc32c, finalize_batch
from shmkafka.shm.layout import IN_FLIGHT

log = logging.getLogger("shmkafka.sender")

Row = tuple[int, int, int, int, int, int]
# (a row of a batch whose records the compression threads compressed ahead: and its parts)
Compressed = tuple[int, int, int, int, int, int, BatchParts]
Topic = tuple[bytes, list[Row | Compressed]]
_I32 = 1 << 31


def row(batch: DrainedBatch, meta: BatchMeta, parts: BatchParts | None = None) -> Row | Compressed:
    """A drained batch as it is sealed, with what the Sender decided of it (and its
    records' ``parts``, when the compression threads compressed them ahead)."""
    fields = (batch.batch_id, batch.partition, meta.producer_id, meta.producer_epoch,
              meta.base_sequence, meta.attributes)  # fmt: skip
    return fields if parts is None else (*fields, parts)


def seal_request(
    pool: SharedPool, flexible: bool, head: bytes, topics: Sequence[Topic], codec: int,
    level: int | None, map_blocks: BlockMap = map,
) -> tuple[list[Buffer], list[int]]:  # fmt: skip
    """The body's pieces, to be written in order, and each batch's sealed size (the twin
    of ``FastAppend.seal_request``; ``map_blocks`` compresses a row's records that come
    without their parts, as ``map`` does)."""
    w = Writer(by_reference=True)
    w.buf += head
    sizes: list[int] = []
    for prefix, rows in topics:
        w.buf += prefix
        for row in rows:
            parts = _seal(pool, row, CompressionType(codec), level, map_blocks)
            size = sum(len(part) for part in parts)
            sizes.append(size)
            w.buf += row[1].to_bytes(4, "big", signed=True)
            w.buf += encode_uvarint(size + 1) if flexible else size.to_bytes(4, "big")
            for part in parts:
                w.blob(part)
            if flexible:
                w.buf.append(0)
        if flexible:
            w.buf.append(0)
    if flexible:
        w.buf.append(0)
    return w.take_pieces(), sizes


def _seal(
    pool: SharedPool, row: Row | Compressed, codec: CompressionType, level: int | None,
    map_blocks: BlockMap,
) -> BatchParts:  # fmt: skip
    batch_id, _, producer_id, epoch, sequence, attributes = row[:6]
    compressed = row[6] if len(row) == 7 else None
    batches = pool.batches
    info = batches.read(batch_id)
    capacity = batches.capacity(info.slab_count)
    if (
        info.first_slab + info.slab_count > pool.config.num_slabs
        or not HEADER_SIZE < info.write_pos <= min(capacity, _I32 - 1)
        or not 1 <= info.record_count <= info.write_pos - HEADER_SIZE
    ):
        raise ValueError(f"batch {batch_id}: its descriptor does not hold a batch")
    batches.set_producer_state(batch_id, producer_id, epoch, sequence)
    meta = BatchMeta(
        compression=codec, compression_level=level, attributes=attributes,
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
    )  # fmt: skip
    parts = finalize_batch(
        batches.data(info), info.write_pos, record_count=info.record_count,
        last_offset_delta=info.record_count - 1, base_timestamp=info.base_timestamp,
        max_timestamp=info.max_timestamp, meta=meta, map_blocks=map_blocks,
        compressed=compressed,
    )  # fmt: skip
    batches.set_state(batch_id, IN_FLIGHT)
    return parts


@functools.cache
def lz4_loaded() -> bool:
    """Whether the C sealing found the lz4 package's library (its LZ4F functions)."""
    if FastAppend is None:
        return False
    from shmkafka.pool import _append

    path = getattr(importlib.import_module("lz4.frame._frame"), "__file__", None)
    return path is not None and _append.load_lz4(path)


def lz4_in_c(fast: FastAppend, level: int) -> bool:
    """Whether ``fast`` makes lz4 frames at ``level`` the same bytes as compression.py's
    (a sample of two blocks and a half, of runs and noise, compared once)."""
    if not lz4_loaded():
        return False
    sample = bytes(range(256)) * 300 + bytes((i * 7919) & 0xFF for i in range(90_000))
    same = fast.lz4_frame(sample, level) == compression.compress(CompressionType.LZ4, sample, level)
    if not same:
        log.warning("lz4's library makes other frames than lz4.frame: compressing in Python")
    return same


class Sealer:
    """The C sealing where it serves, else its twin: C compresses lz4 itself (when
    ``lz4_in_c``), and seals any codec's batches the compression threads compressed ahead."""

    def __init__(
        self, pool: SharedPool, fast: FastAppend | None, codec: int, level: int | None
    ) -> None:
        self.pool = pool
        self.codec = codec
        self.fast = fast
        self.compresses = codec == CompressionType.NONE or (
            codec == CompressionType.LZ4 and fast is not None and lz4_in_c(fast, level or 0)
        )

    def seal(
        self, flexible: bool, head: bytes, topics: Sequence[Topic], level: int | None,
        map_blocks: BlockMap,
    ) -> tuple[list[Buffer], list[int]]:  # fmt: skip
        if self.fast is not None and (
            self.compresses or all(len(row) == 7 for _, rows in topics for row in rows)
        ):
            return self.fast.seal_request(
                flexible, head, list(topics), self.codec, level or 0, crc32c()
            )
        return seal_request(self.pool, flexible, head, topics, self.codec, level, map_blocks)
