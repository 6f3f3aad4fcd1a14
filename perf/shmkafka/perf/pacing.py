"""The timed loop every client runs: records handed out in chunks, paced, and sampled.

Rules:
- A chunk is at most ``MAX_CHUNK`` records and at most ``CHUNK_BYTES`` of values, so that
  the stop condition (records, or the deadline of ``--duration``) is checked often even for
  100 KB records; with a rate (``--throughput``, ``--fleet``) a chunk is at most 1 ms of
  records, and the loop waits (the confluent API clients serving their reports meanwhile)
  until each chunk is due.
- Latency is sampled on the first record of a chunk: every ``records / LATENCY_SAMPLES``
  records, or every ``duration / LATENCY_SAMPLES`` seconds with ``--duration``, so about
  ``LATENCY_SAMPLES`` per process whatever the record size.
- Housekeeping (counting done futures, ``poll(0)``) comes every ``MAX_CHUNK`` records, or
  ``CHUNK_BYTES`` of values if that is fewer.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

from shmkafka.perf.workload import Workload

LATENCY_SAMPLES = 2000
MAX_CHUNK = 1000
CHUNK_BYTES = 100_000
MAX_AHEAD_S = 0.001  # how far ahead of its rate a paced loop may run before it waits

Records = Iterator[tuple[bytes, bytes | None]]


class Pacer:
    """Iterating gives the size of each chunk to send now, until the run is over; ``sample``
    says whether the chunk's first record is a latency sample, ``housekeep`` whether the
    loop should count its done futures or poll once the chunk is sent."""

    def __init__(self, work: Workload, progress: Any,
                 wait: Callable[[float], Any] = time.sleep) -> None:  # fmt: skip
        self.rate = work.per_process_rate()
        self.records = None if work.duration_s is not None else work.records
        self.duration_s = work.duration_s
        self.every = max(1, min(MAX_CHUNK, CHUNK_BYTES // max(1, work.record_size)))
        self.spacing = max(1, (self.records or 0) // LATENCY_SAMPLES)
        self.interval_s = (self.duration_s or 0.0) / LATENCY_SAMPLES
        chunk = self.every if self.records is None else min(self.every, self.spacing)
        if self.rate is not None:
            chunk = min(chunk, max(1, int(self.rate * MAX_AHEAD_S)))
        self.chunk = chunk
        self.progress, self.wait = progress, wait
        self.sent = 0
        self.sample = self.housekeep = False

    def __iter__(self) -> Iterator[int]:
        start = time.monotonic()
        deadline = None if self.duration_s is None else start + self.duration_s
        rate, records, chunk, every = self.rate, self.records, self.chunk, self.every
        next_count, next_time, sent = 0, start, 0
        while True:
            n = chunk if records is None else min(chunk, records - sent)
            if n <= 0:
                return
            now = time.monotonic()
            if rate is not None:
                due = start + sent / rate
                if deadline is not None and due >= deadline:
                    return
                while due - now > MAX_AHEAD_S:
                    self.wait(due - now)
                    now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            self.progress.value = sent
            if records is None:
                self.sample = now >= next_time
                if self.sample:
                    next_time = now + self.interval_s
            else:
                self.sample = sent >= next_count
                if self.sample:
                    next_count += self.spacing
            self.housekeep = sent // every != (sent + n) // every
            sent += n
            self.sent = sent
            yield n


def latency_probe(latencies: list[float]) -> Callable[..., None]:
    """A callback that records the send → ack time of a record sent just after this call."""
    t0 = time.monotonic()

    def done(*_: Any) -> None:
        latencies.append((time.monotonic() - t0) * 1e3)

    return done


class Futures(deque[Any]):
    """Futures in send order, the done ones counted and dropped from the front."""

    def __init__(self) -> None:
        super().__init__()
        self.done = self.errors = 0

    def settle(self) -> None:
        while self and self[0].is_done:
            self.errors += self.popleft().failed()
            self.done += 1

    def sent(self) -> int:
        return self.done + len(self)

    def failed(self) -> int:
        """Errors among every future (call once all are done)."""
        return self.errors + sum(1 for f in self if f.failed())


def future_loop(
    send: Callable[..., Any], attach: Callable[[Any, Callable[..., None]], Any], topic: str,
    pacer: Pacer, records: Records,
) -> tuple[Futures, list[float]]:  # fmt: skip
    """The timed loop of the kafka-python API clients (``send`` returns a future). As a
    long-running producer would, it keeps the futures not yet done; at each housekeeping the
    done ones are counted (``futures.done``, ``futures.errors``) and let go."""
    futures, latencies = Futures(), list[float]()
    append = futures.append
    for chunk in pacer:
        n = chunk
        if pacer.sample:
            value, key = next(records)
            probe = latency_probe(latencies)
            future = send(topic, value, key=key)
            append(future)
            attach(future, probe)
            n -= 1
        for value, key in islice(records, n):
            append(send(topic, value, key=key))
        if pacer.housekeep:
            futures.settle()
    return futures, latencies


def produce_retrying(
    producer: Any, topic: str, value: bytes, key: bytes | None, callback: Callable[..., None]
) -> None:
    """confluent-kafka's produce(), waiting (serving reports) while its queue is full."""
    while True:
        try:
            producer.produce(topic, value, key, on_delivery=callback)
            return
        except BufferError:
            producer.poll(0.005)


def report_loop(
    producer: Any, topic: str, pacer: Pacer, records: Records,
    on_delivery: Callable[[Any, Any], None],
) -> list[float]:  # fmt: skip
    """The timed loop of the confluent-kafka API clients: every record reports to
    ``on_delivery`` (a sampled one through its latency probe first); reports are served by
    ``poll(0)`` at each housekeeping, by the pacer's waits and while the queue is full."""
    produce, poll, latencies = producer.produce, producer.poll, list[float]()
    for chunk in pacer:
        n = chunk
        if pacer.sample:
            value, key = next(records)
            probe = latency_probe(latencies)

            def sampled(err: Any, msg: Any, probe: Callable[..., None] = probe) -> None:
                probe()
                on_delivery(err, msg)

            produce_retrying(producer, topic, value, key, sampled)
            n -= 1
        for value, key in islice(records, n):
            try:
                produce(topic, value, key, on_delivery=on_delivery)
            except BufferError:
                produce_retrying(producer, topic, value, key, on_delivery)
        if pacer.housekeep:
            poll(0)
    return latencies
