"""The Sender's per-round read of the deques (pool/partition_states.py): what each queued
partition tells ``ready()``, the active set, and routes as of the directory's version."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmkafka.pool import fastpath
from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.partition_states import PartitionStates
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import BATCH_SIZE_BYTES, D_ENDS, DIRECTORY_LOCK, NO_BATCH
from tests.appending import append
from tests.conftest import publish


def _states(pool: SharedPool) -> dict[tuple[str, int], tuple[int, ...]]:
    acc = RecordAccumulator(pool, fast_path=False)  # (the Sender's)
    out: dict[tuple[str, int], tuple[int, ...]] = {}
    for s in acc.partition_states():
        out[(s.topic, s.partition)] = (s.leader, s.queued, s.first_size, s.first_full,
                                       s.created_ms, s.last_append_ms, s.attempts)  # fmt: skip
    return out


def test_each_queued_partition_as_its_first_batch_and_deque_say(pool: SharedPool) -> None:
    publish(pool, {"a": 2, "b": 1})
    acc = RecordAccumulator(pool)
    one = append(acc, "a", 0, 1, b"k", b"v" * 100, now_ms=10)
    append(acc, "a", 0, 2, b"k", b"v" * 100, now_ms=12)
    append(acc, "b", 0, 3, None, b"w", now_ms=20)
    states = _states(pool)
    info = pool.batches.read(one.batch_id)
    assert states == {
        ("a", 0): (1, 1, info.write_pos, False, 10, 12, 0),
        ("b", 0): (1, 1, states[("b", 0)][2], False, 20, 20, 0),
    }
    for _ in range(10_000):  # until "b" has a second batch
        if append(acc, "b", 0, 4, None, b"x" * 1000, now_ms=21).new_batch_created:
            break
    assert _states(pool)[("b", 0)][1:4:2] == (2, True)  # (queued behind: the first is full)


def test_a_deque_found_empty_leaves_the_active_set(pool: SharedPool) -> None:
    publish(pool, {"t": 1})
    acc = RecordAccumulator(pool)
    append(acc, "t", 0, 1, None, b"v", now_ms=1)
    (state,) = acc.partition_states()
    (batch,) = acc.drain([state.deque_id], 1 << 20)
    assert pool.deques.active(pool.deques_used()) == [state.deque_id]
    assert acc.partition_states() == []
    assert pool.deques.active(pool.deques_used()) == []
    acc.complete(batch)


def test_a_new_leader_is_seen_once_the_directory_moves(pool: SharedPool) -> None:
    publish(pool, {"t": 1})
    acc = RecordAccumulator(pool, fast_path=False)
    append(acc, "t", 0, 1, None, b"v", now_ms=1)
    assert [s.leader for s in acc.partition_states()] == [1]
    with pool.locks.held(DIRECTORY_LOCK):
        pool.directory.publish({"t": [PartitionLeader(7, 3)]})
    assert [s.leader for s in acc.partition_states()] == [7]


IDS = st.one_of(st.just(NO_BATCH), st.integers(0, 40), st.integers(0, 2**32 - 1))


@pytest.mark.skipif(fastpath.FastAppend is None, reason="C fast path not built")
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    deques=st.lists(st.tuples(st.sampled_from([0, 1, 0x80]), IDS, IDS), min_size=1, max_size=8),
    descriptors=st.binary(min_size=BATCH_SIZE_BYTES * 8, max_size=BATCH_SIZE_BYTES * 8),
)
def test_queued_heads_in_c_read_what_its_python_twin_reads(
    pool: SharedPool, deques: list[tuple[int, int, int]], descriptors: bytes
) -> None:
    """FastAppend.queued_heads and PartitionStates._queued_heads on the same memory: active
    bytes set or not, ends empty, in range, past the slabs (damaged) or mixed, and any bytes
    in the descriptors they name: the same heads and the same empties."""
    publish(pool, {"t": 8})
    used = pool.deques_used()
    assert used >= len(deques)
    layout, buf = pool.layout, pool.segment.buf
    buf[layout.batch_at(0) : layout.batch_at(0) + len(descriptors)] = descriptors
    for deque_id, (active, first, last) in enumerate(deques):
        buf[layout.active_at + deque_id] = active
        pool.segment.store_u64(layout.deque_at(deque_id) + D_ENDS, first | last << 32)
    fast = fastpath.fast_path_for(pool, for_sends=False)
    assert fast is not None
    try:
        c_heads = fast.queued_heads(used)
    finally:
        fast.close()
    assert c_heads == PartitionStates(pool, lambda _: None)._queued_heads(used)
    for deque_id in range(len(deques)):  # (the pool's fixture destroys it: leave it sound)
        buf[layout.active_at + deque_id] = 0
        pool.segment.store_u64(layout.deque_at(deque_id) + D_ENDS, NO_BATCH | NO_BATCH << 32)


def test_queued_heads_refuses_a_count_past_the_map(pool: SharedPool) -> None:
    fast = fastpath.fast_path_for(pool, for_sends=False)
    if fast is None:
        pytest.skip("C fast path not built")
    try:
        with pytest.raises(ValueError, match="out of range"):
            fast.queued_heads(pool.layout.size)
        with pytest.raises(ValueError, match="out of range"):
            fast.queued_heads(-1)
    finally:
        fast.close()
