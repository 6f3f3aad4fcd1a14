"""The Sender's posting of a result to its appenders' rings: ``FastAppend.post_result`` (C)
and its twin ``CompletionRings.post_to`` (Python), each on its own pool made alike, at the
edges of a ring's room, the slots' high mark and the appender set. Both must post to the
same slots, name the same full ones, and leave the same bytes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmkafka.pool import fastpath
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.config import SLAB_SIZE, PoolConfig
from shmkafka.shm.layout import H_SLOTS_HIGH, RING_ENTRY, S_RING_HEAD, S_RING_TAIL, U64
from shmkafka.shm.rings import Completion, SenderView, ring_entry
from tests.pool.twin_pools import segment_bytes, twin_pools

pytestmark = pytest.mark.skipif(fastpath.FastAppend is None, reason="C fast path not built")

CONFIG = PoolConfig(buffer_memory=16 * SLAB_SIZE, max_topics=2, max_partitions=4,
                    max_processes=12, lock_stripes=2)  # fmt: skip
CAPACITY = 16  # (a ring holds min(num_slabs, RING_CAP) entries)
ENTRY = ring_entry(Completion(5, 2, 1_000, -1, 7, 0, 0, 3, SenderView(2, 1, 4, 3)))


@pytest.fixture
def pools() -> Iterator[tuple[SharedPool, SharedPool]]:
    yield from twin_pools("post", CONFIG)


def _indexes(pool: SharedPool, slot: int) -> tuple[int, int]:
    at = pool.layout.slot_at(slot)
    head = U64.unpack_from(pool.segment.buf, at + S_RING_HEAD)[0]
    return head, U64.unpack_from(pool.segment.buf, at + S_RING_TAIL)[0]


def _set_ring(pool: SharedPool, slot: int, head: int, tail: int) -> None:
    at = pool.layout.slot_at(slot)
    pool.segment.store_u64(at + S_RING_HEAD, head)
    pool.segment.store_u64(at + S_RING_TAIL, tail)


def _post_both(
    pools: tuple[SharedPool, SharedPool], appenders: set[int], high: int,
    rings: dict[int, tuple[int, int]],
) -> tuple[list[int], list[int]]:  # fmt: skip
    """The same post on both pools (C on the first): its result, checked equal."""
    raw = sum(1 << s for s in appenders).to_bytes(pools[0].layout.appenders_size, "little")
    results = []
    for pool in pools:
        pool.segment.store_u32(H_SLOTS_HIGH, high)
        for slot, (head, tail) in rings.items():
            _set_ring(pool, slot, head, tail)
    fast = fastpath.fast_path_for(pools[0])
    assert fast is not None
    try:
        results.append(fast.post_result(raw, ENTRY))
    finally:
        fast.close()
    results.append(pools[1].rings.post_to(raw, ENTRY))
    assert results[0] == results[1]
    assert segment_bytes(pools[0]) == segment_bytes(pools[1])
    return results[0]


@pytest.mark.parametrize(
    ("head", "tail", "posted"),
    [(1_007, 1_007, True), (1_007, 1_007 + CAPACITY - 1, True), (1_007, 1_007 + CAPACITY, False),
     (1_007, 1_007 + CAPACITY + 1, False), (1_007, 1_003, True), (0, 1 << 63, False),
     ((1 << 63) + 10, 0, True), ((1 << 64) - 4, 1, True)],
    ids=["empty", "one-left", "full", "past-full", "head-past-tail", "tail-2**63-past",
         "head-2**63-past", "tail-wrapped"],
)  # fmt: skip
def test_a_ring_takes_an_entry_while_it_has_room(
    pools: tuple[SharedPool, SharedPool], head: int, tail: int, posted: bool
) -> None:
    """A ring is full when tail - head, as unbounded ints, is at least its capacity: a
    tail 2**63 past the head is full, a head past the tail (damaged, or a tail that
    wrapped past 2**64) has room. (1_007: an index that wraps, the entry at tail mod
    capacity.)"""
    done, full = _post_both(pools, {3}, 12, {3: (head, tail)})
    assert (done, full) == (([3], []) if posted else ([], [3]))
    assert _indexes(pools[0], 3) == (head, (tail + 1) % (1 << 64) if posted else tail)
    if posted:
        at = pools[0].layout.ring_entry_at(3, tail)
        assert bytes(pools[0].segment.buf[at : at + RING_ENTRY.size]) == ENTRY
        if 0 <= tail - head < CAPACITY:  # (a damaged ring is written, not read)
            assert pools[0].rings.poll(3)[-1].base_offset == 1_000


def test_every_appender_below_the_high_mark_lowest_first(
    pools: tuple[SharedPool, SharedPool],
) -> None:
    appenders = {0, 2, 7, 8, 9, 11}
    rings = dict.fromkeys(range(12), (0, 0)) | {8: (0, CAPACITY)}  # (8's ring is full)
    done, full = _post_both(pools, appenders, 10, rings)
    assert (done, full) == ([0, 2, 7, 9], [8])  # (11: at or past the high mark of 10)
    for slot in range(12):
        expected = 1 if slot in done else (CAPACITY if slot == 8 else 0)
        assert _indexes(pools[0], slot)[1] == expected


def test_the_high_mark_is_bounded_by_max_processes(pools: tuple[SharedPool, SharedPool]) -> None:
    # (bits 12..63 of the appender set's 8 bytes name no slot: max_processes is 12)
    done, full = _post_both(pools, {1, 11, 12, 40, 63}, 10**6, {1: (0, 0), 11: (0, 0)})
    assert (done, full) == ([1, 11], [])


def test_bad_arguments_are_refused_before_anything_is_written(
    pools: tuple[SharedPool, SharedPool],
) -> None:
    fast = fastpath.fast_path_for(pools[0])
    assert fast is not None
    try:
        before = bytes(pools[0].segment.buf[: pools[0].layout.size])
        raw = bytes(pools[0].layout.appenders_size)
        with pytest.raises(ValueError, match="'entry' is 3 bytes"):
            fast.post_result(raw, b"abc")
        with pytest.raises(ValueError, match="'appenders' is 1 bytes"):
            fast.post_result(b"\x01", ENTRY)
        with pytest.raises(TypeError, match="must be bytes"):
            fast.post_result(bytearray(raw), ENTRY)  # type: ignore[arg-type]
        assert bytes(pools[0].segment.buf[: pools[0].layout.size]) == before
    finally:
        fast.close()


# ---------------------------------------------------------------------- the reader's side

U32, I64, I32 = (
    st.integers(0, 2**32 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-1, 2**31 - 1),
)
COMPLETIONS = st.builds(
    Completion, U32, U32, I64, I64, I64, st.integers(-(2**15), 2**15 - 1), U32, U32,
    st.one_of(st.none(), st.builds(SenderView, st.integers(1, 0xFFFF), st.integers(-1, 2**31 - 1),
                                   I32, I32)),
)  # fmt: skip


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    completions=st.lists(COMPLETIONS, max_size=CAPACITY),
    head=st.sampled_from([0, 5, CAPACITY - 1, 1_007, (1 << 64) - 3 * CAPACITY]),
)
def test_take_results_reads_what_poll_reads(
    pools: tuple[SharedPool, SharedPool], completions: list[Completion], head: int
) -> None:
    """The ring read in C (take_results) and in Python (poll), each on its own pool with the
    same entries posted (a run that wraps the ring's end too): the same results, of the same
    types, every field at its extremes, and the same bytes after (the head moved alike)."""
    for pool in pools:
        _set_ring(pool, 3, head, head)
        for done in completions:
            pool.rings.post(3, done)
    fast = fastpath.fast_path_for(pools[0], for_sends=False)
    assert fast is not None
    try:
        taken = fast.take_results(3, Completion, SenderView)
    finally:
        fast.close()
    polled = pools[1].rings.poll(3)
    assert taken == polled == completions
    assert [type(c.view) for c in taken] == [type(c.view) for c in polled]
    assert [hash(c) for c in taken] == [hash(c) for c in polled]  # (3.14 caches a tuple's)
    assert segment_bytes(pools[0]) == segment_bytes(pools[1])


@pytest.mark.parametrize(
    ("head", "tail"), [(10, 10 + CAPACITY + 1), (10, 3), (0, 1 << 63)],
    ids=["past-full", "head-past-tail", "tail-2**63-past"],
)  # fmt: skip
def test_a_damaged_ring_is_left_to_poll(
    pools: tuple[SharedPool, SharedPool], head: int, tail: int
) -> None:
    """take_results reads nothing of a ring whose indexes the Sender could not have left
    (None, the ring untouched): poll, its twin, names it and skips it."""
    _set_ring(pools[0], 3, head, tail)
    before = segment_bytes(pools[0])
    fast = fastpath.fast_path_for(pools[0], for_sends=False)
    assert fast is not None
    try:
        assert fast.take_results(3, Completion, SenderView) is None
        assert segment_bytes(pools[0]) == before
        assert pools[0].rings.poll(3) == []
        assert _indexes(pools[0], 3) == (tail, tail)
        with pytest.raises(ValueError, match="slot 12 is out of range"):
            fast.take_results(12, Completion, SenderView)
        with pytest.raises(TypeError, match="subclass of tuple"):
            fast.take_results(3, dict, SenderView)  # type: ignore[arg-type]
    finally:
        fast.close()


def test_the_ring_entry_is_the_format_take_results_reads() -> None:
    """_append_post.c reads each field at a fixed place: this format's."""
    assert RING_ENTRY.format == "<IIqqqhHIIiii4x" and RING_ENTRY.size == 60
