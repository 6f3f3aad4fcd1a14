"""Durable pools: commit records, group commit, and what each mode promises.

A pool with ``pool_dir`` lives in a file on a file system that persists, mapped by every
process. The memory map is the same as /dev/shm's; a durable pool (``flush``, ``sync``) adds
the COMMITS, IDEM and DEQUE RECORDS regions (layout.py). A power cut leaves on the disk some
pages written since the last sync and not others, so recovery (recovery.py) trusts nothing
but commit records, each checked by its CRC32C, and the records' bytes each commit record
covers, checked by the CRC32C it carries.

Rules:
- A commit is the only writer of commit records, under the kernel lock on COMMIT_BYTE: it
  takes number n = commits_started + 1 (stored first), writes a record of every batch that
  is not FREE and changed since its latest valid record (into the other of its two copies,
  so a commit cut short leaves the previous record whole), of the producer id and of every
  deque such a batch belongs to; then msyncs the whole file; then stores commits_done = n.
  Whatever an app appended before commit n started is durable once commits_done >= n.
- The scan reads descriptors without their stripe locks. A descriptor's fields are whole
  once its state is not FREE (batches.py's opening rule), the publish word is one 8-byte
  store, and the bytes up to a published write position are written; the state and
  generation are read again after the fields, and a batch that changed meanwhile is skipped
  (it was freed: a later commit sees it as it is then).
- Only the Sender writes a batch's sequence, producer id and epoch, and it does so holding
  the commit lock, then commits before the produce request leaves (``Sender._send_produce``):
  a sequence the broker may have seen is always durable, so recovery re-sends under it and
  the broker's idempotence drops what it already has.
- A batch goes DONE (a COMMIT_DONE record, synced) before its slabs are freed, so a reused
  slab never lets an old record look pending. A split commits its halves before its parent
  goes DONE; recovery drops the halves of a parent still live (the parent is re-sent whole).
- ``sync``: ``wait_durable`` returns once a commit that started after the caller's append
  has finished; the first waiter to take the lock commits for everyone waiting (group
  commit). ``flush``: the Sender's flusher commits every pool_flush_ms (``Flusher``).
- ``memory`` (the default, in /dev/shm or in a pool_dir): no commit records; nothing here runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import crc32c

from shmkafka.protocol.records import HEADER_SIZE
from shmkafka.shm.directory import Directory
from shmkafka.shm.layout import (
    B_BASE_SEQUENCE,
    B_BASE_TS,
    B_CREATED,
    B_DEQUE,
    B_FIRST_SLAB,
    B_GENERATION,
    B_PARENT,
    B_PARENT_DELTA,
    B_PARENT_GENERATION,
    B_PRODUCER_EPOCH,
    B_PRODUCER_ID,
    B_PUBLISH,
    B_SLAB_COUNT,
    B_STATE,
    COMMIT,
    COMMIT_BYTE,
    COMMIT_DONE,
    COMMIT_LIVE,
    D_NEXT_SEQUENCE,
    DREC,
    FREE,
    H_COMMITS_DONE,
    H_COMMITS_STARTED,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    I32,
    I64,
    IDEM,
    U32,
)
from shmkafka.shm.locks import KernelLock
from shmkafka.shm.segment import Segment


@dataclass(frozen=True)
class CommitRecord:
    """One valid COMMIT record of a batch descriptor."""

    copy: int
    number: int
    generation: int
    state: int
    deque_id: int
    slab_count: int
    write_pos: int
    record_count: int
    parent: int
    parent_generation: int
    parent_delta: int
    base_timestamp: int
    created_ms: int
    producer_id: int
    epoch: int
    base_sequence: int
    data_crc: int

    def same_batch(self, live: CommitRecord) -> bool:
        """Everything recovery reads is as in ``live`` (the copy, number and CRC aside)."""
        return dataclasses.replace(self, copy=0, number=0, data_crc=0) == dataclasses.replace(
            live, copy=0, number=0, data_crc=0
        )


def _sealed(record: bytes) -> bytes:
    """A record's bytes with its CRC32C (of everything before it) in its last 4 bytes."""
    return record[:-4] + U32.pack(crc32c.crc32c(record[:-4]))


def _valid(raw: bytes) -> bool:
    return crc32c.crc32c(raw[:-4]) == U32.unpack_from(raw, len(raw) - 4)[0] and any(raw[:8])


def read_commit(buf: memoryview, at: int, copy: int) -> CommitRecord | None:
    raw = bytes(buf[at : at + COMMIT.size])
    if not _valid(raw):
        return None
    fields = COMMIT.unpack(raw)
    return CommitRecord(copy, *fields[:-1])


def latest(records: Iterable[CommitRecord | None]) -> CommitRecord | None:
    valid = [r for r in records if r is not None]
    return max(valid, key=lambda r: r.number) if valid else None


@dataclass(frozen=True)
class DequeRecord:
    copy: int
    number: int
    topic: str
    partition: int
    next_sequence: int


def read_drec(buf: memoryview, at: int, copy: int) -> DequeRecord | None:
    raw = bytes(buf[at : at + DREC.size])
    if not _valid(raw):
        return None
    number, partition, next_sequence, length, name, _ = DREC.unpack(raw)
    if length > len(name):
        return None
    return DequeRecord(copy, number, name[:length].decode(), partition, next_sequence)


def read_idem(buf: memoryview, at: int, copy: int) -> tuple[int, int, int, int] | None:
    """(copy, number, producer_id, epoch) of a valid IDEM record."""
    raw = bytes(buf[at : at + IDEM.size])
    if not _valid(raw):
        return None
    number, producer_id, epoch, _ = IDEM.unpack(raw)
    return copy, number, producer_id, epoch


class Committer:
    """The commit protocol of one process's handle of a durable pool."""

    def __init__(self, segment: Segment, directory: Directory) -> None:
        self.segment = segment
        self.layout = segment.layout
        self.directory = directory
        self.lock = KernelLock(segment.fd, COMMIT_BYTE)
        self.commits = 0  # made by this process (for stat and the tests)

    # ------------------------------------------------------------------ waits

    def started(self) -> int:
        return int(self.segment.words[H_COMMITS_STARTED >> 3])

    def done(self) -> int:
        return int(self.segment.words[H_COMMITS_DONE >> 3])

    def wait_durable(self) -> int:
        """Return once everything this thread appended before the call is on the disk:
        a commit that started after now has finished (made by us, or by whoever held the
        lock when we got it). Returns the commit's number."""
        target = self.started() + 1
        while self.done() < target:
            with self.lock:
                if self.done() >= target:
                    break
                self._commit_held(())
        return target

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The commit lock, for the Sender's sequence assignment plus its commit."""
        with self.lock:
            yield

    def commit(self, done: Iterable[tuple[int, int]] = ()) -> int:
        with self.lock:
            return self._commit_held(done)

    def commit_held(self) -> int:
        """A commit by a caller already in ``held()``."""
        return self._commit_held(())

    # ------------------------------------------------------------------ the commit

    def _commit_held(self, done: Iterable[tuple[int, int]]) -> int:
        """One commit; the lock is held. ``done``: (batch id, generation) pairs that go
        DONE in it (their slabs are freed after it, by the caller)."""
        seg = self.segment
        number = self.started() + 1
        seg.store_u64(H_COMMITS_STARTED, number)
        finished = dict(done)
        deques: set[int] = set()
        for batch_id in range(self.layout.config.num_slabs):
            live = self._live(batch_id, finished.get(batch_id))
            if live is None:
                continue
            deques.add(live.deque_id)
            previous = self._latest(batch_id)
            if previous is not None and previous.same_batch(live):
                continue
            self._write_commit(batch_id, number, live, previous)
        self._write_idem(number)
        for deque_id in deques:
            self._write_drec(deque_id, number)
        seg.sync()
        seg.store_u64(H_COMMITS_DONE, number)
        self.commits += 1
        return number

    def _live(self, batch_id: int, done_generation: int | None) -> CommitRecord | None:
        """The record batch ``batch_id`` has now, or None if it is FREE (or was freed while
        read). ``done_generation``: the batch goes DONE in this commit."""
        at = self.layout.batch_at(batch_id)
        buf, halfwords = self.segment.buf, self.segment.halfwords
        state = halfwords[(at + B_STATE) >> 2]
        generation = halfwords[(at + B_GENERATION) >> 2]
        if state == FREE:
            return None
        word = self.segment.words[(at + B_PUBLISH) >> 3]
        record = CommitRecord(
            0, 0, generation,
            COMMIT_DONE if done_generation == generation else COMMIT_LIVE,
            halfwords[(at + B_DEQUE) >> 2], halfwords[(at + B_SLAB_COUNT) >> 2],
            word & 0xFFFFFFFF, word >> 32,
            halfwords[(at + B_PARENT) >> 2], halfwords[(at + B_PARENT_GENERATION) >> 2],
            halfwords[(at + B_PARENT_DELTA) >> 2],
            I64.unpack_from(buf, at + B_BASE_TS)[0],
            I64.unpack_from(buf, at + B_CREATED)[0], I64.unpack_from(buf, at + B_PRODUCER_ID)[0],
            int.from_bytes(buf[at + B_PRODUCER_EPOCH : at + B_PRODUCER_EPOCH + 2], "little",
                           signed=True),
            I32.unpack_from(buf, at + B_BASE_SEQUENCE)[0], 0,
        )  # fmt: skip
        if halfwords[(at + B_STATE) >> 2] == FREE or halfwords[(at + B_GENERATION) >> 2] != (
            generation
        ):
            return None
        first = halfwords[(at + B_FIRST_SLAB) >> 2]
        if first != batch_id or record.write_pos < HEADER_SIZE:
            return None  # (not whole: a damaged descriptor is the Sender's to fail)
        return record

    def _latest(self, batch_id: int) -> CommitRecord | None:
        buf = self.segment.buf
        return latest(read_commit(buf, self.layout.commit_at(batch_id, c), c) for c in (0, 1))

    def _write_commit(
        self, batch_id: int, number: int, live: CommitRecord, previous: CommitRecord | None
    ) -> None:
        start = self.layout.slab_at(batch_id)
        data = self.segment.buf
        if (
            previous is not None
            and previous.generation == live.generation
            and previous.write_pos <= live.write_pos
        ):  # (records are only appended: the CRC goes on from the last record's)
            crc = crc32c.crc32c(
                data[start + previous.write_pos : start + live.write_pos], previous.data_crc
            )
        else:
            crc = crc32c.crc32c(data[start + HEADER_SIZE : start + live.write_pos])
        copy = 1 - previous.copy if previous is not None else 0
        raw = COMMIT.pack(
            number, live.generation, live.state, live.deque_id, live.slab_count, live.write_pos,
            live.record_count, live.parent, live.parent_generation, live.parent_delta,
            live.base_timestamp, live.created_ms, live.producer_id, live.epoch,
            live.base_sequence, crc, 0,
        )  # fmt: skip
        at = self.layout.commit_at(batch_id, copy)
        data[at : at + COMMIT.size] = _sealed(raw)

    def _write_idem(self, number: int) -> None:
        buf = self.segment.buf
        producer_id = I64.unpack_from(buf, H_PRODUCER_ID)[0]
        epoch = I32.unpack_from(buf, H_PRODUCER_EPOCH)[0]
        copies = [read_idem(buf, self.layout.idem_at_copy(c), c) for c in (0, 1)]
        valid = [c for c in copies if c is not None]
        newest = max(valid, key=lambda c: c[1]) if valid else None
        if newest is not None and newest[2:] == (producer_id, epoch):
            return
        copy = 1 - newest[0] if newest is not None else 0
        raw = IDEM.pack(number, producer_id, epoch, 0)
        at = self.layout.idem_at_copy(copy)
        buf[at : at + IDEM.size] = _sealed(raw)

    def _write_drec(self, deque_id: int, number: int) -> None:
        owner = self.directory.owner(deque_id)
        if owner is None:
            return
        topic, partition = owner
        buf = self.segment.buf
        sequence = I32.unpack_from(buf, self.layout.deque_at(deque_id) + D_NEXT_SEQUENCE)[0]
        copies = [read_drec(buf, self.layout.drec_at(deque_id, c), c) for c in (0, 1)]
        valid = [c for c in copies if c is not None]
        newest = max(valid, key=lambda c: c.number) if valid else None
        if newest is not None and (newest.topic, newest.partition, newest.next_sequence) == (
            topic, partition, sequence,
        ):  # fmt: skip
            return
        copy = 1 - newest.copy if newest is not None else 0
        at = self.layout.drec_at(deque_id, copy)
        self.segment.reserve(at, DREC.size)
        name = topic.encode()
        raw = DREC.pack(number, partition, sequence, len(name), name, 0)
        buf[at : at + DREC.size] = _sealed(raw)


class Flusher:
    """``flush`` mode: a thread of the Sender's that commits every pool_flush_ms."""

    def __init__(self, committer: Committer, interval_ms: int) -> None:
        self.committer = committer
        self.interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shmkafka-flusher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.committer.commit()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
