"""The drain and the reclaim of a dead process's allocation, interleaved so that each would
hold what the other waits for under the old lock order (drain: stripe then pool; reclaim:
pool then stripe). Made to happen deterministically: the drain is held at its
``drain.after_shrink`` point with the stripe taken, and let go only once the reclaim waits
for that stripe."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable

import pytest

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm import faultpoints
from shmkafka.shm.config import SLAB_SIZE
from shmkafka.shm.layout import PENDING, S_PENDING
from tests.appending import append
from tests.conftest import SMALL, publish

BOUND_S = 10.0
# batches of up to 4 slabs
CONFIG = dataclasses.replace(
    SMALL, batch_size=4 * SLAB_SIZE, buffer_memory=32 * SLAB_SIZE, max_request_size=4 * SLAB_SIZE
)


def _die_with_a_pending_allocation(pool_name: str, first_slab: int) -> None:
    """A process that attached, recorded an allocation at ``first_slab`` and died."""
    pool = SharedPool.open(pool_name, CONFIG)
    PENDING.pack_into(pool.segment.buf, pool.layout.slot_at(pool.slot) + S_PENDING, first_slab, 1)
    os._exit(0)


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {BOUND_S} s: {what}"
        time.sleep(0.001)


def test_a_drain_and_a_reclaim_on_one_stripe_both_finish(
    pool_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = SharedPool.open(pool_name, CONFIG)
    reclaimer = SharedPool.open(pool_name, CONFIG)
    try:
        publish(sender, {"t": 9})
        entries = sender.directory.snapshot().topics["t"]
        stripe_of = sender.layout.stripe_lock
        drained, other = next(
            (a.deque_id, b.deque_id)
            for a in entries
            for b in entries
            if a.deque_id != b.deque_id and stripe_of(a.deque_id) == stripe_of(b.deque_id)
        )
        stripe = stripe_of(drained)
        acc = RecordAccumulator(sender, max_block_ms=100, fast_path=False)
        sender.deques.set_run_hint(drained, 4)  # a 4-slab batch, one filled: a tail to free
        by_deque = {e.deque_id: p for p, e in enumerate(entries)}
        append(acc, "t", by_deque[drained], 1, None, b"v", now_ms=1)
        open_batch = append(acc, "t", by_deque[other], 1, None, b"v", now_ms=1).batch_id
        # the dead process's allocation names the OPEN batch of a deque on the same stripe
        child = mp.get_context("fork").Process(
            target=_die_with_a_pending_allocation, args=(pool_name, open_batch)
        )
        child.start()
        child.join(BOUND_S)
        assert child.exitcode == 0
        free_before = sender.buffers.free_slabs()

        shrunk, go = threading.Event(), threading.Event()
        real_reached = faultpoints.reached

        def hold_at_shrink(point: str) -> None:
            if point == "drain.after_shrink":
                shrunk.set()
                assert go.wait(BOUND_S)
            real_reached(point)

        monkeypatch.setattr(faultpoints, "reached", hold_at_shrink)
        errors: list[BaseException] = []
        results: dict[str, object] = {}

        def run(name: str, work: Callable[[], object]) -> None:
            try:
                results[name] = work()
            except BaseException as exc:  # noqa: BLE001 (reported by the test)
                errors.append(exc)

        drain = threading.Thread(target=run, args=("drain", lambda: acc.drain([drained], 1 << 20)))
        drain.start()
        assert shrunk.wait(BOUND_S), "the drain never reached its shrink"
        reclaim = threading.Thread(
            target=run, args=("reclaim", lambda: reclaimer.reclaim_dead(timeout=5))
        )
        reclaim.start()
        intent = reclaimer.layout.intent_at(reclaimer.slot, stripe)
        _until(lambda: bool(reclaimer.segment.buf[intent]) or bool(errors), "the reclaim waits")
        go.set()
        drain.join(BOUND_S)
        reclaim.join(BOUND_S)
        assert not drain.is_alive() and not reclaim.is_alive(), "a deadlock: both still wait"
        assert errors == []
        assert results["reclaim"] == 1
        (batch,) = results["drain"]  # type: ignore[misc]
        assert batch.info.slab_count == 1
        # the drained batch's 3 unfilled slabs are free again; the OPEN batch kept its own
        assert sender.buffers.free_slabs() == free_before + 3
        assert reclaimer.batches.read(open_batch).state != 0
        assert [s for s, _, _ in sender.slots.active()] == sorted([sender.slot, reclaimer.slot])
    finally:
        reclaimer.detach()
        sender.destroy()
