"""A semaphore wait that a signal does not end (shm/waits.py): a signal whose Python
handler returns interrupts ``sem_timedwait``, and posix_ipc raises ``SignalError`` for it;
the wait goes on, on the main thread and on any other, as Python's own waits do."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator

import posix_ipc
import pytest

from shmkafka.shm import waits
from tests.interrupts import handled, interrupting

__all__ = ["handled"]  # (the fixture)


@pytest.fixture
def sem() -> Iterator[posix_ipc.Semaphore]:
    made = posix_ipc.Semaphore(f"/shmkafka-test-waits-{uuid.uuid4().hex[:12]}", posix_ipc.O_CREX)
    yield made
    made.unlink()
    made.close()


def _signal_then_post(target: int, sem: posix_ipc.Semaphore, times: int) -> threading.Thread:
    """Interrupt thread ``target`` ``times`` times, 20 ms apart, then post ``sem``."""

    def run() -> None:
        for _ in range(times):
            time.sleep(0.02)
            signal.pthread_kill(target, signal.SIGUSR1)
        time.sleep(0.02)
        sem.release()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_the_raw_wait_is_ended_by_a_handled_signal(
    sem: posix_ipc.Semaphore, handled: list[int]
) -> None:
    """What the helper is for: without it, the wait fails."""
    sender = _signal_then_post(threading.get_ident(), sem, 1)
    with pytest.raises(posix_ipc.SignalError):
        sem.acquire(5)
    sender.join(5)
    assert handled == [signal.SIGUSR1]


def test_a_wait_on_the_main_thread_goes_on_through_signals(
    sem: posix_ipc.Semaphore, handled: list[int]
) -> None:
    assert threading.current_thread() is threading.main_thread()
    sender = _signal_then_post(threading.get_ident(), sem, 3)
    started = time.monotonic()
    assert waits.acquire(sem, 5)
    assert time.monotonic() - started < 4
    sender.join(5)
    assert handled == [signal.SIGUSR1] * 3  # (each handler ran, on this thread)


def test_a_wait_on_another_thread_goes_on_through_signals(
    sem: posix_ipc.Semaphore, handled: list[int]
) -> None:
    got: list[object] = []

    def wait() -> None:
        try:
            got.append(waits.acquire(sem, 5))
        except BaseException as exc:  # noqa: BLE001 (what the test looks for)
            got.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.05)  # (the waiter is in its wait: were it not, the signal still comes first)
    assert waiter.ident is not None
    _signal_then_post(waiter.ident, sem, 3).join(5)
    waiter.join(5)
    assert got == [True]


def test_the_timeout_still_holds_through_signals(
    sem: posix_ipc.Semaphore, handled: list[int]
) -> None:
    started = time.monotonic()
    with interrupting(threading.get_ident(), 0.01):
        assert waits.acquire(sem, 0.3) is False
    assert 0.25 <= time.monotonic() - started < 2
    assert handled


def test_a_handler_that_raises_ends_the_wait(sem: posix_ipc.Semaphore) -> None:
    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGUSR1, stop)
    try:
        sender = _signal_then_post(threading.get_ident(), sem, 1)
        with pytest.raises(KeyboardInterrupt):
            waits.acquire(sem, 5)
        sender.join(5)
    finally:
        signal.signal(signal.SIGUSR1, before)
