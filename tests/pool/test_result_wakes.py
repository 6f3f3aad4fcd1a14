"""ResultWakes: the Sender wakes a process at most once every linger.ms, unless a thread of
it waits for a result or flushes; held wakes are made when due, or all at the Sender's
stop."""

from __future__ import annotations

import math

from shmkafka.pool.result_wakes import HOLD_MAX_S, MANY, ResultWakes
from shmkafka.pool.shared_pool import SharedPool

HOLD = 0.25  # (a binary fraction: the clock's sums below are exact)


class _Rings:
    def __init__(self) -> None:
        self.woken: list[int] = []

    def wake(self, slot: int) -> None:
        self.woken.append(slot)


class _Slots:
    def __init__(self) -> None:
        self.hurried: set[int] = set()

    def in_a_hurry(self, slot: int) -> bool:
        return slot in self.hurried


def _wakes(clock: list[float]) -> tuple[ResultWakes, _Rings, _Slots]:
    rings, slots = _Rings(), _Slots()
    wakes = ResultWakes(rings, slots, HOLD, clock=lambda: clock[0])  # type: ignore[arg-type]
    return wakes, rings, slots


def test_a_process_woken_within_the_hold_is_woken_when_it_ends() -> None:
    clock = [10.0]
    wakes, rings, _ = _wakes(clock)
    wakes.wake({3: 1, 1: 1})
    assert rings.woken == [1, 3]  # (the first wake of each: at once)
    clock[0] += HOLD / 2
    wakes.wake({1: 1})
    wakes.wake({1: 1})  # (a second round's results: the one held wake brings them)
    assert rings.woken == [1, 3] and wakes.held == 1
    assert 0 < wakes.due_in_ms() <= math.ceil(HOLD / 2 * 1000)  # (never early)
    wakes.wake_due()
    assert rings.woken == [1, 3]  # (not yet due)
    clock[0] += HOLD / 2
    assert wakes.due_in_ms() == 0
    wakes.wake_due()
    assert rings.woken == [1, 3, 1] and wakes.made == 3
    assert wakes.due_in_ms() > 60_000  # (nothing held: no bound on the Sender's sleep)


def test_a_process_in_a_hurry_is_woken_at_once() -> None:
    clock = [10.0]
    wakes, rings, slots = _wakes(clock)
    wakes.wake({2: 1})
    slots.hurried.add(2)  # (a thread of it waits in get(), or it flushes)
    clock[0] += HOLD / 10
    wakes.wake({2: 1})
    assert rings.woken == [2, 2] and wakes.held == 0


def test_a_held_process_that_hurries_is_woken_by_the_next_results() -> None:
    clock = [10.0]
    wakes, rings, slots = _wakes(clock)
    wakes.wake({4: 1})
    clock[0] += HOLD / 10
    wakes.wake({4: 1})  # (held)
    slots.hurried.add(4)
    wakes.wake({4: 1})
    assert rings.woken == [4, 4]
    wakes.wake_due()  # (nothing held any more)
    assert rings.woken == [4, 4]


def test_a_held_wake_is_made_at_once_when_its_process_hurries() -> None:
    clock = [10.0]
    wakes, rings, slots = _wakes(clock)
    wakes.wake({4: 1})
    clock[0] += HOLD / 10
    wakes.wake({4: 1})
    assert rings.woken == [4]
    slots.hurried.add(4)
    wakes.wake_due()
    assert rings.woken == [4, 4]


def test_a_wake_after_the_hold_is_made_at_once() -> None:
    clock = [10.0]
    wakes, rings, _ = _wakes(clock)
    wakes.wake({0: 1})
    clock[0] += HOLD
    wakes.wake({0: 1})
    assert rings.woken == [0, 0] and wakes.held == 0


def test_the_senders_stop_makes_every_held_wake() -> None:
    clock = [10.0]
    wakes, rings, _ = _wakes(clock)
    wakes.wake({5: 1, 6: 1})
    clock[0] += HOLD / 10
    wakes.wake({6: 1, 5: 1})
    wakes.wake_all()
    assert rings.woken == [5, 6, 5, 6]
    wakes.wake_due()  # (nothing is held any more)
    assert rings.woken == [5, 6, 5, 6]


def test_the_slot_flags_say_when_a_process_is_in_a_hurry(pool: SharedPool) -> None:
    slots, slot = pool.slots, pool.slot
    assert not slots.in_a_hurry(slot)
    slots.set_awaiting(slot, True)
    assert slots.in_a_hurry(slot)
    slots.set_awaiting(slot, False)
    slots.set_flushing(slot, True)
    assert slots.in_a_hurry(slot)
    slots.set_flushing(slot, False)
    assert not slots.in_a_hurry(slot)


def test_the_hold_is_the_senders_linger_up_to_a_ring_wait() -> None:
    clock = [10.0]
    rings, slots = _Rings(), _Slots()
    wakes = ResultWakes(rings, slots, clock=lambda: clock[0])  # type: ignore[arg-type]
    wakes.wake({1: 1})
    wakes.wake({1: 1})  # (no hold by default: linger.ms 0)
    assert rings.woken == [1, 1]
    wakes.hold_for(5)
    wakes.wake({1: 1})
    assert rings.woken == [1, 1] and 0 < wakes.due_in_ms() <= 5
    wakes.hold_for(10_000)
    assert wakes._hold_s == HOLD_MAX_S


def test_a_held_wake_that_would_bring_many_results_is_made_at_once() -> None:
    clock = [10.0]
    wakes, rings, _ = _wakes(clock)
    wakes.wake({7: 1})
    clock[0] += HOLD / 10
    wakes.wake({7: MANY - 1})
    assert rings.woken == [7]  # (held: fewer than MANY results)
    wakes.wake({7: 1})  # (MANY results since the last wake: it pays for itself)
    assert rings.woken == [7, 7]
    wakes.wake_due()
    assert rings.woken == [7, 7]  # (nothing held any more)
    wakes.wake({7: MANY})
    assert rings.woken == [7, 7, 7]
