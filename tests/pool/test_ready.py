"""ready() and drain() with an injected clock."""

from __future__ import annotations

import dataclasses

import pytest

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.partition_states import PartitionState
from shmkafka.pool.ready import (
    EXHAUSTED_LINGER_MS,
    Drainer,
    ReadyContext,
    ready,
    retry_backoff,
)
from shmkafka.pool.shared_pool import SharedPool
from tests.appending import append
from tests.conftest import publish

CTX = ReadyContext(linger_ms=10, retry_backoff_ms=100, retry_backoff_max_ms=1000)


def state(**changes: object) -> PartitionState:
    base = PartitionState(
        deque_id=0, topic="t", partition=0, leader=1, queued=1, first_batch_id=0,
        first_size=100, first_full=False, created_ms=1000, last_append_ms=1000, attempts=0,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_linger() -> None:
    s = state()
    assert ready([s], {1}, CTX, 1009).ready_nodes == frozenset()
    assert ready([s], {1}, CTX, 1009).next_ready_check_delay_ms == 1
    assert ready([s], {1}, CTX, 1010).ready_nodes == {1}


def test_full_batch_is_ready_at_once() -> None:
    assert ready([state(first_full=True)], {1}, CTX, 1000).ready_nodes == {1}


@pytest.mark.parametrize("flag", ["flushing", "closing"])
def test_pool_wide_conditions_make_everything_sendable(flag: str) -> None:
    ctx = dataclasses.replace(CTX, **{flag: True})
    result = ready([state()], {1}, ctx, 1000)
    assert result.ready_nodes == {1} and result.sendable == {0}


def test_processes_waiting_for_memory_cap_the_linger() -> None:
    long = dataclasses.replace(CTX, linger_ms=1000)
    exhausted = dataclasses.replace(long, exhausted=True)
    assert ready([state()], {1}, long, 1000 + EXHAUSTED_LINGER_MS).ready_nodes == frozenset()
    early = ready([state()], {1}, exhausted, 1000 + EXHAUSTED_LINGER_MS - 1)
    assert early.ready_nodes == frozenset()
    assert early.next_ready_check_delay_ms == 1
    assert ready([state()], {1}, exhausted, 1000 + EXHAUSTED_LINGER_MS).sendable == {0}


def test_only_the_sendable_partitions_of_a_ready_node_are_named() -> None:
    full = state(deque_id=3, first_full=True)
    young = state(deque_id=4, partition=1)
    result = ready([full, young], {1}, CTX, 1001)
    assert result.ready_nodes == {1} and result.sendable == {3}


def test_a_batch_past_half_its_linger_goes_along_with_its_ready_node() -> None:
    full = state(deque_id=3, first_full=True)
    half = state(deque_id=4, partition=1, created_ms=1000)  # lingers out at 1010
    younger = state(deque_id=5, partition=2, created_ms=1001)
    elsewhere = state(deque_id=6, partition=3, leader=2, created_ms=998)  # node 2: not ready
    result = ready([full, half, younger, elsewhere], {1, 2}, CTX, 1005)
    assert result.ready_nodes == {1} and result.sendable == {3, 4} and result.along == {4}
    # alone, it makes no node ready, and the wait is for its linger
    alone = ready([half], {1}, CTX, 1005)
    assert alone.ready_nodes == frozenset() and alone.sendable == frozenset()
    assert alone.next_ready_check_delay_ms == 5


def test_a_muted_or_backing_off_batch_does_not_go_along() -> None:
    full = state(deque_id=3, first_full=True)
    muted = state(deque_id=4, partition=1, created_ms=1000)
    retried = state(deque_id=5, partition=2, attempts=1, last_append_ms=1000)  # backs off
    result = ready([full, muted, retried], {1}, CTX, 1009, lambda s: s is muted)
    assert result.sendable == {3}


def test_retry_backs_off_exponentially() -> None:
    assert [retry_backoff(a, 100, 1000) for a in (1, 2, 3, 4, 5)] == [100, 200, 400, 800, 1000]
    retried = state(attempts=2, last_append_ms=5000, first_full=True)
    early = ready([retried], {1}, CTX, 5199)
    assert early.ready_nodes == frozenset() and early.next_ready_check_delay_ms == 1
    assert ready([retried], {1}, CTX, 5200).ready_nodes == {1}


def test_muted_partition_is_not_ready() -> None:
    muted = state(first_full=True)
    assert ready([muted], {1}, CTX, 2000, lambda s: s is muted).ready_nodes == frozenset()


def test_a_muted_partition_does_not_shorten_the_wait() -> None:
    """A muted partition waits for an answer (which ends the Sender's poll), not for time:
    it must not make every round return at once while it waits."""
    muted, lingering = state(first_full=True), state(deque_id=1, created_ms=1995)
    result = ready([muted, lingering], {1}, CTX, 2000, lambda s: s is muted)
    assert result.ready_nodes == frozenset()
    assert result.next_ready_check_delay_ms == 5  # the lingering one's, not 0


def test_unknown_leader_asks_for_metadata() -> None:
    result = ready([state(leader=-1, topic="a"), state(leader=9, topic="b")], {1}, CTX, 5000)
    assert result.ready_nodes == frozenset()
    assert result.unknown_leader_topics == {"a", "b"}


def test_drain_rotates_so_no_partition_starves(pool: SharedPool) -> None:
    """One node, eight partitions, a request that fits two batches: every partition gets
    its turn within four rounds."""
    publish(pool, {"t": 8})
    acc = RecordAccumulator(pool, max_block_ms=100)
    drainer = Drainer()
    seen: list[int] = []
    refill = list(range(8))
    for round_ in range(4):
        for p in refill:  # every partition holds one batch of one record
            append(acc, "t", p, 1, b"k", bytes(300), now_ms=0)
        states = [dataclasses.replace(s, leader=1) for s in acc.partition_states()]
        drained = drainer.drain(acc, states, [1], 2 * 380, round_, CTX)
        assert len(drained[1]) == 2  # at most one batch per partition, max_request_size kept
        assert len({b.partition for b in drained[1]}) == 2
        seen += [b.partition for b in drained[1]]
        refill = [b.partition for b in drained[1]]
        for batch in drained[1]:
            acc.complete(batch)
    assert sorted(seen) == list(range(8))


def test_one_oversized_batch_still_goes(pool: SharedPool) -> None:
    publish(pool, {"t": 2})
    acc = RecordAccumulator(pool, max_block_ms=100)
    append(acc, "t", 0, 1, b"k", bytes(900), now_ms=0)
    append(acc, "t", 1, 1, b"k", bytes(900), now_ms=0)
    states = [dataclasses.replace(s, leader=1) for s in acc.partition_states()]
    drained = Drainer().drain(acc, states, [1], 100, 0, CTX)
    assert len(drained[1]) == 1


def test_drain_skips_partitions_that_cannot_be_drained(pool: SharedPool) -> None:
    publish(pool, {"t": 2})
    acc = RecordAccumulator(pool, max_block_ms=100)
    append(acc, "t", 0, 1, b"k", b"v", now_ms=0)
    append(acc, "t", 1, 1, b"k", b"v", now_ms=0)
    states = [dataclasses.replace(s, leader=1) for s in acc.partition_states()]
    drained = Drainer().drain(acc, states, [1], 1 << 20, 0, CTX, lambda s: s.partition == 1)
    assert [b.partition for b in drained[1]] == [1]


def test_a_batch_going_along_never_takes_a_due_ones_room(pool: SharedPool) -> None:
    """A request with room for one batch: the due partition's goes, though the rotation
    reaches the half-lingered one first, which waits for the next request."""
    publish(pool, {"t": 2})
    acc = RecordAccumulator(pool, max_block_ms=100)
    append(acc, "t", 0, 1, b"k", bytes(300), now_ms=0)
    append(acc, "t", 1, 1, b"k", bytes(300), now_ms=0)
    states = [dataclasses.replace(s, leader=1) for s in acc.partition_states()]
    half = next(s.deque_id for s in states if s.partition == 0)
    assert half < next(s.deque_id for s in states if s.partition == 1)  # (first in rotation)
    drained = Drainer().drain(acc, states, [1], 380, 0, CTX, along=frozenset({half}))
    assert [b.partition for b in drained[1]] == [1]
