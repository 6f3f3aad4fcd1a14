from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import posix_ipc
import pytest

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.errors import LockTimeoutError
from shmkafka.shm.layout import FIRST_STRIPE_LOCK, POOL_LOCK
from shmkafka.shm.locks import ORPHAN_GRACE_S
from shmkafka.shm.segment import semaphore_name


def _hold_and_die(name: str, lock: int, how: str, held: mp.Event) -> None:  # type: ignore[type-arg]
    pool = SharedPool.open(name)
    if how == "orphan":
        # Die between taking the semaphore and recording ourselves as owner.
        pool.segment.buf[pool.layout.intent_at(pool.slot, lock)] = 1
        posix_ipc.Semaphore(semaphore_name(name, "l", lock)).acquire()
    else:
        pool.locks.acquire(lock)
    held.set()
    if how == "hold":
        time.sleep(60)
    os.kill(os.getpid(), signal.SIGKILL)


def _start(pool: SharedPool, lock: int, how: str) -> mp.Process:
    ctx = mp.get_context("fork")
    held = ctx.Event()
    p = ctx.Process(target=_hold_and_die, args=(pool.name, lock, how, held))
    p.start()
    assert held.wait(10)
    return p


@pytest.mark.parametrize("lock", [POOL_LOCK, FIRST_STRIPE_LOCK + 3])
def test_lock_of_a_dead_owner_is_recovered(pool: SharedPool, lock: int) -> None:
    p = _start(pool, lock, "die")
    p.join(10)
    start = time.monotonic()
    recovered = pool.locks.acquire(lock, timeout=10)
    assert recovered is True
    assert time.monotonic() - start < 1.0
    assert pool.locks.owner(lock)[1] == os.getpid()
    pool.locks.release(lock)
    assert pool.locks.value(lock) == 1
    assert pool.locks.acquire(lock, timeout=1) is False  # an ordinary lock again
    pool.locks.release(lock)
    pool.reclaim_dead()
    assert pool.check_invariants() == []


def test_holder_dead_before_recording_itself_is_recovered_after_the_grace(
    pool: SharedPool,
) -> None:
    lock = FIRST_STRIPE_LOCK
    p = _start(pool, lock, "orphan")
    p.join(10)
    start = time.monotonic()
    assert pool.locks.acquire(lock, timeout=10) is True
    waited = time.monotonic() - start
    assert ORPHAN_GRACE_S <= waited < ORPHAN_GRACE_S + 2
    pool.locks.release(lock)
    pool.reclaim_dead()
    assert pool.check_invariants() == []


def test_live_holder_times_out_instead_of_hanging(pool: SharedPool) -> None:
    p = _start(pool, POOL_LOCK, "hold")
    try:
        start = time.monotonic()
        with pytest.raises(LockTimeoutError, match="still held"):
            pool.locks.acquire(POOL_LOCK, timeout=0.5)
        assert time.monotonic() - start < 2
    finally:
        os.kill(p.pid or 0, signal.SIGKILL)
        p.join(10)
    assert pool.locks.acquire(POOL_LOCK, timeout=5) is True
    pool.locks.release(POOL_LOCK)
    pool.reclaim_dead()
