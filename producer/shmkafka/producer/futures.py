"""What ``send()`` returns: light futures resolved per batch, and kafka-python's
RecordMetadata.

Rules:
- A future holds no lock or event of its own: waits go through its producer's condition.
- Futures of one batch generation share a ``_BatchWait``; a completion (or one per part of
  a split batch) resolves them all at once. The first outcome of a future stands.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from shmkafka.errors import KafkaTimeoutError
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm.rings import Completion

log = logging.getLogger("shmkafka.producer")


class TopicPartition(NamedTuple):
    topic: str
    partition: int


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


# What send() learns of a record, as FastAppend.send_kv returns it: (registration = batch id
# << 32 | generation, flags, partition, offset delta, timestamp, key size, value size); the
# Python route adds the headers' size (the C route takes no headers: -1).
RecordFacts = tuple[int, ...]
DELTA = 3
FULL, NEW_BATCH, WAKE = 1, 2, 4  # flags


class _BatchWait:
    """This process's futures in one generation of one batch, and the completions that came
    for it: one, or one per part when the Sender split the batch. Futures read their outcome
    here, so a completion resolves a whole batch at once."""

    __slots__ = ("completions", "futures", "pending", "retire_at")

    def __init__(self) -> None:
        self.completions: list[tuple[Completion, KafkaError | None]] = []
        self.futures: list[Future] = []
        self.pending = 0
        self.retire_at = 0.0

    def outcome(self, offset_delta: int) -> tuple[Completion, KafkaError | None] | None:
        for item in self.completions:
            if item[0].first_delta <= offset_delta <= item[0].last_delta:
                return item
        return None


class Future:
    """A send's result: ``get(timeout)`` returns RecordMetadata or raises the error.

    Futures are made on every send, so they are light: no lock or event of their own (the
    waits go through their producer's one condition variable) and no state but a reference to
    their batch's wait and the record's ``RecordFacts``; RecordMetadata is built on first
    use."""

    __slots__ = ("_callbacks", "_cond", "_record", "_wait", "report", "topic")

    def __init__(
        self,
        cond: threading.Condition,
        wait: _BatchWait,
        topic: str,
        record: RecordFacts,
    ) -> None:
        self._cond = cond
        self._wait = wait
        self.topic = topic
        self._record = record
        self._callbacks: list[Callable[[Future], None]] | None = None
        self.report: Any = None  # what a delivery report needs (the confluent API's)

    @property
    def is_done(self) -> bool:
        return self._wait.outcome(self._record[DELTA]) is not None

    @property
    def exception(self) -> BaseException | None:
        outcome = self._wait.outcome(self._record[DELTA])
        return None if outcome is None else outcome[1]

    @property
    def value(self) -> RecordMetadata | None:
        outcome = self._wait.outcome(self._record[DELTA])
        if outcome is None or outcome[1] is not None:
            return None
        c = outcome[0]
        facts = self._record
        partition, delta = facts[2], facts[DELTA]
        return RecordMetadata(
            self.topic, partition, TopicPartition(self.topic, partition), c.offset_of(delta),
            c.log_append_time if c.log_append_time >= 0 else facts[4], None, facts[5], facts[6],
            facts[7] if len(facts) > 7 else -1,
        )  # fmt: skip

    @property
    def partition(self) -> int:
        return self._record[2]

    @property
    def offset_delta(self) -> int:
        return self._record[DELTA]

    @property
    def timestamp(self) -> int:
        return self._record[4]

    def retriable(self) -> bool:
        error = self.exception
        return bool(getattr(error, "retriable", False))

    def succeeded(self) -> bool:
        outcome = self._wait.outcome(self._record[DELTA])
        return outcome is not None and outcome[1] is None

    def failed(self) -> bool:
        outcome = self._wait.outcome(self._record[DELTA])
        return outcome is not None and outcome[1] is not None

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            try:
                callback(self)
            except Exception:
                log.exception("a future's callback raised")

    def add_done_callback(self, callback: Callable[[Future], None]) -> None:
        """``callback(future)`` once the future is done (at once if it is); an exception it
        raises is logged and never breaks delivery."""
        with self._cond:
            if not self.is_done:
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

    def get(self, timeout: float | None = None) -> RecordMetadata:
        with self._cond:
            if not self._cond.wait_for(lambda: self.is_done, timeout):
                raise KafkaTimeoutError(f"no result within {timeout} s")
        error = self.exception
        if error is not None:
            raise error
        value = self.value
        assert value is not None
        return value
