"""What ``send()`` returns: light futures resolved per batch, and kafka-python's
RecordMetadata.

Rules:
- A future holds no lock or event of its own: waits go through its producer's condition.
- Futures of one batch generation share a ``BatchWait``; a completion (or one per part of
  a split batch) resolves them all at once. The first outcome of a future stands.
- ``PyTracker`` (here) and the C ``Tracker`` (_tracker.c) do the same; the C one registers
  a record in the same call that appends it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from shmkafka.pool import native
from shmkafka.pool.errors import KafkaTimeoutError
from shmkafka.producer.process_slot import ProcessSlot, awaiting_results, completion_slot
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm.layout import ALL_DELTAS
from shmkafka.shm.rings import Completion

log = logging.getLogger("shmkafka.producer")


class TopicPartition(NamedTuple):
    topic: str
    partition: int


TIMESTAMP_CREATE, TIMESTAMP_LOG_APPEND = 0, 1  # a record's timestamp type (Kafka's)


class Delivery(NamedTuple):
    """A record's result once it is done (``Future.delivery``): where the broker put it, or
    the error it failed with."""

    offset: int  # -1 when failed, or when the broker gave none (acks=0, some duplicates)
    timestamp: int  # the log-append time when the topic keeps it, else the create time
    timestamp_type: int  # TIMESTAMP_CREATE or TIMESTAMP_LOG_APPEND
    log_start_offset: int  # -1 when the broker gave none
    error: KafkaError | None


class RecordMetadata(NamedTuple):
    """What a successful send returns, field for field as kafka-python's."""

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int
    checksum: None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


# What send() learns of a record (the slow path's facts for ``Tracker.track``):
# (registration = batch id << 32 | generation, flags, partition, offset delta, timestamp,
# key size, value size, headers' size); sizes are -1 for None / no headers.
RecordFacts = tuple[int, ...]
FULL, NEW_BATCH, WAKE = 1, 2, 4  # flags


class BatchWait:
    """This process's records in one generation of one batch, and the completions that came
    for it: one, or one per part when the Sender split the batch. Futures read their outcome
    here, so a completion resolves a whole batch at once. Only futures somebody listens to
    (a report to queue, a callback to run) are listed; the others are counted."""

    __slots__ = ("completions", "cond", "deltas", "listed", "pending", "retire_at")

    def __init__(self, cond: threading.Condition) -> None:
        self.cond = cond
        self.completions: list[tuple[Completion, KafkaError | None]] = []
        self.listed: list[Future] = []
        self.deltas: list[int] = []  # the pending records' offset deltas
        self.pending = 0
        self.retire_at = 0.0

    def outcome(self, offset_delta: int) -> tuple[Completion, KafkaError | None] | None:
        for item in self.completions:
            if item[0].first_delta <= offset_delta <= item[0].last_delta:
                return item
        return None

    def listen(self, future: Future) -> bool:
        """List ``future`` for its completion (under the producer's lock); False if it is
        done already."""
        if self.outcome(future.offset_delta) is not None:
            return False
        if future not in self.listed:
            self.listed.append(future)
        return True


class FutureBase:
    """A record's facts and its batch's wait (the C extension has the same type)."""

    __slots__ = ("_callbacks", "_wait", "flags", "header_size", "key_size", "offset_delta",
                 "partition", "registration", "report", "timestamp", "topic",
                 "value_size")  # fmt: skip

    _callbacks: list[Callable[[Future], None]] | None
    _wait: BatchWait
    flags: int
    header_size: int
    key_size: int
    offset_delta: int
    partition: int
    registration: int
    report: Any
    timestamp: int
    topic: str
    value_size: int

    def _outcome(self) -> tuple[Completion, KafkaError | None] | None:
        return self._wait.outcome(self.offset_delta)


class PyTracker:
    """The futures of one client: the reference for the C ``Tracker``
    (``_tracker.c``, its C twin), whose methods do the same, and the path when it is not built.

    Rules: ``track`` takes the producer's lock (``cond``), the other methods run under it;
    a completion may come before a record's registration (the slow path appends, then
    tracks), so a completed wait stays until ``retire`` forgets it."""

    def __init__(self, cond: threading.Condition, future_type: type[Future]) -> None:
        self.cond = cond
        self.future_type = future_type
        self.waits: dict[int, BatchWait] = {}
        self.outstanding = 0
        # called with a reported future whose completion came before its registration
        self.on_came_first: Callable[[Future], None] | None = None

    def _wait(self, registration: int) -> BatchWait:
        wait = self.waits.get(registration)
        if wait is None:  # (setdefault: a wait another thread made meanwhile stays)
            wait = self.waits.setdefault(registration, BatchWait(self.cond))
        return wait

    def track(
        self, topic: str, facts: RecordFacts, report: Any, want_future: bool
    ) -> Future | None:
        """Register one appended record; its future (None if no future is wanted and no
        report awaits it). A record with a report whose completion came first goes to
        ``on_came_first``: no completion will report it."""
        with self.cond:
            future, came_first = self._register(topic, facts, report, want_future)
        if came_first and report is not None and self.on_came_first is not None:
            assert future is not None
            self.on_came_first(future)  # (out of the lock: it queues a report)
        return future

    def _register(
        self, topic: str, facts: RecordFacts, report: Any, want_future: bool
    ) -> tuple[Future | None, bool]:
        """``track``'s work, under the lock: the future, and whether its completion came
        first (done already)."""
        wait = self._wait(facts[0])
        future = None
        if want_future or report is not None:
            future = self.future_type.__new__(self.future_type)
            (future.registration, future.flags, future.partition, future.offset_delta,
             future.timestamp, future.key_size, future.value_size,
             future.header_size) = facts  # fmt: skip
            future._wait, future.topic, future.report = wait, topic, report
            future._callbacks = None
        if wait.completions and wait.outcome(facts[3]) is not None:
            return future, True
        wait.deltas.append(facts[3])
        wait.pending += 1
        self.outstanding += 1
        if report is not None:
            assert future is not None
            wait.listed.append(future)
        return future, False

    def complete(self, registration: int, first: int, last: int, completion: Completion,
                 error: KafkaError | None, local: bool,
                 retire_at: float) -> list[Future] | None:  # fmt: skip
        """Record a completion of deltas [first, last] (the caller holds ``cond``); the
        listed futures it resolves (None: the same part came again, from a Sender that
        restarted)."""
        wait = self._wait(registration)
        if not local and any(c.first_delta == first for c, _ in wait.completions):
            return None
        wait.completions.append((completion, error))
        if first == 0 and last == ALL_DELTAS:
            covered, wait.listed = wait.listed, []
            resolved, wait.deltas = len(wait.deltas), []
        else:
            covered = [f for f in wait.listed if first <= f.offset_delta <= last]
            wait.listed = [f for f in wait.listed if not first <= f.offset_delta <= last]
            left = [d for d in wait.deltas if not first <= d <= last]
            resolved, wait.deltas = len(wait.deltas) - len(left), left
        wait.pending -= resolved
        self.outstanding -= resolved
        wait.retire_at = retire_at
        return covered

    def pending(self) -> list[tuple[int, int]]:
        """(registration, records pending) of every wait with records pending (the caller
        holds ``cond``)."""
        return [(r, w.pending) for r, w in self.waits.items() if w.pending]

    def retire(self, now: float) -> None:
        """Forget completed waits with nothing pending whose time is up (the caller holds
        ``cond``)."""
        done = [r for r, w in self.waits.items()
                if not w.pending and w.completions and w.retire_at <= now]  # fmt: skip
        for registration in done:
            del self.waits[registration]

    def clear(self) -> None:
        """Forget every wait (the producer is closed)."""
        self.waits.clear()


class Future(FutureBase):
    """A send's result: ``get(timeout)`` returns RecordMetadata or raises the error.

    Futures are light: no lock or event of their own (waits go through their producer's
    one condition variable), the record's facts and a reference to their batch's wait;
    RecordMetadata is built on first use. Nothing keeps a future alive but its caller,
    unless a report or callback listens to it.

    With the C extension built, ``Future`` is its type (_tracker.c: not tracked by the
    garbage collector, made without a Python call), with these methods installed."""

    __slots__ = ()

    @property
    def is_done(self) -> bool:
        return self._outcome() is not None

    @property
    def exception(self) -> BaseException | None:
        outcome = self._outcome()
        return None if outcome is None else outcome[1]

    @property
    def value(self) -> RecordMetadata | None:
        result = self.delivery()
        if result is None or result.error is not None:
            return None
        partition = self.partition
        return RecordMetadata(
            self.topic, partition, TopicPartition(self.topic, partition), result.offset,
            result.timestamp, None, self.key_size, self.value_size, self.header_size,
        )  # fmt: skip

    def delivery(self) -> Delivery | None:
        """The record's result (offset, timestamp and its type, log start offset, error),
        or None while it is not done: what every API builds its own result from."""
        outcome = self._outcome()
        if outcome is None:
            return None
        c, error = outcome
        if error is not None:
            return tuple.__new__(Delivery, (-1, self.timestamp, TIMESTAMP_CREATE, -1, error))
        appended = c.log_append_time
        stamp, kind = (appended, TIMESTAMP_LOG_APPEND) if appended >= 0 else (
            self.timestamp, TIMESTAMP_CREATE)  # fmt: skip
        return tuple.__new__(
            Delivery, (c.offset_of(self.offset_delta), stamp, kind, c.log_start_offset, None)
        )

    def retriable(self) -> bool:
        error = self.exception
        return bool(getattr(error, "retriable", False))

    def succeeded(self) -> bool:
        outcome = self._outcome()
        return outcome is not None and outcome[1] is None

    def failed(self) -> bool:
        outcome = self._outcome()
        return outcome is not None and outcome[1] is not None

    def _run_callbacks(self) -> None:
        """The callbacks, on the thread that resolved the future (the completion thread,
        or a close's): what one raises, a ``sys.exit()`` too, is logged and the rest run.
        That thread delivers every later result of the process, so nothing may end it."""
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            try:
                callback(self)
            except (Exception, SystemExit):  # (SystemExit would end the thread)
                log.exception("a future's callback raised")

    def add_done_callback(self, callback: Callable[[Future], None]) -> None:
        """``callback(future)`` once the future is done (at once if it is); an exception it
        raises is logged and never breaks delivery."""
        with self._wait.cond:
            if self._wait.listen(self):
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        try:
            callback(self)
        except Exception:
            log.exception("a future's callback raised")

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        """On success, ``fn(*args, record_metadata, **kwargs)``, once (kafka-python)."""

        def on_done(future: Future) -> None:
            if future.succeeded():
                fn(*args, future.value, **kwargs)

        self.add_done_callback(on_done)
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        """On failure, ``fn(*args, exception, **kwargs)``, once (kafka-python)."""

        def on_done(future: Future) -> None:
            if future.failed():
                fn(*args, future.exception, **kwargs)

        self.add_done_callback(on_done)
        return self

    def add_both(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        return self.add_callback(fn, *args, **kwargs).add_errback(fn, *args, **kwargs)

    def _wait_on_thread(self, slot: ProcessSlot, timeout: float | None) -> None:
        """``get()`` on the completion thread, which a callback holds: it reads the ring
        here, as a callback's ``flush()`` does, or the result would never come. (A future
        of another pool's producer is resolved by that pool's thread: this loop sees it
        within one ring wait.)"""
        deadline = None if timeout is None else time.monotonic() + timeout
        with awaiting_results():
            while True:
                with self._wait.cond:
                    if self._outcome() is not None:
                        return
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise KafkaTimeoutError(f"no result within {timeout} s")
                slot.pump_here(0.05 if remaining is None else min(0.05, remaining))

    def get(self, timeout: float | None = None) -> RecordMetadata:
        cond = self._wait.cond
        with cond:
            done = self._outcome() is not None
        if not done:  # (a wait: the Sender wakes this process at once, process_slot.py)
            slot = completion_slot()
            if slot is not None:  # (from a callback: the results come through this thread)
                self._wait_on_thread(slot, timeout)
            else:
                with awaiting_results(), cond:
                    if not cond.wait_for(lambda: self._outcome() is not None, timeout):
                        raise KafkaTimeoutError(f"no result within {timeout} s")
        error = self.exception
        if error is not None:
            raise error
        value = self.value
        assert value is not None
        return value


if not TYPE_CHECKING:
    try:  # the C type when the extension is built, with the methods above
        native.check()
        from shmkafka.producer._tracker import Future as _CFuture
        from shmkafka.producer._tracker import adopt_methods
    except ImportError:
        pass
    else:
        adopt_methods(_CFuture, {name: value for name, value in Future.__dict__.items()
                                 if not name.startswith("__") or name == "__doc__"})  # fmt: skip
        Future = _CFuture
