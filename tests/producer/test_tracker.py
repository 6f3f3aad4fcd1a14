"""The futures' tracker (futures.PyTracker and the C Tracker of _tracker.c): a completion
that races a record's registration resolves the record, whatever runs in between.

The C tracker runs with the GIL held, but an allocation may start the garbage collector,
whose callbacks and finalizers are Python code: the completion thread can run there. A
``gc.callbacks`` hook stands in for that thread at exactly that point."""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from shmkafka.producer.futures import Future, PyTracker
from shmkafka.shm.layout import ALL_DELTAS
from shmkafka.shm.rings import Completion

try:
    from shmkafka.producer._tracker import Tracker
except ImportError:  # pragma: no cover - not built
    Tracker = None

BATCH, GENERATION = 7, 1
REGISTRATION = BATCH << 32 | GENERATION


def _trackers() -> list[Any]:
    kinds = [pytest.param(lambda cond: PyTracker(cond, Future), id="python")]
    kinds.append(
        pytest.param(
            lambda cond: Tracker(cond, Future, None), id="c",
            marks=pytest.mark.skipif(Tracker is None, reason="the C extension is not built"),
        )
    )  # fmt: skip
    return kinds


@contextmanager
def on_collection_inside(method: str, action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` once, from the first garbage collection that starts while a call of
    ``method`` (the tracker's, C or Python) runs in this thread: any allocation of a
    tracked object there starts one."""
    inside: list[bool] = []
    fired: list[bool] = []
    ballast: list[list[int]] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        name = getattr(arg, "__name__", None) if event.startswith("c_") else frame.f_code.co_name
        if name == method and event in ("call", "c_call"):
            inside.append(True)
            ballast.extend([[], []])  # (tracked objects: the next allocation collects)
            gc.set_threshold(1)  # (only now: no collection before the call)
        elif name == method and event in ("return", "c_return", "c_exception") and inside:
            inside.pop()
            gc.set_threshold(*thresholds)

    def hook(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and inside and not fired:
            fired.append(True)
            action()

    thresholds = gc.get_threshold()
    gc.callbacks.append(hook)
    sys.setprofile(profile)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        sys.setprofile(None)
        gc.callbacks.remove(hook)
    assert fired, "no collection ran in the call: the test did not reach its race"


def _complete(tracker: Any, cond: threading.Condition) -> Callable[[], None]:
    completion = Completion(BATCH, GENERATION, 100, -1, -1, 0)

    def complete() -> None:
        with cond:
            tracker.complete(REGISTRATION, 0, ALL_DELTAS, completion, None, False,
                             time.monotonic() + 5)  # fmt: skip

    return complete


@pytest.mark.parametrize("make", _trackers())
def test_a_report_whose_completion_came_during_its_registration_goes_to_on_came_first(
    make: Any,
) -> None:
    """No completion will report a record registered after its completion was handled: the
    tracker hands it to ``on_came_first``, once. (The C send path returned None for it, with
    no future wanted: its report was lost, one record in a million at P=16.)"""
    cond = threading.Condition()
    tracker = make(cond)
    came_first: list[Any] = []
    tracker.on_came_first = came_first.append
    facts = (REGISTRATION, 0, 0, 0, 1_000, -1, 3, -1)
    other = (REGISTRATION + 1, 0, 0, 0, 1_000, -1, 3, -1)  # (another batch's: listed)
    tracker.track("topic", other, ("listed",), False)
    with on_collection_inside("track", _complete(tracker, cond)):
        tracker.track("topic", facts, ("report",), False)
    assert [f.report for f in came_first] == [("report",)]  # (not the listed one)
    assert came_first[0].is_done and came_first[0].get(0).offset == 100
    assert tracker.outstanding == 1  # (the listed one waits for its own completion)


@pytest.mark.parametrize("make", _trackers())
def test_a_completion_during_the_registration_of_its_first_record_resolves_it(make: Any) -> None:
    """The record's wait is made in the registration; a completion handled while it is
    being made must land in the same wait (the old C tracker made a second one, replaced
    it, and the record waited forever)."""
    cond = threading.Condition()
    tracker = make(cond)
    facts = (REGISTRATION, 0, 0, 0, 1_000, -1, 3, -1)
    with on_collection_inside("track", _complete(tracker, cond)):
        future = tracker.track("topic", facts, None, True)
    assert tracker.outstanding == 0
    assert future.is_done
    assert future.get(0).offset == 100
