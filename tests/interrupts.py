"""Signals for the tests of waits that a signal must not end (shm/waits.py): SIGUSR1 with a
Python handler that returns, as an app's own handlers do, and a thread that sends it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@pytest.fixture
def handled() -> Iterator[list[int]]:
    """SIGUSR1 handled in Python by a handler that returns: the signals it saw."""
    seen: list[int] = []
    before = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    yield seen
    signal.signal(signal.SIGUSR1, before)


@contextmanager
def interrupting(target: int, every_s: float) -> Iterator[None]:
    """SIGUSR1 sent to thread ``target`` every ``every_s`` until the block ends."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every_s):
            signal.pthread_kill(target, signal.SIGUSR1)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
