"""The Sender's wakes of the apps' completion threads: at most one a process every
linger.ms, unless a thread of it waits for a result.

Why: a wake (a post of the process's semaphore) costs the Sender a system call and the app
a thread's wake-up, about 50 µs of CPU between them, whatever the results it brings. A paced
process whose records fall into several requests a tick was woken for each of them (a fleet
of 32 at 500 records/s and linger.ms 5: 285 wakes a second each, the apps' largest cost).

Rules:
- A result is posted to the process's ring at once (rings.py, the C post); only the wake
  that tells its completion thread may be held.
- The hold is the Sender's linger.ms (at most ``HOLD_MAX_S``; 0: none). A process woken less
  than the hold ago is woken again a hold after that wake, with every result posted
  meanwhile, unless those results are ``MANY`` by then. The hold is what the app accepted
  for its records with linger.ms: a record sent after a result lingers that long itself,
  so an app that sends one record at a time and waits for each is seldom held (only when
  its record joins a batch that began earlier, or goes out early).
- One that is in a hurry is woken at once: a thread of it waits for a result (the slot's
  ``awaiting``: ``get()``, ``poll(timeout)``, ``send_and_wait``) or flushes (``flushing``),
  as slots.py's ``in_a_hurry`` reads them.
- Held wakes are made by ``wake_due``, every round, and the Sender sleeps no longer than
  the first of them (``due_in_ms``). A wait that begins while results are in its ring
  (their wake maybe held) wakes its own thread (process_slot.py's ``awaiting_results``).
  A held wake that is never made (the Sender killed) costs its process at most one ring
  wait (process_slot.py's ``RING_WAIT_S``): its completion thread reads its ring that
  often anyway. So does the batch lifecycle's model (batch_lifecycle.pml: the Sender may
  hold a wake; a Completer reads its ring after a timeout).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from shmkafka.shm.rings import CompletionRings
from shmkafka.shm.slots import SlotTable

HOLD_MAX_S = 0.05  # (the completion thread reads its ring this often anyway: RING_WAIT_S)
# A wake that brings this many results (batches) pays for itself: it is made at once. A
# busy process gets that many a round; a paced one, one or two.
MANY = 8


def hold_of(linger_ms: int) -> float:
    """The hold, in seconds, of a Sender whose linger.ms is ``linger_ms``."""
    return min(max(linger_ms, 0) / 1000, HOLD_MAX_S)


class ResultWakes:
    def __init__(
        self, rings: CompletionRings, slots: SlotTable, hold_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self._rings = rings
        self._slots = slots
        self._hold_s = hold_s
        self._clock = clock
        self._last: dict[int, float] = {}  # slot → when it was last woken
        # slot → when its held wake is due, and how many results it will bring
        self._held: dict[int, tuple[float, int]] = {}
        self.made = 0  # wakes made, and held (counted once each), since the Sender began
        self.held = 0

    def hold_for(self, linger_ms: int) -> None:
        """Hold wakes for the Sender's linger.ms (at most ``HOLD_MAX_S``)."""
        self._hold_s = hold_of(linger_ms)

    def wake(self, posted: Mapping[int, int]) -> None:
        """Wake each slot of ``posted`` (slot → results posted to it), or hold its wake
        (the rules)."""
        now = self._clock()
        last, held, hold_s = self._last, self._held, self._hold_s
        for slot in sorted(posted):
            woken = last.get(slot)
            due, results = held.get(slot, (None, 0))
            results += posted[slot]
            if (woken is None or now - woken >= hold_s or results >= MANY
                    or self._slots.in_a_hurry(slot)):  # fmt: skip
                self._wake(slot, now)
            elif due is None:
                held[slot] = (woken + hold_s, results)
                self.held += 1
            else:  # (its held wake brings these results too)
                held[slot] = (due, results)

    def wake_due(self) -> None:
        """Make the held wakes that are due, and those of processes now in a hurry."""
        if not self._held:
            return
        now = self._clock()
        in_a_hurry = self._slots.in_a_hurry
        for slot in [s for s, (due, _) in self._held.items() if due <= now or in_a_hurry(s)]:
            self._wake(slot, now)

    def wake_all(self) -> None:
        """Make every held wake now (the Sender stops)."""
        now = self._clock()
        for slot in sorted(self._held):
            self._wake(slot, now)

    def due_in_ms(self) -> int:
        """How long the Sender may sleep before a held wake is due (a large number: none)."""
        if not self._held:
            return 1 << 30
        due_in_s = min(due for due, _ in self._held.values()) - self._clock()
        return max(0, math.ceil(round(due_in_s * 1000, 6)))  # (5.0000000001 ms: 5)

    def _wake(self, slot: int, now: float) -> None:
        self._held.pop(slot, None)
        self._last[slot] = now
        self.made += 1
        self._rings.wake(slot)
