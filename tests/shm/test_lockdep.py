"""The lock validator: the one order, checked at each take in Python and in C."""

from __future__ import annotations

import threading

import pytest

from shmkafka.pool import fastpath
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm import lockdep
from shmkafka.shm.errors import LockOrderError
from shmkafka.shm.layout import DIRECTORY_LOCK, FIRST_STRIPE_LOCK, POOL_LOCK, SLOT_TABLE_BYTE
from shmkafka.shm.locks import KernelLock
from tests.conftest import publish


@pytest.fixture(autouse=True)
def lockdep_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lockdep, "ENABLED", True)
    monkeypatch.setattr(lockdep, "REPORT", "")
    assert lockdep.holding() == []


def test_the_order_lists_every_class_once() -> None:
    assert sorted(lockdep.ORDER) == sorted(set(lockdep.ORDER))
    assert set(lockdep.KERNEL_CLASSES.values()) | {"directory", "stripe", "pool"} == set(
        lockdep.ORDER
    )


def test_takes_in_order_pass_and_are_forgotten_when_released(pool: SharedPool) -> None:
    stripe = FIRST_STRIPE_LOCK + 1
    with (
        pool.locks.held(DIRECTORY_LOCK),
        pool.locks.held(stripe),
        pool.locks.held(stripe + 1),
        pool.locks.held(POOL_LOCK),
    ):
        assert lockdep.holding() == [
            ("directory", DIRECTORY_LOCK),
            ("stripe", stripe),
            ("stripe", stripe + 1),
            ("pool", POOL_LOCK),
        ]
    assert lockdep.holding() == []


def test_a_take_against_the_order_names_both_locks_and_both_stacks(pool: SharedPool) -> None:
    stripe = FIRST_STRIPE_LOCK + 2
    with pool.locks.held(POOL_LOCK), pytest.raises(LockOrderError) as raised:
        try:
            pool.locks.acquire(stripe)
        finally:
            assert lockdep.holding() == [("pool", POOL_LOCK)]
    error = raised.value
    assert (error.held, error.taking) == (("pool", POOL_LOCK), ("stripe", stripe))
    message = str(error)
    assert f"taking stripe lock {stripe} while holding pool lock 0" in message
    # both stacks: where the pool lock was taken and where the stripe is asked for
    assert message.count("test_a_take_against_the_order_names_both_locks") == 2
    assert pool.locks.value(stripe) == 1, "refused before it was taken"


def test_stripes_nest_in_ascending_order_only(pool: SharedPool) -> None:
    high = FIRST_STRIPE_LOCK + 3
    refused = pytest.raises(LockOrderError, match="taking stripe lock 2 while holding stripe")
    with pool.locks.held(high), refused:
        pool.locks.acquire(FIRST_STRIPE_LOCK)


def test_kernel_locks_have_their_place(pool: SharedPool) -> None:
    with pool.locks.held(DIRECTORY_LOCK):
        with pytest.raises(LockOrderError, match="taking slot_table lock"), pool.slots.lock():
            pass
        lock = KernelLock.for_segment(pool.segment, SLOT_TABLE_BYTE)
        with pytest.raises(LockOrderError):
            lock.try_acquire()  # a try-lock is held to the same order
    with pool.slots.lock(), pool.locks.held(DIRECTORY_LOCK):
        assert lockdep.holding() == [("slot_table", SLOT_TABLE_BYTE), ("directory", 1)]


def test_each_thread_holds_its_own() -> None:
    lockdep.acquiring("pool", POOL_LOCK)
    seen: list[list[tuple[str, int]]] = []
    other = threading.Thread(target=lambda: seen.append(lockdep.holding()))
    other.start()
    other.join(5)
    lockdep.released("pool", POOL_LOCK)
    assert seen == [[]]


def test_the_report_file_gets_a_violation_seen_in_any_process(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = f"{tmp_path}/lockdep.txt"
    monkeypatch.setattr(lockdep, "REPORT", report)
    lockdep.acquiring("recovery", 0)
    with pytest.raises(LockOrderError):
        lockdep.acquiring("pool", POOL_LOCK)
    lockdep.released("recovery", 0)
    with open(report, encoding="utf-8") as text:
        assert "taking pool lock 0 while holding recovery lock 0" in text.read()


def test_the_c_append_reports_its_takes_with_its_call_site(pool: SharedPool) -> None:
    publish(pool, {"t": 1})
    deque_id = pool.directory.snapshot().topics["t"][0].deque_id
    fast = fastpath.fast_path_for(pool)  # made while lockdep is on: it gets the hook
    assert fast is not None
    try:
        # the C send opens a batch: the stripe, then the pool lock under it (in order)
        facts = fast.send_kv((pool.directory.version(), (deque_id,)), 0, None, b"v")
        assert isinstance(facts, tuple) and facts[1] & 2, "a batch opened in C"
        assert lockdep.holding() == []
        with pool.locks.held(POOL_LOCK), pytest.raises(LockOrderError) as raised:
            fast.append_kv(deque_id, 1, None, b"v", 0, -1)
        message = str(raised.value)
        assert (
            f"taking stripe lock {pool.layout.stripe_lock(deque_id)} while holding pool" in message
        )
        assert "C: fast_append (_append_write.c:" in message
        assert lockdep.holding() == []
        assert pool.locks.value(pool.layout.stripe_lock(deque_id)) == 1
    finally:
        fast.close()
