"""Milliseconds, the unit of every Kafka timeout, from the two clocks the package reads.

``monotonic_ms`` measures intervals (linger, backoff, timeouts, heartbeats): it never jumps.
``wall_ms`` stamps records and log appends (Kafka's timestamps are wall-clock). Code that
decides by time takes ``now_ms`` as an argument and its caller reads a ``Clock``, so tests
step a ``ManualClock`` instead of sleeping. It lives in ``protocol``, the layer below the
producer, the Sender and broker_stub. (``shm`` imports nothing of shmkafka: the one time
it reads, a pool's creation stamp, it reads itself.)
"""

from __future__ import annotations

import time
from typing import Protocol


def monotonic_ms() -> int:
    """Milliseconds of ``time.monotonic()`` (CLOCK_MONOTONIC on Linux, as the C path)."""
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    """Milliseconds since the epoch."""
    return int(time.time() * 1000)


class Clock(Protocol):
    def monotonic_ms(self) -> int: ...


class SystemClock:
    """The real monotonic clock."""

    def monotonic_ms(self) -> int:
        return monotonic_ms()


class ManualClock:
    """A clock that moves only when a test moves it."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def monotonic_ms(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms
