from __future__ import annotations

import logging
import multiprocessing as mp
import time
from typing import Any

import pytest

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.layout import S_RING_TAIL, U64
from shmkafka.shm.rings import Completion, SenderView
from tests.appending import append
from tests.conftest import publish


def test_post_and_poll_in_order_until_full(pool: SharedPool) -> None:
    rings = pool.rings
    capacity = pool.layout.ring_capacity
    entries = [Completion(i, 7, 100 + i, -1, 0, 0) for i in range(capacity)]
    assert all(rings.post(pool.slot, c) for c in entries)
    assert rings.post(pool.slot, Completion(0, 8, 0, -1, 0, 6)) is False  # full: kept back
    assert rings.pending(pool.slot) == capacity
    assert rings.poll(pool.slot) == entries
    assert rings.poll(pool.slot) == []
    assert rings.post(pool.slot, Completion(1, 9, -1, 123, 5, 19))
    assert rings.poll(pool.slot) == [Completion(1, 9, -1, 123, 5, 19)]


def test_a_poll_across_the_end_of_the_ring_keeps_the_order(pool: SharedPool) -> None:
    """Entries that wrap past the ring's end are read in two runs, still oldest first."""
    rings, capacity = pool.rings, pool.layout.ring_capacity
    first = [Completion(i, 1, i, -1, 0, 0) for i in range(capacity - 2)]
    assert all(rings.post(pool.slot, c) for c in first)
    assert rings.poll(pool.slot) == first  # (head and tail now two before the end)
    view = SenderView(2, 1, 3, 4)
    wrapping = [Completion(i, 2, 1000 + i, -1, 0, 0, 0, 9, view) for i in range(5)]
    assert all(rings.post(pool.slot, c) for c in wrapping)
    assert rings.poll(pool.slot) == wrapping
    assert rings.pending(pool.slot) == 0


@pytest.mark.parametrize("past", [1, 1 << 40])
def test_a_ring_with_damaged_indexes_is_skipped_not_read_without_bound(
    pool: SharedPool, caplog: pytest.LogCaptureFixture, past: int
) -> None:
    """A tail more than the ring's capacity past the head (by one, or by 2**40 entries:
    reading them would never end) is skipped with an error; the ring then works again."""
    rings, at = pool.rings, pool.layout.slot_at(pool.slot)
    assert rings.post(pool.slot, Completion(1, 1, 0, -1, 0, 0))
    tail = U64.unpack_from(pool.segment.buf, at + S_RING_TAIL)[0]
    pool.segment.store_u64(at + S_RING_TAIL, tail + pool.layout.ring_capacity + past - 1)
    with caplog.at_level(logging.ERROR, logger="shmkafka.producer"):
        assert rings.poll(pool.slot) == []
    assert "damaged indexes" in caplog.text
    assert rings.pending(pool.slot) == 0
    assert rings.post(pool.slot, Completion(2, 1, 5, -1, 0, 0))
    assert rings.poll(pool.slot) == [Completion(2, 1, 5, -1, 0, 0)]


def test_a_completion_carries_the_senders_view(pool: SharedPool) -> None:
    view = SenderView(attempts=3, node_id=1002, queued_ms=41, request_ms=7)
    sent = Completion(4, 2, 500, -1, 0, 0, 10, 19, view)
    assert pool.rings.post(pool.slot, sent)
    assert pool.rings.poll(pool.slot) == [sent]
    huge = Completion(4, 3, 500, -1, 0, 0, view=SenderView(70_000, 1, 2**40, -5))
    assert pool.rings.post(pool.slot, huge)  # (clamped to the entry's fields, not wrapped)
    (got,) = pool.rings.poll(pool.slot)
    assert got.view == SenderView(0xFFFF, 1, 0x7FFFFFFF, -1)


def _append_then_wait(name: str, ready: Any, out: Any) -> None:
    pool = SharedPool.open(name)
    try:
        acc = RecordAccumulator(pool)
        result = append(acc, "t", 0, 1, b"k", b"from child", now_ms=0)
        ready.put((pool.slot, result.batch_id, result.generation))
        deadline = time.monotonic() + 10
        got: list[Completion] = []
        while not got and time.monotonic() < deadline:
            pool.rings.wait(pool.slot, 0.5)
            got = pool.rings.poll(pool.slot)
        out.put(got)
    finally:
        pool.detach()


def test_sender_posts_to_every_appender_and_wakes_them(pool: SharedPool) -> None:
    publish(pool, {"t": 1})
    ctx = mp.get_context("fork")
    ready, out = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_append_then_wait, args=(pool.name, ready, out))
    child.start()
    child_slot, batch_id, generation = ready.get(timeout=10)
    acc = RecordAccumulator(pool)
    mine = append(acc, "t", 0, 2, b"k", b"from parent", now_ms=0)
    assert (mine.batch_id, mine.generation) == (batch_id, generation)  # one shared batch
    (batch,) = acc.drain([s.deque_id for s in acc.partition_states()], 1 << 20)
    assert batch.info.appenders == {child_slot, pool.slot}
    done = acc.completion_for(batch, base_offset=500, log_append_time=-1, log_start_offset=0)
    assert acc.post_completion(batch, done) == []
    acc.complete(batch)
    assert out.get(timeout=10) == [done]
    child.join(10)
    assert child.exitcode == 0
    assert pool.rings.poll(pool.slot) == [done]
    assert pool.check_invariants() == []


def test_a_wait_takes_every_wake_posted_before_it(pool: SharedPool) -> None:
    """The Sender's rounds that posted while the process was not reading cost one wake:
    the ring is read after it, up to a tail every one of those posts had published."""
    rings = pool.rings
    first, second = Completion(1, 1, 0, -1, -1, 0), Completion(2, 1, 0, -1, -1, 0)
    for done in (first, second):  # (two rounds: each posts, then wakes)
        assert rings.post(pool.slot, done)
        rings.wake(pool.slot)
    rings.wake(pool.slot)  # (and a wake of another kind: an answer to a transaction call)
    assert rings.wait(pool.slot, 1.0)
    assert rings.poll(pool.slot) == [first, second]
    assert not rings.wait(pool.slot, 0.05)  # no wake left to find an empty ring
    assert rings.post(pool.slot, first)
    rings.wake(pool.slot)
    assert rings.wait(pool.slot, 1.0)  # a post after the wait is its own wake
    assert rings.poll(pool.slot) == [first]
