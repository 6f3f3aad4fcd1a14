"""The process slot's delivery of completions (producer/process_slot.py): a callback that
flushes from the completion thread reads the ring again inside a delivery; the results
the outer delivery polled are handed over by the inner one, in order, each once, so the
flush sees them (a flush from a callback used to wait for them, and the liveness check to
take them for lost)."""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from shmkafka.producer import process_slot
from shmkafka.producer.process_slot import ProcessSlot
from shmkafka.shm.layout import S_AWAITING
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


def test_a_pump_inside_a_delivery_does_not_wait_while_completions_are_queued() -> None:
    """A callback's wait (``get()``, ``flush()``) whose result the outer delivery took
    already finds it queued: it takes it without waiting on the ring's semaphore."""
    completions = [Completion(b, 1, 0, -1, -1, 0) for b in (1, 2)]
    waits: list[float] = []
    rings = _Ring(completions)
    rings.wait = lambda slot, timeout: waits.append(timeout)  # type: ignore[attr-defined]
    slot = ProcessSlot(SimpleNamespace(slot=0, rings=rings))  # type: ignore[arg-type]
    seen: list[tuple[str, int]] = []
    a = _Producer("a", seen)
    slot._handles = [a]  # type: ignore[list-item]
    a.on_first = lambda: slot.pump(5.0)  # batch 2 is in the queue, behind batch 1
    slot.deliver()
    assert waits == [0.0] and seen == [("a", 1), ("a", 2)]
    slot.pump(5.0)  # (nothing queued: the wait is the caller's)
    assert waits == [0.0, 5.0]


@pytest.mark.usefixtures("pool_removed")
def test_the_completion_thread_goes_on_after_a_round_that_raises(
    pool_name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A round of the thread raises (here the producer's periodic work, as a Sender that
    cannot be started would), then one ends by ``SystemExit``: each is logged, and the
    thread still delivers every result."""
    from shmkafka import KafkaProducer
    from shmkafka.broker_stub.server import BrokerStub
    from shmkafka.producer.client import Client

    real = Client.housekeeping
    failures: list[BaseException] = [RuntimeError("the round fails"), SystemExit("and exits")]

    def failing(self: Client) -> None:
        if failures:
            raise failures.pop(0)
        real(self)

    monkeypatch.setattr(Client, "housekeeping", failing)
    monkeypatch.setattr(process_slot, "LOG_EVERY_S", 0.0)  # (each failure its own line)
    with BrokerStub(partitions=1) as stub:
        producer = KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name)
        try:
            futures = [producer.send("t", b"v%d" % i) for i in range(20)]
            assert [f.get(10).offset for f in futures] == list(range(20))
        finally:
            producer.close(timeout=10)
    assert failures == []
    assert caplog.text.count("the completion thread's round failed") == 2


def test_a_round_that_keeps_failing_is_logged_at_most_once_a_period(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [100.0]
    monkeypatch.setattr(process_slot.time, "monotonic", lambda: clock[0])
    failures = process_slot.RoundFailures()
    for _ in range(5):  # five failed rounds within one period: one line
        try:
            raise RuntimeError("the round fails")
        except RuntimeError:
            failures.failed()
        clock[0] += process_slot.RING_WAIT_S
    assert caplog.text.count("the completion thread's round failed") == 1
    assert "RuntimeError: the round fails" in caplog.text  # (with its traceback)
    clock[0] += process_slot.LOG_EVERY_S
    try:
        raise RuntimeError("later")
    except RuntimeError:
        failures.failed()
    assert caplog.text.count("the completion thread's round failed") == 2
    assert "(4 more failed since the last report)" in caplog.text
    try:  # (failures that stop before the period ends are told at the next good round)
        raise RuntimeError("once more")
    except RuntimeError:
        failures.failed()
    failures.succeeded()
    assert "rounds failed 1 more times, then recovered" in caplog.text
    failures.succeeded()  # (nothing left to tell)
    assert caplog.text.count("then recovered") == 1


def _awaiting(pool: Any) -> int:
    """The slot's awaiting flag, as the Sender reads it."""
    return int(pool.segment.halfwords[(pool.layout.slot_at(pool.slot) + S_AWAITING) >> 2])


@pytest.mark.usefixtures("pool_removed")
def test_a_get_that_waits_raises_the_slots_awaiting_flag_while_it_waits(pool_name: str) -> None:
    """The Sender wakes the process of a waiting get() at once (pool/result_wakes.py): the
    flag is up while the get waits, and down once it returns; a done future's get leaves
    it alone."""
    from shmkafka import KafkaProducer
    from shmkafka.broker_stub.server import BrokerStub

    with BrokerStub(partitions=1) as stub:
        producer = KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name,
                                 linger_ms=60_000)  # fmt: skip
        try:
            future = producer.send("t", b"v")
            (pool,) = [p for p in process_slot.joined_pools() if p.name == pool_name]
            assert _awaiting(pool) == 0
            got: list[Any] = []
            waiter = threading.Thread(target=lambda: got.append(future.get(10)))
            waiter.start()
            deadline = time.monotonic() + 5
            while not _awaiting(pool):  # (the get waits: it lingers for a minute)
                assert time.monotonic() < deadline, "the waiting get() never said so"
                time.sleep(0.001)
            producer.flush(10)
            waiter.join(10)
            assert got[0].offset == 0 and _awaiting(pool) == 0
            assert future.get(10).offset == 0 and _awaiting(pool) == 0
        finally:
            producer.close(timeout=10)


def test_a_wait_that_begins_with_results_in_the_ring_wakes_its_own_thread(
    pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Sender may hold the wake of results already posted (pool/result_wakes.py) and
    reads the awaiting flag only when it wakes: a wait that begins then wakes its thread."""
    slot = ProcessSlot(pool)
    monkeypatch.setitem(process_slot._slots, (pool.name, os.getpid()), slot)
    sem = pool.rings.semaphore(pool.slot)
    with process_slot.awaiting_results():
        assert _awaiting(pool) == 1 and sem.value == 0  # (nothing in the ring: no wake)
    pool.rings.post(pool.slot, Completion(1, 1, 0, -1, -1, 0))
    with process_slot.awaiting_results():
        assert _awaiting(pool) == 1 and sem.value == 1
    assert _awaiting(pool) == 0


def test_a_wait_shorter_than_the_senders_hold_leaves_the_flag_down(
    pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pacing loop's ``poll(0.002)`` is no wait for a result: a held wake comes within
    linger.ms (the Sender's, in the segment), and a flag would make it a wake per result."""
    slot = ProcessSlot(pool)
    monkeypatch.setitem(process_slot._slots, (pool.name, os.getpid()), slot)
    pool.set_sender_linger(20)
    assert pool.wake_hold_s() == 0.02
    with process_slot.awaiting_results(0.019):
        assert _awaiting(pool) == 0
    for wait_s in (0.02, 10.0, None):  # (None: a wait without a bound, as get()'s)
        with process_slot.awaiting_results(wait_s):
            assert _awaiting(pool) == 1
    pool.set_sender_linger(60_000)  # (the hold is at most HOLD_MAX_S: 50 ms)
    with process_slot.awaiting_results(0.049):
        assert _awaiting(pool) == 0
    with process_slot.awaiting_results(0.05):
        assert _awaiting(pool) == 1
    pool.set_sender_linger(0)  # (no hold: every wait says so)
    with process_slot.awaiting_results(0.0001):
        assert _awaiting(pool) == 1


def test_a_start_of_a_wait_that_raises_does_not_count(
    pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start whose segment write raised is never ended by its caller: it must not leave
    the slot's count (and so its flag) up for good."""
    slot = ProcessSlot(pool)
    monkeypatch.setitem(process_slot._slots, (pool.name, os.getpid()), slot)
    real = pool.slots.set_awaiting

    def failing(at: int, on: bool) -> None:
        raise OSError("the segment write failed")

    monkeypatch.setattr(pool.slots, "set_awaiting", failing)
    with pytest.raises(OSError), process_slot.awaiting_results():
        pass
    monkeypatch.setattr(pool.slots, "set_awaiting", real)
    with process_slot.awaiting_results():
        assert _awaiting(pool) == 1
    assert _awaiting(pool) == 0 and slot._awaiting == 0
