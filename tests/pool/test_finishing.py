"""The Sender's finish of a response's acknowledged batches: ``FastAppend.finish_sent`` (C)
and its twin ``finishing.finish_sent`` (Python), each on its own pool made alike. Both must
post the same results to the same slots, name the same full rings, leave the same rows to
the caller, give back the same runs and leave the same bytes; and what they post must be
what ``Sender.finish`` posts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmkafka.pool import fastpath, finishing
from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.config import SLAB_SIZE, PoolConfig
from shmkafka.shm.layout import (
    B_ATTEMPTS,
    B_PARENT,
    B_PARENT_DELTA,
    B_PARENT_GENERATION,
    B_RECOVERED,
    B_STATE,
    B_WRITE_POS,
    FREE,
    H_SLOTS_HIGH,
    IN_FLIGHT,
    S_RING_HEAD,
    S_RING_TAIL,
    SEALED,
)
from shmkafka.shm.rings import SenderView
from tests.appending import append
from tests.pool.twin_pools import segment_bytes, twin_pools

pytestmark = pytest.mark.skipif(fastpath.FastAppend is None, reason="C fast path not built")

CONFIG = PoolConfig(buffer_memory=32 * SLAB_SIZE, max_topics=2, max_partitions=8,
                    max_processes=12, lock_stripes=2)  # fmt: skip
CAPACITY = 32  # (a ring holds min(num_slabs, RING_CAP) entries)


@pytest.fixture
def pools() -> Iterator[tuple[SharedPool, SharedPool]]:
    yield from twin_pools("fin", CONFIG, {"t": 8})


def _sent(pool: SharedPool, partitions: int) -> list[DrainedBatch]:
    """A batch for each partition, drained and IN_FLIGHT, as after a send."""
    acc = RecordAccumulator(pool, max_block_ms=100, fast_path=False)
    for p in range(partitions):
        for i in range(p % 3 + 1):
            append(acc, "t", p, 1_000 + i, None, b"v%d" % i, now_ms=5 + i)
    batches = []
    for state in acc.partition_states():
        for batch in acc.drain([state.deque_id], 1 << 30):
            acc.mark_in_flight(batch)
            batches.append(acc.refresh(batch))
    return batches


DAMAGE = st.sampled_from(["none", "none", "state", "generation", "recovered", "write_pos",
                          "parent", "bad parent", "attempts"])  # fmt: skip


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    partitions=st.integers(1, 8),
    damage=st.lists(DAMAGE, min_size=8, max_size=8),
    appenders=st.lists(st.integers(0, 11), min_size=1, max_size=4),
    high=st.integers(0, 12),
    full_rings=st.sets(st.integers(0, 11), max_size=3),
    offsets=st.tuples(st.integers(-1, 2**63 - 1), st.integers(-1, 2**40), st.integers(-1, 99)),
    node=st.integers(-1, 2**31 - 1),
    times=st.tuples(st.integers(0, 2**40), st.integers(-5, 2**33)),
)
def test_c_finishes_what_its_python_twin_finishes(
    pools: tuple[SharedPool, SharedPool], partitions: int, damage: list[str],
    appenders: list[int], high: int, full_rings: set[int],
    offsets: tuple[int, int, int], node: int, times: tuple[int, int],
) -> None:  # fmt: skip
    sent = [_sent(pool, partitions) for pool in pools]
    try:
        _check_finish(pools, sent[0], damage, appenders, high, full_rings, offsets, node, times)
    finally:
        _reset(pools, sent)


def _check_finish(
    pools: tuple[SharedPool, SharedPool], sent: list[DrainedBatch], damage: list[str],
    appenders: list[int], high: int, full_rings: set[int],
    offsets: tuple[int, int, int], node: int, times: tuple[int, int],
) -> None:  # fmt: skip
    rows = []
    for pool in pools:
        _prepare(pool, sent, damage, appenders, high, full_rings)
    for batch, harm in zip(sent, damage, strict=False):
        generation = batch.info.generation + (harm == "generation")  # (the row's, not shm's)
        rows.append((batch.batch_id, generation, *offsets))
    c_pool, py_pool = pools
    fast = RecordAccumulator(c_pool, fast_path=False, c_drain=True).drain_fast
    assert fast is not None
    sent_ms, took = times
    used = c_pool.deques_used()
    c_out = fast.finish_sent(rows, node, sent_ms, took, used)
    py_out = finishing.finish_sent(py_pool, rows, node, sent_ms, took, used)
    assert c_out == py_out
    assert segment_bytes(c_pool) == segment_bytes(py_pool)
    posted, full, left, runs = c_out
    assert sorted(left) == [i for i, h in enumerate(damage[: len(rows)]) if _left(h)]
    assert all(slot < high and slot not in full_rings for slot in posted)
    for index, slots in full:
        assert set(slots) <= full_rings and c_pool.batches.state(rows[index][0]) == IN_FLIGHT
    for first, _ in runs:
        assert c_pool.batches.state(first) == FREE


def _left(harm: str) -> bool:
    return harm in ("state", "generation", "recovered", "write_pos", "bad parent")


def _prepare(pool: SharedPool, batches: list[DrainedBatch], damage: list[str],
             appenders: list[int], high: int, full_rings: set[int]) -> None:  # fmt: skip
    seg = pool.segment
    seg.store_u32(H_SLOTS_HIGH, high)
    for slot in range(12):
        at = pool.layout.slot_at(slot)
        seg.store_u64(at + S_RING_HEAD, 0)
        seg.store_u64(at + S_RING_TAIL, CAPACITY if slot in full_rings else 0)
    for batch, harm in zip(batches, damage, strict=False):
        at = pool.layout.batch_at(batch.batch_id)
        for slot in appenders:
            pool.batches.add_appender(batch.batch_id, slot)
        if harm == "state":
            seg.store_u32(at + B_STATE, SEALED)
        elif harm == "recovered":
            seg.store_u32(at + B_RECOVERED, 1)
        elif harm == "write_pos":
            seg.store_u32(at + B_WRITE_POS, 10)
        elif harm in ("parent", "bad parent"):  # (a split half; a bad one names no batch)
            seg.store_u32(at + B_PARENT, 3 if harm == "parent" else 10**6)
            seg.store_u32(at + B_PARENT_GENERATION, 9)
            seg.store_u32(at + B_PARENT_DELTA, 40)
        elif harm == "attempts":
            seg.store_u32(at + B_ATTEMPTS, 0xFFFFFFFF)


def _reset(pools: tuple[SharedPool, SharedPool], sent: list[list[DrainedBatch]]) -> None:
    """Every batch of the example freed, and its memory back, for the next example."""
    for pool, batches in zip(pools, sent, strict=True):
        acc = RecordAccumulator(pool, fast_path=False)
        for batch in batches:  # (a run finish_sent gave back is the caller's to free)
            acc.complete(batch)


def test_what_c_posts_is_what_the_sender_would_post(pools: tuple[SharedPool, SharedPool]) -> None:
    """The entry the C finish posts, read back, is the Completion ``completion_for``
    makes for a success with the Sender's view of the batch."""
    pool = pools[0]
    (batch,) = _sent(pool, 1)
    pool.batches.add_appender(batch.batch_id, 2)
    pool.segment.store_u32(H_SLOTS_HIGH, 3)
    fast = RecordAccumulator(pool, fast_path=False, c_drain=True).drain_fast
    assert fast is not None
    row = (batch.batch_id, batch.info.generation, 500, 77, 3)
    posted, full, left, runs = fast.finish_sent([row], 4, 1_000, 12, pool.deques_used())
    assert (posted, full, left) == (sorted({pool.slot, 2}), [], [])  # (its appenders)
    assert runs == [(batch.batch_id, batch.info.slab_count)]
    (result,) = pool.rings.poll(2)
    view = SenderView(batch.info.attempts + 1, 4, 1_000 - batch.info.created_ms, 12)
    assert result == RecordAccumulator.completion_for(batch, 500, 0, 77, 3, view)


def test_bad_rows_are_refused(pools: tuple[SharedPool, SharedPool]) -> None:
    pool = pools[0]
    fast = RecordAccumulator(pool, fast_path=False, c_drain=True).drain_fast
    assert fast is not None
    before = segment_bytes(pool)
    for rows in ([(pool.config.num_slabs, 0, 0, 0, 0)], [(0, 0, 0, 0)], [(0, 0, 0, 0, "0")]):
        with pytest.raises((ValueError, TypeError)):
            fast.finish_sent(rows, 1, 0, 0, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="node"):
        fast.finish_sent([], 2**31, 0, 0, 1)
    assert segment_bytes(pool) == before
