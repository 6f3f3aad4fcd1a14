"""Recovery of a durable pool (pool/recovery.py): the host "goes down" here by its /dev/shm
name and semaphores vanishing, as at a reboot, with the pool file left as written; what the
disk itself keeps through a cut is tests/powercut's."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.durability import CommitRecord, read_commit
from shmkafka.pool.recovery import (
    RECOVERED_BATCHES,
    RECOVERED_RECORDS,
    RECOVERIES,
    TORN_RECORDS,
    UNCOMMITTED_RECORDS,
    _superseded,
    max_timestamp,
)
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.pool.stat import format_stat, segment_stat
from shmkafka.protocol.records import HEADER_SIZE, decode_batch, encode_record
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.layout import COMMIT, COMMIT_LIVE, IN_FLIGHT, NO_PARENT, SEALED
from tests.appending import append
from tests.conftest import SMALL, publish
from tests.powercut.host import _remove_semaphores


@pytest.fixture
def config(tmp_path: Path) -> PoolConfig:
    return dataclasses.replace(SMALL, pool_dir=str(tmp_path), pool_durability="flush")


class Host:
    """A host with one durable pool, which it owns until it destroys it: ``boot`` opens it
    (topic "t"), ``reboot`` takes every process and /dev/shm away (only the file stays) and
    opens it again, which recovers it."""

    def __init__(self, name: str, config: PoolConfig) -> None:
        self.name, self.config = name, config
        self.pool: SharedPool | None = None

    def boot(self, partitions: int, config: PoolConfig | None = None) -> SharedPool:
        self.config = config or self.config
        self.pool = SharedPool.open(self.name, self.config)
        publish(self.pool, {"t": partitions})
        return self.pool

    def reboot(self) -> SharedPool:
        assert self.pool is not None
        self.pool.detach()
        self.pool = None
        _remove_semaphores(self.name)
        self.pool = SharedPool.open(self.name, self.config)
        return self.pool


@pytest.fixture
def host(pool_name: str, config: PoolConfig) -> Iterator[Host]:
    made = Host(pool_name, config)
    yield made
    if made.pool is not None:
        made.pool.destroy()


def _records_of(pool: SharedPool) -> list[tuple[int, bytes | None]]:
    """(partition, value) of every batch in the recovered pool, deque order."""
    acc = RecordAccumulator(pool, fast_path=False)
    batches = sorted(acc.in_flight_batches(), key=lambda b: b.info.base_sequence)
    for state in acc.partition_states():
        batches += acc.drain([state.deque_id], 1 << 30)
    return [
        (batch.partition, record.value)
        for batch in batches
        for record in decode_batch(b"".join(acc.finalize(batch))).records
    ]


def test_committed_records_come_back_and_uncommitted_ones_do_not(
    host: Host, config: PoolConfig
) -> None:
    pool = host.boot(2)
    acc = RecordAccumulator(pool, max_block_ms=100)
    for i in range(3):
        append(acc, "t", i % 2, 1000 + i, None, b"v%d" % i, now_ms=1)
    assert pool.committer is not None
    pool.committer.commit()
    append(acc, "t", 0, 2000, None, b"after the last commit", now_ms=2)
    recovered = host.reboot()
    assert not (Path(config.pool_dir) / f"shmkafka.{host.name}.recovering").exists()
    stats = recovered.recovery_stats()
    assert (stats[RECOVERED_BATCHES], stats[RECOVERED_RECORDS], stats[RECOVERIES]) == (2, 3, 1)
    assert stats[UNCOMMITTED_RECORDS] == 1  # (the one after the last commit: lost, counted)
    assert sorted(_records_of(recovered)) == [(0, b"v0"), (0, b"v2"), (1, b"v1")]
    assert recovered.producer_identity() == (-1, -1)  # (a new producer for what follows)
    shown = format_stat(segment_stat(recovered.segment))
    assert f"durability: flush in {config.pool_dir}" in shown
    assert "recovered after the host went down: 3 records in 2 batches" in shown


def test_a_batch_whose_records_do_not_check_falls_back_to_its_older_commit(host: Host) -> None:
    pool = host.boot(1)
    acc = RecordAccumulator(pool, max_block_ms=100)
    first = append(acc, "t", 0, 1, None, b"kept", now_ms=1)
    assert pool.committer is not None
    pool.committer.commit()
    second = append(acc, "t", 0, 2, None, b"torn", now_ms=1)
    pool.committer.commit()
    # the cut kept the second commit's record, not the page of the record it covers
    start = pool.layout.slab_at(first.batch_id)
    info = pool.batches.read(first.batch_id)
    pool.segment.buf[start + info.write_pos - 1] ^= 0xFF
    assert second.batch_id == first.batch_id
    recovered = host.reboot()
    assert _records_of(recovered) == [(0, b"kept")]
    assert recovered.recovery_stats()[TORN_RECORDS] == 0  # (none of it acknowledged: not torn)


def test_a_batch_with_no_commit_whose_records_check_is_dropped_and_counted(host: Host) -> None:
    pool = host.boot(1)
    first = append(RecordAccumulator(pool, max_block_ms=100), "t", 0, 1, None, b"x", now_ms=1)
    assert pool.committer is not None
    pool.committer.commit()
    pool.segment.buf[pool.layout.slab_at(first.batch_id) + HEADER_SIZE] ^= 0xFF
    recovered = host.reboot()
    assert _records_of(recovered) == []
    assert recovered.recovery_stats()[TORN_RECORDS] == 1


def test_a_sent_batch_comes_back_in_flight_under_its_producer_and_sequence(
    host: Host, config: PoolConfig
) -> None:
    pool = host.boot(1)
    acc = RecordAccumulator(pool, max_block_ms=100)
    append(acc, "t", 0, 1, None, b"sent", now_ms=1)
    (state,) = acc.partition_states()
    (batch,) = acc.drain([state.deque_id], 1 << 20)
    pool.batches.set_producer_state(batch.batch_id, 4242, 3, 17)
    acc.mark_in_flight(batch)
    append(acc, "t", 0, 2, None, b"queued", now_ms=2)
    assert pool.committer is not None
    pool.committer.commit()
    recovered = host.reboot()
    states = {}
    for batch_id in range(recovered.config.num_slabs):
        info = recovered.batches.read(batch_id)
        if info.state in (SEALED, IN_FLIGHT):
            states[info.state] = (info.producer_id, info.producer_epoch, info.base_sequence)
    assert states[IN_FLIGHT] == (4242, 3, 17) and states[SEALED][2] < 0
    assert _records_of(recovered) == [(0, b"sent"), (0, b"queued")]  # (in that order)


def test_a_batch_opened_without_a_record_yet_is_neither_committed_nor_recovered(host: Host) -> None:
    """A commit between a batch's opening and its first record sees it OPEN and empty:
    recovered, it would reach the Sender as a batch of no records (once failed as corrupt,
    which stalled a producer reset and expired every recovered record after it)."""
    pool = host.boot(2)
    acc = RecordAccumulator(pool, max_block_ms=100)
    append(acc, "t", 0, 1, None, b"kept", now_ms=1)
    run = pool.buffers.allocate(HEADER_SIZE + 100, 0)
    deque_id = pool.directory.snapshot().topics["t"][1].deque_id
    pool.batches.open(run.first, deque_id, run.count, HEADER_SIZE, 1, 1)  # (no record yet)
    assert pool.committer is not None
    pool.committer.commit()
    assert all(record is None for record in _commit_records(pool, run.first))
    pool.segment.buf[pool.layout.commit_at(run.first, 0) : pool.layout.commit_at(run.first, 1)] = (
        _sealed_empty_record(run.first, deque_id)
    )  # (as an older version wrote it: recovery skips it too)
    recovered = host.reboot()
    assert _records_of(recovered) == [(0, b"kept")]
    assert recovered.recovery_stats()[RECOVERED_BATCHES] == 1


def _commit_records(pool: SharedPool, batch_id: int) -> list[CommitRecord | None]:
    return [read_commit(pool.segment.buf, pool.layout.commit_at(batch_id, c), c) for c in (0, 1)]


def _sealed_empty_record(batch_id: int, deque_id: int) -> bytes:
    raw = COMMIT.pack(99, 0, COMMIT_LIVE, deque_id, 1, HEADER_SIZE, 0, NO_PARENT, 0, 0, 1, 1,
                      -1, -1, -1, 0, 0)  # fmt: skip
    return raw[:-4] + crc32c.crc32c(raw[:-4]).to_bytes(4, "little")


def test_max_timestamp_reads_every_records_delta() -> None:
    records = b"".join(encode_record(i, delta, None, b"v") for i, delta in enumerate((0, 7, 3)))
    assert max_timestamp(records, 1000) == 1007


def _half(parent: int, generation: int, delta: int, count: int) -> CommitRecord:
    return CommitRecord(0, 1, 1, COMMIT_LIVE, 0, 1, HEADER_SIZE, count, parent, generation,
                        delta, 0, 0, -1, -1, -1, 0)  # fmt: skip


def test_halves_give_way_to_a_live_parent_and_to_a_live_half_that_covers_them() -> None:
    parent = dataclasses.replace(_half(NO_PARENT, 0, 0, 8), generation=5)
    records = {1: parent, 2: _half(1, 5, 0, 4), 3: _half(1, 5, 4, 4)}
    assert _superseded(records) == {2, 3}
    del records[1]  # the parent went DONE: its halves go; one split again
    records.update({4: _half(1, 5, 4, 2), 5: _half(1, 5, 6, 2)})
    assert _superseded(records) == {4, 5}  # (their half is still live: it goes whole)
    del records[3]
    assert _superseded(records) == set()


def test_the_open_transaction_of_a_transactional_pool_is_aborted(
    host: Host, config: PoolConfig
) -> None:
    pool = host.boot(1, dataclasses.replace(config, sender_settings='{"transactional_id": "x"}'))
    append(RecordAccumulator(pool, max_block_ms=100), "t", 0, 1, None, b"open txn", now_ms=1)
    assert pool.committer is not None
    pool.committer.commit()
    recovered = host.reboot()
    assert _records_of(recovered) == []
    assert recovered.recovery_stats()[RECOVERIES] == 1
