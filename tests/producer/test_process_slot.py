"""The process slot's delivery of completions (producer/process_slot.py): a callback that
flushes from the completion thread reads the ring again inside a delivery; the results
the outer delivery polled are handed over by the inner one, in order, each once, so the
flush sees them (a flush from a callback used to wait for them, and the liveness check to
take them for lost). And the gathering of results: for the Sender's linger.ms, never while
a thread waits for one."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer import process_slot as process_slot_module
from shmkafka.producer.process_slot import ProcessSlot, ResultCondition, waiting_for_results
from shmkafka.shm.rings import Completion


class _Ring:
    def __init__(self, *batches: list[Completion]) -> None:
        self.batches = list(batches)

    def poll(self, slot: int) -> list[Completion]:
        return self.batches.pop(0) if self.batches else []


class _Producer:
    def __init__(self, name: str, seen: list[tuple[str, int]]) -> None:
        self.name, self.seen = name, seen
        self.on_first: Any = None

    def on_completion(self, completion: Completion) -> None:
        self.seen.append((self.name, completion.batch_id))
        if completion.batch_id == 1 and self.on_first is not None:
            self.on_first()  # a callback that flushes: the ring is read again, in here


def test_a_delivery_inside_a_delivery_hands_over_what_the_outer_one_polled() -> None:
    completions = [Completion(b, 1, 0, -1, -1, 0) for b in (1, 2, 3)]
    pool: Any = SimpleNamespace(slot=0, rings=_Ring(completions[:2], completions[2:]))
    process_slot = ProcessSlot(pool)
    seen: list[tuple[str, int]] = []
    a, b = _Producer("a", seen), _Producer("b", seen)
    process_slot._handles = [a, b]  # type: ignore[list-item]
    inner: list[list[tuple[str, int]]] = []

    def flush() -> None:
        a.on_first = None
        process_slot.deliver()
        inner.append(list(seen))

    a.on_first = flush
    process_slot.deliver()
    # the inner delivery handed over batch 1 to b and batch 2 to both (polled by the
    # outer one), then batch 3 (which it polled itself): each once, in order per producer
    assert inner == [[("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3), ("b", 3)]]
    assert seen == inner[0]


# ---------------------------------------------------------------- gathering results


class _Linger:
    """A pool whose Sender's linger.ms is ``linger_ms``."""

    def __init__(self, linger_ms: int) -> None:
        self.linger_ms = linger_ms

    def sender_linger_ms(self) -> int:
        return self.linger_ms


def _gather_s(linger_ms: int) -> float:
    """How long one gathering of a slot lasts, from its start to its end."""
    process_slot = ProcessSlot(_Linger(linger_ms))  # type: ignore[arg-type]
    start = time.monotonic()
    process_slot._gather()
    return time.monotonic() - start


def test_results_gather_for_the_senders_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_slot_module, "GATHER_MAX_S", 5.0)
    assert _gather_s(60) >= 0.06  # (a timed wait ends no sooner: nobody set the event)
    assert _gather_s(0) < 0.06  # linger.ms 0: results go as they come


def test_gathering_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_slot_module, "GATHER_MAX_S", 0.05)
    assert 0.05 <= _gather_s(60_000) < 30  # (not linger.ms: the bound is far below it)


def test_no_gathering_while_a_thread_waits_for_a_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_slot_module, "GATHER_MAX_S", 60.0)
    with waiting_for_results():
        assert _gather_s(60_000) < 30
    assert not process_slot_module._hurry.is_set()  # (the last waiter gone: gathering again)


def test_a_thread_that_starts_to_wait_ends_a_gathering_under_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_slot_module, "GATHER_MAX_S", 60.0)
    took: list[float] = []
    gathering = threading.Thread(target=lambda: took.append(_gather_s(60_000)))
    gathering.start()
    cond = ResultCondition()
    with cond:
        cond.wait(0.2)  # (a future's get(), a flush: they wait on a ResultCondition)
    gathering.join(30)
    assert not gathering.is_alive() and took[0] < 30


def test_a_ring_wait_takes_every_wake_posted_before_it(pool: SharedPool) -> None:
    """Three results posted while the completion thread gathered: one wait takes their
    three wakes, and the poll after it reads the three (none is left for a wait to
    return at once with nothing to read)."""
    rings = pool.rings
    for batch_id in (1, 2, 3):
        assert rings.post(pool.slot, Completion(batch_id, 1, 0, -1, -1, 0))
        rings.wake(pool.slot)
    assert rings.wait(pool.slot, 1.0)
    assert rings.semaphore(pool.slot).value == 0
    assert [c.batch_id for c in rings.poll(pool.slot)] == [1, 2, 3]
    assert not rings.wait(pool.slot, 0.01)
