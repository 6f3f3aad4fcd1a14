from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from shmkafka.pool import bufferpool
from shmkafka.pool.bufferpool import SlabRun
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.errors import BufferExhaustedError, RecordTooLargeError

SLABS = 64  # SMALL: 64 KiB of 1 KiB slabs


def _take_all(pool: SharedPool) -> list[SlabRun]:
    runs = []
    for _ in range(SLABS):
        run = pool.buffers.allocate(1000, 100)
        pool.buffers.commit(run)
        runs.append(run)
    return runs


def test_exhaustion_blocks_for_max_block_ms_then_raises(pool: SharedPool) -> None:
    runs = _take_all(pool)
    start = time.monotonic()
    with pytest.raises(BufferExhaustedError, match="within 300 ms"):
        pool.buffers.allocate(1000, 300)
    waited = time.monotonic() - start
    assert 0.29 <= waited < 1.5
    pool.buffers.deallocate(runs[0])
    run = pool.buffers.allocate(1000, 300)
    assert run == runs[0]
    pool.buffers.commit(run)


def test_large_records_get_contiguous_runs(pool: SharedPool) -> None:
    run = pool.buffers.allocate(5000, 100)
    pool.buffers.commit(run)
    assert run.count == 5
    assert pool.buffers.used_map()[run.first : run.first + 5] == b"\x01" * 5
    assert pool.buffers.free_slabs() == SLABS - 5


def test_fragmentation_blocks_a_large_run_until_neighbours_free(pool: SharedPool) -> None:
    runs = _take_all(pool)
    for run in runs[::2]:  # free every other slab: 32 free, none adjacent
        pool.buffers.deallocate(run)
    assert pool.buffers.free_slabs() == 32
    with pytest.raises(BufferExhaustedError):
        pool.buffers.allocate(2000, 50)
    pool.buffers.deallocate(runs[1])  # slabs 0, 1, 2 now free together
    big = pool.buffers.allocate(3000, 50)
    assert big == SlabRun(0, 3)
    pool.buffers.commit(big)


def test_too_large_fails_at_once(pool: SharedPool) -> None:
    start = time.monotonic()
    with pytest.raises(RecordTooLargeError):
        pool.buffers.allocate(64 * 1024 + 1, 5000)
    assert time.monotonic() - start < 0.1


def _waiter(name: str, order: mp.Queue, tag: int, ready: mp.Event) -> None:  # type: ignore[type-arg]
    pool = SharedPool.open(name)
    try:
        ready.set()
        run = pool.buffers.allocate(1000, 20_000)
        pool.buffers.commit(run)
        order.put((tag, run.first))
    finally:
        pool.detach()


def test_waiters_are_served_in_arrival_order(pool: SharedPool) -> None:
    runs = _take_all(pool)
    ctx = mp.get_context("fork")
    order = ctx.Queue()
    procs = []
    for tag in range(4):
        ready = ctx.Event()
        p = ctx.Process(target=_waiter, args=(pool.name, order, tag, ready))
        p.start()
        ready.wait(10)
        deadline = time.monotonic() + 10
        while pool.buffers.waiters() < tag + 1:  # tag is queued before the next one starts
            assert time.monotonic() < deadline
            time.sleep(0.005)
        procs.append(p)
    for run in runs[:4]:
        pool.buffers.deallocate(run)
        time.sleep(0.05)
    got = [order.get(timeout=10) for _ in range(4)]
    assert [tag for tag, _ in got] == [0, 1, 2, 3]
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    assert pool.buffers.waiters() == 0


def test_killed_waiter_leaks_nothing(pool: SharedPool) -> None:
    runs = _take_all(pool)
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    victim = ctx.Process(target=_waiter, args=(pool.name, ctx.Queue(), 0, ready))
    victim.start()
    ready.wait(10)
    while pool.buffers.waiters() < 1:
        time.sleep(0.005)
    os.kill(victim.pid or 0, signal.SIGKILL)
    victim.join(10)
    for run in runs:
        pool.buffers.deallocate(run)
    assert pool.reclaim_dead() == 1
    assert pool.buffers.free_slabs() == SLABS
    assert pool.buffers.waiters() == 0
    assert pool.check_invariants() == []
    again = pool.buffers.allocate(1000, 100)  # the dead waiter does not block the queue
    pool.buffers.commit(again)


def _wait_in_thread(pool: SharedPool, want: int, got: list[object]) -> threading.Thread:
    def run() -> None:
        try:
            run = pool.buffers.allocate(1000, 20_000, want)
            pool.buffers.commit(run)
            got.append(run)
        except Exception as exc:  # noqa: BLE001  (the test asserts on it)
            got.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 10
    while pool.buffers.waiters() < 1:
        assert time.monotonic() < deadline, "the allocation never queued"
        time.sleep(0.002)
    return thread


def _holding_out(
    pool: SharedPool, monkeypatch: pytest.MonkeyPatch, patience_s: float
) -> tuple[list[SlabRun], list[object], threading.Thread]:
    """Every slab taken, then an allocation wanting a run of 4 queued, with a crumb of one
    slab freed at once."""
    monkeypatch.setattr(bufferpool, "RUN_PATIENCE_S", patience_s)
    runs = _take_all(pool)
    got: list[object] = []
    thread = _wait_in_thread(pool, 4, got)
    pool.buffers.deallocate(runs[10])  # a crumb: it wakes the waiter
    return runs, got, thread


def test_a_waiter_holds_out_for_the_run_it_wants(
    pool: SharedPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, got, thread = _holding_out(pool, monkeypatch, 30.0)
    time.sleep(0.2)
    assert got == [] and pool.buffers.waiters() == 1  # (it let the crumb be)
    for run in runs[20:24]:
        pool.buffers.deallocate(run)
    thread.join(10)
    assert got == [SlabRun(20, 4)]
    assert pool.buffers.used_map()[10] == 0  # the crumb is still free


def test_a_waiter_takes_a_shorter_run_once_its_patience_is_over(
    pool: SharedPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = time.monotonic()
    _, got, thread = _holding_out(pool, monkeypatch, 0.3)
    thread.join(10)
    waited = time.monotonic() - start
    assert got == [SlabRun(10, 1)]
    assert 0.25 <= waited < 5  # (not before the patience, nor at max_block_ms)
