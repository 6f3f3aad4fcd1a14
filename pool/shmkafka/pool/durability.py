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
import itertools
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from shmkafka.pool.errors import DurabilityTimeoutError
from shmkafka.protocol.records import HEADER_SIZE, crc32c
from shmkafka.shm.directory import Directory
from shmkafka.shm.layout import (
    B_GENERATION,
    B_PARENT,
    B_PUBLISH,
    B_STATE,
    BATCH,
    BATCH_SIZE_BYTES,
    COMMIT,
    COMMIT_BYTE,
    COMMIT_DONE,
    COMMIT_LIVE,
    DREC,
    FREE,
    H_COMMITS_DONE,
    H_COMMITS_STARTED,
    PARENT,
    U32,
)
from shmkafka.shm.locks import KernelLock
from shmkafka.shm.segment import Segment

# COMMIT's fields by index (a live batch's tuple in Committer starts at GENERATION)
GENERATION, DEQUE, WRITE_POS, DATA_CRC = 1, 3, 5, 15
POLL_FIRST_S, POLL_MAX_S = 0.000_05, 0.001  # wait_durable's polls of a held commit lock


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
    return record[:-4] + U32.pack(crc32c()(record[:-4]))


def _valid(raw: bytes | memoryview) -> bool:
    return crc32c()(raw[:-4]) == U32.unpack_from(raw, len(raw) - 4)[0] and any(raw[:8])


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


def read_drec(buf: memoryview, at: int, copy: int) -> DequeRecord | None:
    raw = bytes(buf[at : at + DREC.size])
    if not _valid(raw):
        return None
    number, partition, length, name, _ = DREC.unpack(raw)
    if length > len(name):
        return None
    return DequeRecord(copy, number, name[:length].decode(), partition)


class Committer:
    """The commit protocol of one process's handle of a durable pool."""

    def __init__(self, segment: Segment, directory: Directory) -> None:
        self.segment = segment
        self.layout = layout = segment.layout
        self.directory = directory
        self.lock = KernelLock(segment.fd, COMMIT_BYTE)
        self.commits = 0  # made by this process (for stat and the tests)
        # every descriptor's state word as one strided view: the scan reads them in one call
        first, step = (layout.batches_at + B_STATE) >> 2, BATCH_SIZE_BYTES >> 2
        self._states = segment.halfwords[first : first + layout.config.num_slabs * step : step]
        self._all = range(layout.config.num_slabs)
        crc32c()  # (its import now, not at the first commit: under the commit lock)

    # ------------------------------------------------------------------ waits

    def started(self) -> int:
        return int(self.segment.words[H_COMMITS_STARTED >> 3])

    def done(self) -> int:
        return int(self.segment.words[H_COMMITS_DONE >> 3])

    def wait_durable(self, timeout_s: float) -> int:
        """Return once everything this thread appended before the call is on the disk:
        a commit that started after now has finished (made by us, or by whoever held the
        lock when we got it). Returns the commit's number. Raises DurabilityTimeoutError
        after ``timeout_s`` (a disk that does not answer)."""
        target = self.started() + 1
        deadline = time.monotonic() + timeout_s
        pause = POLL_FIRST_S
        while self.done() < target:
            if self.lock.try_acquire():  # (a kernel record lock has no timed wait: polled)
                try:
                    if self.done() < target:
                        self._commit_held(())
                finally:
                    self.lock.release()
                break
            if time.monotonic() >= deadline:
                raise DurabilityTimeoutError(
                    f"the pool's disk did not finish a commit within {timeout_s:g} s: the "
                    "record was accepted and will be delivered, but is not known to be durable"
                )
            time.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)
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
        for batch_id in itertools.compress(self._all, self._states.tolist()):  # (FREE is 0)
            live = self._live(batch_id, finished.get(batch_id))
            if live is None:
                continue
            newest = self._newest(batch_id)
            if newest is not None and newest[1:DATA_CRC] == live:
                continue  # (unchanged since its newest record)
            self._write_commit(batch_id, number, live, newest)
            deques.add(live[DEQUE - 1])
        for deque_id in deques:
            self._write_drec(deque_id, number)
        seg.sync()
        seg.store_u64(H_COMMITS_DONE, number)
        self.commits += 1
        return number

    def _live(self, batch_id: int, done_generation: int | None) -> tuple[int, ...] | None:
        """COMMIT's fields from generation to base_sequence as batch ``batch_id`` has them
        now, or None if it is FREE, was freed while read, or is not whole.
        ``done_generation``: the batch goes DONE in this commit."""
        at = self.layout.batch_at(batch_id)
        seg = self.segment
        fields = BATCH.unpack_from(seg.buf, at)
        state, generation, deque, first, slab_count = fields[:5]
        base_ts, created, producer_id, epoch, sequence = fields[10:]
        word = seg.words[(at + B_PUBLISH) >> 3]  # (one load: the publish word is whole)
        parent, parent_generation, parent_delta = PARENT.unpack_from(seg.buf, at + B_PARENT)
        halfwords = seg.halfwords
        if (
            state == FREE
            or halfwords[(at + B_STATE) >> 2] == FREE
            or halfwords[(at + B_GENERATION) >> 2] != generation
        ):
            return None
        write_pos = word & 0xFFFFFFFF
        if first != batch_id or write_pos < HEADER_SIZE:
            return None  # (not whole: a damaged descriptor is the Sender's to fail)
        if not word >> 32:
            return None  # (opened, no record yet: nothing to keep)
        return (
            generation, COMMIT_DONE if done_generation == generation else COMMIT_LIVE, deque,
            slab_count, write_pos, word >> 32, parent, parent_generation, parent_delta,
            base_ts, created, producer_id, epoch, sequence,
        )  # fmt: skip

    def _newest(self, batch_id: int) -> tuple[int, ...] | None:
        """COMMIT's fields of the batch's newest valid record, its copy appended."""
        newest: tuple[int, ...] | None = None
        for copy in (0, 1):
            at = self.layout.commit_at(batch_id, copy)
            raw = self.segment.buf[at : at + COMMIT.size]
            if _valid(raw):
                fields = COMMIT.unpack(raw)
                if newest is None or fields[0] > newest[0]:
                    newest = (*fields, copy)
        return newest

    def _write_commit(
        self, batch_id: int, number: int, live: tuple[int, ...], newest: tuple[int, ...] | None
    ) -> None:
        start = self.layout.slab_at(batch_id)
        data = self.segment.buf
        write_pos = live[WRITE_POS - 1]
        if (
            newest is not None
            and newest[GENERATION] == live[GENERATION - 1]
            and newest[WRITE_POS] <= write_pos
        ):  # (records are only appended: the CRC goes on from the last record's)
            crc = crc32c()(data[start + newest[WRITE_POS] : start + write_pos],
                                newest[DATA_CRC])  # fmt: skip
        else:
            crc = crc32c()(data[start + HEADER_SIZE : start + write_pos])
        copy = 1 - newest[-1] if newest is not None else 0
        at = self.layout.commit_at(batch_id, copy)
        data[at : at + COMMIT.size] = _sealed(COMMIT.pack(number, *live, crc, 0))

    def _write_drec(self, deque_id: int, number: int) -> None:
        """The deque's topic and partition, unless its newest record says them already."""
        owner = self.directory.owner(deque_id)
        if owner is None:
            return
        topic, partition = owner
        buf = self.segment.buf
        copies = [read_drec(buf, self.layout.drec_at(deque_id, c), c) for c in (0, 1)]
        valid = [c for c in copies if c is not None]
        newest = max(valid, key=lambda c: c.number) if valid else None
        if newest is not None and (newest.topic, newest.partition) == (topic, partition):
            return
        copy = 1 - newest.copy if newest is not None else 0
        at = self.layout.drec_at(deque_id, copy)
        self.segment.reserve(at, DREC.size)
        name = topic.encode()
        buf[at : at + DREC.size] = _sealed(DREC.pack(number, partition, len(name), name, 0))


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
