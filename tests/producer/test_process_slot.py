"""The process slot's delivery of completions (producer/process_slot.py): a callback that
flushes from the completion thread reads the ring again inside a delivery; the results
the outer delivery polled are handed over by the inner one, in order, each once, so the
flush sees them (a flush from a callback used to wait for them, and the liveness check to
take them for lost)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from shmkafka.producer.process_slot import ProcessSlot
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
