"""One replica's log of one partition, in memory: batches as the producer sent them (only
their base offset and partition leader epoch rewritten), plus the leader-epoch cache and the
idempotent producers' state.

Rules:
- Offsets are assigned by the leader at append; a follower copies the leader's bytes as they
  are, so every replica holds identical batches at identical offsets.
- ``leo`` (log end offset) is one past the last record; ``hw`` (high watermark) is this
  replica's view of what every in-sync replica has. Consumers read below ``hw`` only.
- The epoch cache maps each leader epoch to the first offset written in it. Truncation by
  leader epoch (KIP-101) asks the leader for the end offset of our latest epoch and cuts
  only where the logs diverge, never at the (possibly stale) high watermark.
"""

from __future__ import annotations

import bisect
import struct
from collections import deque
from dataclasses import dataclass, field

import crc32c

from shmkafka.broker_stub.storage import DiskLog
from shmkafka.protocol.clock import wall_ms
from shmkafka.protocol.records import (
    _ATTRIBUTES_AT,
    _CRC_AT,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    decode_batch_header,
)

_OFFSET_AND_EPOCH = struct.Struct(">q")  # base offset at 0
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP_AT = 35
_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
_EPOCH_AT = 12
_EPOCH = struct.Struct(">i")
PRODUCER_BATCHES_KEPT = 5  # as Kafka's ProducerStateEntry: the last five batches per producer
ProducerFacts = tuple[int, int, int, int]  # producer id, epoch, first and last sequence


@dataclass
class StoredBatch:
    base_offset: int
    last_offset: int
    leader_epoch: int
    max_timestamp: int
    data: bytes


@dataclass
class ProducerEntry:
    epoch: int
    # (first sequence, last sequence, base offset) of the last batches, oldest first
    batches: deque[tuple[int, int, int]] = field(default_factory=deque)

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


class PartitionLog:
    """``disk``: a DiskLog the batches are also written to (durable mode, storage.py);
    reads are then served from its segments, and its contents are loaded at creation."""

    def __init__(self, disk: DiskLog | None = None) -> None:
        self.batches: list[StoredBatch] = []
        self._bases: list[int] = []
        self.log_start = 0
        self.leo = 0
        self._hw = 0
        self.epochs: list[tuple[int, int]] = []  # (leader epoch, start offset), ascending
        self.producers: dict[int, ProducerEntry] = {}
        self.disk = disk
        if disk is not None:
            self._load(disk)

    @property
    def hw(self) -> int:
        return self._hw

    @hw.setter
    def hw(self, value: int) -> None:
        self._hw = value
        if self.disk is not None:
            self.disk.hw = value

    def _load(self, disk: DiskLog) -> None:
        """Rebuild offsets, the epoch cache and producer state from the recovered log."""
        self.log_start = self.leo = disk.log_start
        data = disk.read(disk.log_start, 1 << 62, 1 << 62)
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            header = decode_batch_header(view, pos)
            batch = StoredBatch(header.base_offset, header.base_offset + header.last_offset_delta,
                                header.partition_leader_epoch, header.max_timestamp,
                                bytes(view[pos : pos + header.size]))  # fmt: skip
            self._append(batch)
            if header.producer_id >= 0:
                self._record_producer(header, batch.base_offset)
            pos += header.size
        self.hw = min(disk.checkpointed_hw(), self.leo)

    # ------------------------------------------------------------------ writes

    def append_as_leader(
        self, data: bytes, header: BatchHeader, leader_epoch: int, log_append_ms: int | None
    ) -> StoredBatch:
        """Assign offsets to a validated batch and append it."""
        raw = bytearray(data)
        _OFFSET_AND_EPOCH.pack_into(raw, 0, self.leo)
        _EPOCH.pack_into(raw, _EPOCH_AT, leader_epoch)
        max_ts = header.max_timestamp
        if log_append_ms is not None:
            set_log_append_time(raw, log_append_ms)
            max_ts = log_append_ms
        batch = StoredBatch(
            self.leo, self.leo + header.last_offset_delta, leader_epoch, max_ts, bytes(raw)
        )
        self._append(batch)
        self._write(batch)
        if header.producer_id >= 0:
            self._record_producer(header, batch.base_offset)
        return batch

    def append_replica(self, batch: StoredBatch, producer: ProducerFacts | None) -> None:
        """A follower copies one of the leader's batches (same offsets, same bytes)."""
        self._append(batch)
        self._write(batch)
        if producer is not None:
            pid, epoch, first_seq, last_seq = producer
            self._note_producer_batch(pid, epoch, first_seq, last_seq, batch.base_offset)

    def _append(self, batch: StoredBatch) -> None:
        if not self.epochs or self.epochs[-1][0] < batch.leader_epoch:
            self.epochs.append((batch.leader_epoch, batch.base_offset))
        self.batches.append(batch)
        self._bases.append(batch.base_offset)
        self.leo = batch.last_offset + 1

    def _write(self, batch: StoredBatch) -> None:
        if self.disk is not None:
            self.disk.append(batch.data, batch.base_offset, batch.last_offset,
                             batch.max_timestamp, wall_ms())  # fmt: skip

    def _record_producer(self, header: BatchHeader, base_offset: int) -> None:
        last_seq = header.base_sequence + header.last_offset_delta
        self._note_producer_batch(header.producer_id, header.producer_epoch,
                                  header.base_sequence, last_seq, base_offset)  # fmt: skip

    def _note_producer_batch(self, pid: int, epoch: int, first_seq: int, last_seq: int,
                             base_offset: int) -> None:  # fmt: skip
        """Keep a producer's last batches, for the duplicate check; a new epoch starts
        afresh, on the leader and on every follower alike (a follower that kept the old
        epoch's batches answered, once leader, a new epoch's batch as a duplicate of an old
        one with the same sequences: found by the soak)."""
        entry = self.producers.get(pid)
        if entry is None or entry.epoch != epoch:
            entry = self.producers[pid] = ProducerEntry(epoch)
        entry.batches.append((first_seq, last_seq, base_offset))
        while len(entry.batches) > PRODUCER_BATCHES_KEPT:
            entry.batches.popleft()

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset`` (whole batches: offset is a boundary or
        inside the last kept batch's successor)."""
        keep = bisect.bisect_left(self._bases, offset)
        if self.disk is not None:
            self.disk.truncate_to(offset)
        del self.batches[keep:]
        del self._bases[keep:]
        self.leo = self.batches[-1].last_offset + 1 if self.batches else self.log_start
        self.hw = min(self.hw, self.leo)
        self.epochs = [(e, start) for e, start in self.epochs if start < self.leo]
        for entry in self.producers.values():
            while entry.batches and entry.batches[-1][2] >= self.leo:
                entry.batches.pop()

    # ------------------------------------------------------------------ reads

    def read(self, offset: int, max_bytes: int, upto: int) -> bytes:
        """Whole batches holding offsets in [offset, upto), at least one, about max_bytes."""
        if offset >= upto:
            return b""
        if self.disk is not None:  # the segments, through their sparse indexes
            return self.disk.read(offset, max_bytes, upto)
        at = max(0, bisect.bisect_right(self._bases, offset) - 1)
        out: list[bytes] = []
        size = 0
        for batch in self.batches[at:]:
            if batch.base_offset >= upto:
                break
            if batch.last_offset < offset:
                continue
            if out and size + len(batch.data) > max_bytes:
                break
            out.append(batch.data)
            size += len(batch.data)
        return b"".join(out)

    def apply_retention(self, now_ms: int) -> None:
        """Durable mode: whole old segments go; the log start moves to the next segment."""
        if self.disk is None:
            return
        start = self.disk.apply_retention(now_ms)
        if start > self.log_start:
            drop = bisect.bisect_left(self._bases, start)
            del self.batches[:drop]
            del self._bases[:drop]
            self.log_start = start

    def batches_from(self, offset: int) -> list[StoredBatch]:
        at = bisect.bisect_left(self._bases, offset)
        return self.batches[at:]

    def latest_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else -1

    def end_offset_for_epoch(self, epoch: int) -> int:
        """The first offset of the first epoch after ``epoch`` (KIP-101's OffsetForLeaderEpoch);
        ``leo`` when ``epoch`` is the latest."""
        for e, start in self.epochs:
            if e > epoch:
                return start
        return self.leo

    def offset_for_timestamp(self, timestamp: int) -> int:
        """The first offset whose batch has max timestamp >= ``timestamp`` (or ``leo``)."""
        for batch in self.batches:
            if batch.max_timestamp >= timestamp:
                return batch.base_offset
        return self.leo


def set_log_append_time(raw: bytearray, timestamp_ms: int) -> None:
    """Mark a batch LogAppendTime with ``timestamp_ms`` as its max timestamp; re-sign it."""
    attributes = _ATTRIBUTES.unpack_from(raw, _ATTRIBUTES_AT)[0] | TIMESTAMP_TYPE_BIT
    _ATTRIBUTES.pack_into(raw, _ATTRIBUTES_AT, attributes)
    _TIMESTAMP.pack_into(raw, _MAX_TIMESTAMP_AT, timestamp_ms)
    _CRC.pack_into(raw, _CRC_AT, crc32c.crc32c(memoryview(raw)[_ATTRIBUTES_AT:]))
