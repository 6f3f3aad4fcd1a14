"""Batches that grow with their partition's load: a run of slabs sized from what the
partition's last batches held, trimmed to what it filled when the Sender drains it, and
capped by batch_size (bytes) and batch_max_records (librdkafka's batch.num.messages)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.bufferpool import SlabRun
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.records import decode_batch
from shmkafka.shm.config import SLAB_SIZE, PoolConfig
from tests.appending import append
from tests.conftest import publish

GROWING = PoolConfig(
    batch_size=8 * SLAB_SIZE,
    buffer_memory=64 * SLAB_SIZE,
    max_request_size=1 << 20,
    max_partitions=16,
    max_processes=8,
    lock_stripes=4,
)
VALUE = bytes(1000)


@pytest.fixture
def growing(pool_name: str) -> Iterator[SharedPool]:
    p = SharedPool.open(pool_name, GROWING)
    try:
        yield p
    finally:
        p.destroy()


@pytest.fixture(params=[True, False], ids=["c-fast-path", "pure-python"])
def fast_path(request: pytest.FixtureRequest) -> bool:
    value: bool = request.param
    return value


def _fill(acc: RecordAccumulator, partition: int, count: int) -> list[int]:
    """Append ``count`` records; the batch ids they went to, in order of first use."""
    batches: list[int] = []
    for i in range(count):
        result = append(acc, "t", partition, i, b"k", VALUE, now_ms=i)
        if result.batch_id not in batches:
            batches.append(result.batch_id)
    return batches


def test_the_slab_is_the_unit_and_batch_size_the_cap() -> None:
    assert (GROWING.slab_size, GROWING.max_run, GROWING.num_slabs) == (SLAB_SIZE, 8, 64)
    small = PoolConfig(batch_size=4096, buffer_memory=1 << 20)
    assert (small.slab_size, small.max_run) == (4096, 1)  # a batch no larger than asked
    assert PoolConfig(batch_size=1_000_000).max_run == 61


def test_a_batch_that_fills_while_open_makes_the_next_twice_as_long(
    growing: SharedPool, fast_path: bool
) -> None:
    publish(growing, {"t": 1})
    acc = RecordAccumulator(growing, max_block_ms=100, fast_path=fast_path)
    ids = _fill(acc, 0, 700)  # about 700 KB: more than 1 + 2 + 4 slabs
    runs = [growing.batches.read(b).slab_count for b in ids]
    assert runs[:4] == [1, 2, 4, 8] and set(runs[4:]) <= {8}  # capped at max_run
    for b in ids[:-1]:  # every batch but the last holds as much as its run allows
        info = growing.batches.read(b)
        assert info.write_pos > growing.batches.capacity(info.slab_count) - len(VALUE) - 64


def test_drain_trims_the_unfilled_tail_and_sizes_the_next_batch(
    growing: SharedPool, fast_path: bool
) -> None:
    publish(growing, {"t": 1})
    acc = RecordAccumulator(growing, max_block_ms=100, fast_path=fast_path)
    _fill(acc, 0, 60)  # 16 + 32 records in 1 + 2 slabs, then 12 in a run of 4
    states = acc.partition_states()
    drained = []
    while states:
        drained += acc.drain([s.deque_id for s in states], 1 << 30)
        states = acc.partition_states()
    last = drained[-1].info
    assert last.slab_count == 1 and last.write_pos <= SLAB_SIZE  # 4 slabs trimmed to 1
    used = sum(b.info.slab_count for b in drained)
    assert growing.buffers.free_slabs() == GROWING.num_slabs - used  # the tails came back
    deque_id = drained[-1].info.deque_id
    assert growing.deques.run_hint(deque_id) == 1  # what the last one filled (not its run)
    records = [r.value for b in drained for r in decode_batch(b"".join(acc.finalize(b))).records]
    assert records == [VALUE] * 60
    for batch in drained:
        acc.complete(batch)
    assert growing.buffers.free_slabs() == GROWING.num_slabs
    assert growing.check_invariants() == []
    # the next batch of that partition starts from the hint
    first = append(acc, "t", 0, 1, b"k", VALUE, now_ms=100)
    assert growing.batches.read(first.batch_id).slab_count == 1


def test_a_batch_that_filled_its_run_before_the_drain_doubles_the_next(
    growing: SharedPool, fast_path: bool
) -> None:
    publish(growing, {"t": 1})
    acc = RecordAccumulator(growing, max_block_ms=100, fast_path=fast_path)
    _fill(acc, 0, 16)  # one slab, full
    (state,) = acc.partition_states()
    (batch,) = acc.drain([state.deque_id], 1 << 30)
    assert batch.info.slab_count == 1
    assert growing.deques.run_hint(state.deque_id) == 2
    acc.complete(batch)
    nxt = append(acc, "t", 0, 1, b"k", VALUE, now_ms=100)
    assert growing.batches.read(nxt.batch_id).slab_count == 2


def test_a_batch_takes_what_memory_is_left_when_its_run_is_not_free(
    growing: SharedPool, fast_path: bool
) -> None:
    publish(growing, {"t": 2})
    acc = RecordAccumulator(growing, max_block_ms=100, fast_path=fast_path)
    held = []
    for _ in range(GROWING.num_slabs):
        held.append(run := growing.buffers.allocate(1, 0))
        growing.buffers.commit(run)
    for run in held[1::2]:  # every other slab free: the longest free run is one slab
        growing.buffers.deallocate(run)
    deque_id = growing.directory.snapshot().topics["t"][1].deque_id
    growing.deques.set_run_hint(deque_id, 8)
    result = append(acc, "t", 1, 1, b"k", VALUE, now_ms=0)
    assert growing.batches.read(result.batch_id).slab_count == 1
    for run in held[::2]:
        growing.buffers.deallocate(run)
    # with the memory back, the partition's next batch has its whole run
    growing.batches.set_state(result.batch_id, 2)  # sealed: the next record opens a batch
    second = append(acc, "t", 1, 2, b"k", VALUE, now_ms=1)
    assert growing.batches.read(second.batch_id).slab_count == 8


def test_batch_max_records_seals_a_batch_by_count(pool_name: str, fast_path: bool) -> None:
    config = PoolConfig(**{**GROWING.__dict__, "batch_max_records": 10})
    pool = SharedPool.open(pool_name, config)
    try:
        publish(pool, {"t": 1})
        acc = RecordAccumulator(pool, max_block_ms=100, fast_path=fast_path)
        results = [append(acc, "t", 0, i, b"k", b"v", now_ms=i) for i in range(25)]
        ids = dict.fromkeys(r.batch_id for r in results)
        counts = [pool.batches.read(b).record_count for b in ids]
        assert counts == [10, 10, 5]
        assert results[9].batch_is_full and not results[8].batch_is_full
        (state,) = acc.partition_states()
        assert state.first_full
    finally:
        pool.destroy()


def test_a_sender_killed_mid_trim_leaks_slabs_the_next_one_reclaims(growing: SharedPool) -> None:
    publish(growing, {"t": 1})
    acc = RecordAccumulator(growing, max_block_ms=100)
    result = append(acc, "t", 0, 1, b"k", VALUE, now_ms=0)
    # as a Sender killed between the descriptor's shrink and the free of the tail
    run = growing.buffers.allocate(1, 0, want=4)
    growing.batches.open(run.first, 0, run.count, 61, 0, 0)
    growing.buffers.commit(run)
    growing.batches.set_slab_count(run.first, 1)
    before = growing.buffers.free_slabs()
    assert growing.check_invariants() != []  # three slabs used, owned by nothing
    assert growing.reclaim_unowned() == 3
    assert growing.buffers.free_slabs() == before + 3
    assert growing.batches.read(result.batch_id).slab_count == 1  # the open batch is intact
    growing.batches.clear(run.first)
    growing.buffers.deallocate(SlabRun(run.first, 1))
    assert growing.check_invariants() == []
