"""Recovery of a durable pool after its host went down: read what the disk kept, build a
new pool of it, and let the Sender deliver it, exactly once.

The old file (``<name>.recovering``, segment.py's ``open_in_directory``) is read, never
trusted: its header and config must check (the config's SHA-256), and of everything else
only commit records whose CRC32C holds count (durability.py). The new pool, made by the
caller at the pool's name, gets:
- no producer id: the Sender takes a new one (InitProducerId) for everything not yet sent;
- every batch whose newest valid commit record is live and whose records' CRC32C matches
  the one the record carries. A batch whose records do not match was torn by the cut (its
  last commit never finished, so no send waited on it): it is dropped and counted, and
  logged with its partition and record count. A split half whose parent is still live is
  dropped (the parent goes whole);
- each batch in its partition's deque: first those the broker may have seen (a sequence was
  committed), IN_FLIGHT with that sequence and the producer id and epoch they were sent
  under, so the Sender's start (``Idempotence.resume``) sends them again in sequence order
  under that old producer and the broker drops what it had already written; then the
  others, in the order they were opened, which take the new producer's sequences from 0.
  (The old producer's sequences of a partition can never be reused: a partition whose
  batches were all delivered before the cut leaves no record of where they ended.)
- If the broker forgot the old producer (``producer.id.expiration.ms``, 1 day by default),
  a resent batch is answered UNKNOWN_PRODUCER_ID or OUT_OF_ORDER_SEQUENCE_NUMBER: the Sender
  takes a new producer id and sends it again, so a batch whose acknowledgement the cut lost
  may then be written twice (at least once, never lost);
- RECOVERED set in each descriptor: their results, which no process waits for, are counted
  (delivered, failed) in the header's recovery stats and logged by the Sender.
- Nothing of a transactional pool: a cut ends the app's open transaction, which is
  aborted (its records dropped and logged, as for a dead app); the Sender's InitProducerId
  with the transactional id fences the old epoch, and the coordinator aborts what it had.
A pool whose file kept no valid commit (a ``memory`` pool, or one made just before the
cut) recovers nothing; what it held is counted as lost when its descriptors say so.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol

from shmkafka.pool.batches import Batches, Deques
from shmkafka.pool.bufferpool import BufferPool
from shmkafka.pool.durability import (
    CommitRecord,
    DequeRecord,
    latest,
    read_commit,
    read_drec,
)
from shmkafka.protocol.records import HEADER_SIZE, crc32c
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.directory import Directory
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import (
    B_GENERATION,
    B_RECORD_COUNT,
    B_STATE,
    COMMIT_LIVE,
    CONFIG_SIZE,
    DIRECTORY_LOCK,
    FREE,
    H_RECOVERY_STATS,
    HEADER_FIXED,
    IN_FLIGHT,
    LAYOUT_VERSION,
    MAGIC,
    NO_PARENT,
    RECOVERY_STATS,
    SEALED,
    U32,
    Layout,
)
from shmkafka.shm.layout import (
    HEADER_SIZE as POOL_HEADER_SIZE,
)
from shmkafka.shm.locks import LockSet
from shmkafka.shm.segment import Segment


class NewPool(Protocol):
    """What recovery uses of the new pool (shared_pool.py's SharedPool, which calls this
    module while it opens a pool: the import goes that way only)."""

    name: str
    segment: Segment
    layout: Layout
    locks: LockSet
    directory: Directory
    batches: Batches
    deques: Deques
    buffers: BufferPool


log = logging.getLogger("shmkafka.recovery")

# RECOVERY_STATS fields (layout.py's header, offset 448)
RECOVERED_BATCHES, RECOVERED_RECORDS, TORN_BATCHES, TORN_RECORDS = 0, 1, 2, 3
DELIVERED_RECORDS, FAILED_RECORDS, UNCOMMITTED_RECORDS, RECOVERIES = 4, 5, 6, 7
STAT_NAMES = (
    "recovered_batches", "recovered_records", "torn_batches", "torn_records",
    "delivered_records", "failed_records", "uncommitted_records", "recoveries",
)  # fmt: skip


@dataclass
class Found:
    """What the old file held."""

    config: PoolConfig | None = None
    batches: list[tuple[CommitRecord, str, int, bytes]] = field(default_factory=list)
    torn: list[tuple[str, int, int]] = field(default_factory=list)  # topic, partition, records
    # records the disk's descriptors show beyond what any commit covered: lost (flush's last
    # window). A lower bound: a descriptor's own page may not have reached the disk either.
    uncommitted: int = 0
    aborted: int = 0  # records of a transactional pool's open transaction


@dataclass(frozen=True)
class Report:
    recovered_batches: int
    recovered_records: int
    torn_batches: int
    torn_records: int

    def line(self) -> str:
        return (
            f"recovered {self.recovered_records} records in {self.recovered_batches} batches; "
            f"dropped {self.torn_records} records in {self.torn_batches} torn batches"
        )


def read_old(path: str) -> Found:
    """Everything of the old file that checks, or an empty Found if its header does not."""
    found = Found()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < POOL_HEADER_SIZE + CONFIG_SIZE:
            return found
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
            config = _config_of(memoryview(m), size)
            if config is None or not config.durable:
                return found
            found.config = config
            _read_records(memoryview(m), Layout.for_config(config), found)
    if found.config is not None and json.loads(found.config.sender_settings or "{}").get(
        "transactional_id"
    ):  # (the cut ended the app's open transaction: aborted, as for a dead app)
        found.aborted = sum(record.record_count for record, _, _, _ in found.batches)
        found.batches = []
    return found


def _config_of(buf: memoryview, size: int) -> PoolConfig | None:
    magic, version, config_len, seg_size, fingerprint, _ = HEADER_FIXED.unpack_from(buf, 0)
    if magic != MAGIC or version != LAYOUT_VERSION or seg_size != size or config_len > CONFIG_SIZE:
        return None
    try:
        config = PoolConfig.from_json(bytes(buf[POOL_HEADER_SIZE : POOL_HEADER_SIZE + config_len]))
    except ValueError:
        return None
    return config if config.fingerprint() == fingerprint else None


def _read_records(buf: memoryview, layout: Layout, found: Found) -> None:
    records: dict[int, CommitRecord] = {}
    for batch_id in range(layout.config.num_slabs):
        copies = [read_commit(buf, layout.commit_at(batch_id, c), c) for c in (0, 1)]
        record, torn = _chosen(buf, layout, batch_id, copies)
        found.uncommitted += _uncommitted(buf, layout, batch_id, latest(copies))
        if record is not None:
            records[batch_id] = record
        elif torn is not None:
            owner = _drec(buf, layout, torn.deque_id)
            topic, partition = (owner.topic, owner.partition) if owner else ("?", -1)
            found.torn.append((topic, partition, torn.record_count))
    deques: dict[int, DequeRecord | None] = {}
    superseded = _superseded(records)
    for batch_id, record in sorted(records.items()):
        if batch_id in superseded:
            continue
        if record.deque_id not in deques:
            deques[record.deque_id] = _drec(buf, layout, record.deque_id)
        owner = deques[record.deque_id]
        if owner is None:  # (its deque's record was torn: its commit never finished)
            found.torn.append(("?", -1, record.record_count))
            continue
        start = layout.slab_at(batch_id)
        data = bytes(buf[start + HEADER_SIZE : start + record.write_pos])
        found.batches.append((record, owner.topic, owner.partition, data))


def _uncommitted(
    buf: memoryview, layout: Layout, batch_id: int, newest: CommitRecord | None
) -> int:
    """The records batch ``batch_id``'s descriptor on the disk holds beyond its newest commit
    record (all of them if that record is of an older generation, or is DONE)."""
    at = layout.batch_at(batch_id)
    state, generation = (U32.unpack_from(buf, at + f)[0] for f in (B_STATE, B_GENERATION))
    count = U32.unpack_from(buf, at + B_RECORD_COUNT)[0]
    if state == FREE or state > IN_FLIGHT:
        return 0
    if newest is None or newest.generation != generation:
        return int(count)
    if newest.state != COMMIT_LIVE:
        return 0
    return max(0, int(count) - newest.record_count)


def _chosen(
    buf: memoryview, layout: Layout, batch_id: int, copies: list[CommitRecord | None]
) -> tuple[CommitRecord | None, CommitRecord | None]:
    """(the record to recover the batch by, or None; the newest torn one, or None). The
    newest valid copy first; a live one whose records do not check (its commit never
    finished: the record reached the disk, not all the records' pages) gives way to the
    older copy, whose commit did finish (durability.pml found it). A DONE copy ends it."""
    torn = None
    for record in sorted((c for c in copies if c is not None), key=lambda c: -c.number):
        if record.state != COMMIT_LIVE or not record.record_count:
            break  # (DONE, or a batch opened with no record yet: nothing to recover)
        start = layout.slab_at(batch_id)
        if (
            record.slab_count * layout.config.slab_size >= record.write_pos
            and crc32c()(buf[start + HEADER_SIZE : start + record.write_pos]) == record.data_crc
        ):
            return record, None
        torn = torn or record
    return None, torn


def _superseded(records: dict[int, CommitRecord]) -> set[int]:
    """Split halves recovery drops: those of a parent still live, and those inside the
    range of another live half of the same parent (a half split again: its halves were
    committed before it went DONE, so while it is live it goes whole)."""
    by_root: dict[tuple[int, int], list[tuple[int, CommitRecord]]] = defaultdict(list)
    for batch_id, record in records.items():
        if record.parent != NO_PARENT:
            by_root[(record.parent, record.parent_generation)].append((batch_id, record))
    out: set[int] = set()
    for (root, generation), halves in by_root.items():
        parent = records.get(root)
        if parent is not None and parent.generation == generation and parent.parent == NO_PARENT:
            out.update(batch_id for batch_id, _ in halves)
            continue
        for batch_id, half in halves:
            low, high = half.parent_delta, half.parent_delta + half.record_count
            if any(
                other is not half
                and other.parent_delta <= low
                and high <= other.parent_delta + other.record_count
                and other.record_count > half.record_count
                for _, other in halves
            ):
                out.add(batch_id)
    return out


def _drec(buf: memoryview, layout: Layout, deque_id: int) -> DequeRecord | None:
    if layout.drec_at(deque_id, 1) + 272 > len(buf):
        return None
    records = [read_drec(buf, layout.drec_at(deque_id, c), c) for c in (0, 1)]
    valid = [r for r in records if r is not None]
    return max(valid, key=lambda r: r.number) if valid else None


def rebuild(pool: NewPool, found: Found, now_ms: int) -> Report:
    """Put ``found`` into the new, empty ``pool``, then count and log it."""
    by_partition: dict[tuple[str, int], list[tuple[CommitRecord, bytes]]] = defaultdict(list)
    for record, topic, partition, data in found.batches:
        by_partition[(topic, partition)].append((record, data))
    counts: dict[str, int] = defaultdict(int)
    for topic, partition in by_partition:
        counts[topic] = max(counts[topic], partition + 1)
    with pool.locks.held(DIRECTORY_LOCK):
        pool.directory.publish({t: [PartitionLeader()] * n for t, n in counts.items()})
    snapshot = pool.directory.snapshot()
    records = 0
    for (topic, partition), batches in sorted(by_partition.items()):
        deque_id = snapshot.topics[topic][partition].deque_id
        sequenced = sorted((b for b in batches if b[0].base_sequence >= 0),
                           key=lambda b: b[0].base_sequence)  # fmt: skip
        fresh = sorted((b for b in batches if b[0].base_sequence < 0),
                       key=lambda b: (b[0].created_ms, b[0].number))  # fmt: skip
        for record, data in sequenced:
            _put(pool, deque_id, record, data, now_ms, in_flight=True)
        for record, data in fresh:
            _put(pool, deque_id, record, data, now_ms, in_flight=False)
        records += sum(r.record_count for r, _ in batches)
    if found.aborted:
        log.warning("dropped %d records of the transaction the cut left open: aborted",
                    found.aborted)  # fmt: skip
    if found.uncommitted:
        log.warning("lost at least %d records appended after the last commit (pool_durability"
                    "=%s: its window)", found.uncommitted,
                    found.config.pool_durability if found.config else "?")  # fmt: skip
    for topic, partition, count in found.torn:
        log.warning("dropped a torn batch of %d records to %s-%d (its commit never finished)",
                    count, topic, partition)  # fmt: skip
    report = Report(len(found.batches), records, len(found.torn),
                    sum(c for _, _, c in found.torn))  # fmt: skip
    stats = list(RECOVERY_STATS.unpack_from(pool.segment.buf, H_RECOVERY_STATS))
    stats[RECOVERED_BATCHES] += report.recovered_batches
    stats[RECOVERED_RECORDS] += report.recovered_records
    stats[TORN_BATCHES] += report.torn_batches
    stats[TORN_RECORDS] += report.torn_records
    stats[UNCOMMITTED_RECORDS] += found.uncommitted
    stats[RECOVERIES] += 1
    for index, value in enumerate(stats):
        pool.segment.store_u64(H_RECOVERY_STATS + 8 * index, value)
    log.warning("pool %s recovered after its host went down: %s", pool.name, report.line())
    return report


def max_timestamp(records: bytes, base_ts: int) -> int:
    """The largest timestamp of a batch's records (v2 framing: length, attributes,
    timestamp delta, each a zigzag varint but the attributes byte)."""
    at, best = 0, base_ts
    while at < len(records):
        length, at = _varint(records, at)
        end = at + length
        delta, _ = _varint(records, at + 1)
        best = max(best, base_ts + delta)
        at = end
    return best


def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at
        shift += 7


def _put(
    pool: NewPool, deque_id: int, record: CommitRecord, data: bytes, now_ms: int,
    in_flight: bool,
) -> None:  # fmt: skip
    size = HEADER_SIZE + len(data)
    run = pool.buffers.allocate(size, 0)
    batches = pool.batches
    batches.open(run.first, deque_id, run.count, HEADER_SIZE, record.base_timestamp, now_ms)
    start = pool.layout.slab_at(run.first) + HEADER_SIZE
    pool.segment.buf[start : start + len(data)] = data
    max_ts = max_timestamp(data, record.base_timestamp)
    batches.publish(run.first, size, record.record_count, max_ts, now_ms)
    batches.set_recovered(run.first)
    if in_flight:
        batches.set_producer_state(run.first, record.producer_id, record.epoch,
                                   record.base_sequence)  # fmt: skip
        batches.set_attempts(run.first, 1)
        batches.set_state(run.first, IN_FLIGHT)  # (Idempotence.resume queues it again)
        pool.buffers.commit(run)
        return
    batches.set_state(run.first, SEALED)
    pool.buffers.commit(run)
    with pool.locks.held(pool.layout.stripe_lock(deque_id)):
        pool.deques.push_last(deque_id, run.first)
