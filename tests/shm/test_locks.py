from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import posix_ipc
import pytest

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.errors import LockTimeoutError
from shmkafka.shm.layout import FIRST_STRIPE_LOCK, POOL_LOCK, TOKEN_BYTE
from shmkafka.shm.locks import ORPHAN_GRACE_S, KernelLock
from shmkafka.shm.segment import semaphore_name
from tests.forking import held_by_another_thread, in_child, libc_fork, releasing


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


def _hold_kernel_lock(name: str, byte: int, held: mp.Event) -> None:  # type: ignore[type-arg]
    pool = SharedPool.open(name)
    with KernelLock.for_segment(pool.segment, byte):
        held.set()
        time.sleep(60)


def test_a_kernel_lock_held_by_a_live_process_times_out_instead_of_hanging(
    pool: SharedPool,
) -> None:
    ctx = mp.get_context("fork")
    held = ctx.Event()
    p = ctx.Process(target=_hold_kernel_lock, args=(pool.name, TOKEN_BYTE, held))
    p.start()
    try:
        assert held.wait(10)
        lock = KernelLock(pool.segment.fd, TOKEN_BYTE, timeout=0.3)
        start = time.monotonic()
        with pytest.raises(LockTimeoutError, match=r"token_board lock .* by another process"):
            lock.__enter__()
        assert 0.25 < time.monotonic() - start < 2
    finally:
        os.kill(p.pid or 0, signal.SIGKILL)
        p.join(10)
    with KernelLock(pool.segment.fd, TOKEN_BYTE, timeout=5):  # the kernel freed it
        pass


def test_a_kernel_lock_held_by_another_thread_times_out_instead_of_hanging(
    pool: SharedPool,
) -> None:
    held = KernelLock.for_segment(pool.segment, TOKEN_BYTE)
    with (
        held_by_another_thread(held),
        pytest.raises(LockTimeoutError, match="by another thread of this process"),
    ):
        KernelLock(pool.segment.fd, TOKEN_BYTE, timeout=0.2).__enter__()


@pytest.mark.parametrize("hooks", ["os.fork", "libc fork"])
def test_a_child_forked_while_a_thread_holds_a_kernel_lock_can_take_it(
    pool: SharedPool, hooks: str
) -> None:
    """The thread lock that serialises a process's threads on a kernel lock is the child's
    own: the parent's copy, taken by a thread that does not exist in the child, stays
    taken there for good (with Python's at-fork hooks run or not)."""

    def child() -> int:
        with KernelLock.for_segment(pool.segment, TOKEN_BYTE):
            return 0

    fork = os.fork if hooks == "os.fork" else libc_fork
    with held_by_another_thread(KernelLock.for_segment(pool.segment, TOKEN_BYTE)) as release:
        # (ChildHung: it waited on the parent's copy; the kernel lets it take the lock once
        # the parent's hold ends)
        assert in_child(releasing(fork, release), child, 10) == 0
