"""A pool's producer metrics, named after the Java client's (``record-send-rate``, ...).

A ``PoolSample`` is everything the metrics need, read from the segment without locking and
without writing (so a watcher never disturbs the producers or the Sender): the Sender's
cumulative counters, its broker connections' counters, and the gauges of the moment. Rates
and averages come from two samples: ``kafka_metrics(older, newer)``; ``RateWindow`` keeps
the samples of the last ``window_s`` seconds, as Kafka's metrics average over their sample
window (``metrics.sample.window.ms`` x ``metrics.num.samples``, 30 s by default).

Rules:
- Counters are the Sender's, and start again at 0 when a new Sender takes the pool over; a
  counter that went down counts as a restart: its rate over that window is taken from 0.
- ``METRICS`` lists every metric: its Kafka name, its kind and what it means. Names Kafka's
  producer has are Kafka's; the pool's own (queue depth, processes, the Sender) are marked
  ``own`` so an exporter can name them apart.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import asdict, dataclass, field

from shmkafka.pool.bufferpool import BufferPool
from shmkafka.pool.shared_pool import internal_errors
from shmkafka.pool.stat import partition_batches
from shmkafka.shm.broker_stats import UP, BrokerTable
from shmkafka.shm.errors import ShmError
from shmkafka.shm.layout import IN_FLIGHT
from shmkafka.shm.procs import cpu_seconds, is_alive
from shmkafka.shm.segment import PREFIX, Segment, list_pools
from shmkafka.shm.sender_counters import SenderCounters, recorded_sender, recorded_sender_alive
from shmkafka.shm.slots import SlotTable

COUNTER, GAUGE, RATE = "counter", "gauge", "rate"  # RATE: per second, or an average


@dataclass(frozen=True)
class Metric:
    name: str  # the Kafka producer metric's name
    kind: str
    help: str
    own: bool = False  # not a Kafka producer metric: the pool's own


METRICS = (
    Metric("record-send-rate", RATE, "records sent per second"),
    Metric("record-send-total", COUNTER, "records sent"),
    Metric("record-error-rate", RATE, "records per second that failed (errors, expiry)"),
    Metric("record-error-total", COUNTER, "records that failed (errors, expiry)"),
    Metric("record-retry-rate", RATE, "records per second sent again after an error"),
    Metric("record-retry-total", COUNTER, "records sent again after an error"),
    Metric("request-rate", RATE, "produce requests per second"),
    Metric("request-total", COUNTER, "produce requests sent"),
    Metric("request-latency-avg", RATE, "average time from a produce request to its response (ms)"),
    Metric("records-per-request-avg", RATE, "average records per produce request"),
    Metric("batch-size-avg", RATE, "average bytes of a record batch sent"),
    Metric("outgoing-byte-rate", RATE, "bytes sent to brokers per second"),
    Metric("outgoing-byte-total", COUNTER, "bytes sent to brokers"),
    Metric("incoming-byte-rate", RATE, "bytes received from brokers per second"),
    Metric("incoming-byte-total", COUNTER, "bytes received from brokers"),
    Metric("connection-count", GAUGE, "broker connections up"),
    Metric("connection-creation-total", COUNTER, "broker connections opened"),
    Metric("connection-close-total", COUNTER, "broker connections closed"),
    Metric("buffer-total-bytes", GAUGE, "the pool's record memory (buffer.memory)"),
    Metric("buffer-available-bytes", GAUGE, "record memory not in use"),
    Metric("waiting-threads", GAUGE, "processes waiting for record memory"),
    Metric("records-queued", GAUGE, "records appended and not yet sent", own=True),
    Metric("batches-queued", GAUGE, "batches appended and not yet sent", own=True),
    Metric("batches-in-flight", GAUGE, "batches sent and not yet answered", own=True),
    Metric("batch-expired-total", COUNTER, "batches failed by delivery.timeout.ms", own=True),
    Metric("producer-processes", GAUGE, "live processes attached to the pool", own=True),
    Metric("sender-up", GAUGE, "1 while the pool's Sender runs", own=True),
    Metric("sender-cpu-seconds-total", COUNTER, "CPU time of the running Sender", own=True),
    Metric(
        "internal-error-total",
        COUNTER,
        "records failed by their own process because no "
        "result could come any more (a bug of shmkafka: never a normal path)",
        own=True,
    ),
)


@dataclass(frozen=True)
class PoolSample:
    pool: str
    at_s: float  # time.monotonic()
    counters: SenderCounters = field(default_factory=SenderCounters)  # cumulative, as read
    # the Sender's broker connections' cumulative counters
    bytes_in: int = 0
    connects: int = 0
    disconnects: int = 0
    # gauges
    connections_up: int = 0
    buffer_total: int = 0
    buffer_used: int = 0
    waiting: int = 0
    records_queued: int = 0
    batches_queued: int = 0
    batches_in_flight: int = 0
    processes: int = 0
    sender_up: bool = False
    sender_cpu_s: float = 0.0
    internal_errors: int = 0  # (shared_pool.py: internal_errors)
    sender: tuple[int, int] = (0, 0)  # the Sender's (pid, start time): whose counters these are


def sample(
    segment: Segment, now_s: float | None = None, previous: PoolSample | None = None
) -> PoolSample:
    """Read a pool's counters and gauges (no lock taken, nothing written). If the broker
    table is being rewritten on every attempt, its counters are ``previous``'s."""
    config = segment.layout.config
    pid, started, _ = recorded_sender(segment)
    sender_up = recorded_sender_alive(segment)
    brokers = BrokerTable(segment).read_whole()
    if brokers is None:
        old = previous or PoolSample(segment.pool, 0.0)
        links = (old.bytes_in, old.connects, old.disconnects, old.connections_up)
    else:
        links = (
            sum(b.traffic.rxbytes for b in brokers),
            sum(b.traffic.connects for b in brokers),
            sum(b.traffic.disconnects for b in brokers),
            sum(b.state == UP for b in brokers),
        )
    queued_records, queued_batches, in_flight = _queues(segment)
    return PoolSample(
        pool=segment.pool,
        at_s=time.monotonic() if now_s is None else now_s,
        counters=SenderCounters.read(segment),
        bytes_in=links[0],
        connects=links[1],
        disconnects=links[2],
        connections_up=links[3],
        buffer_total=config.num_slabs * config.slab_size,
        buffer_used=BufferPool.used_slabs(segment) * config.slab_size,
        waiting=BufferPool.waiting_processes(segment),
        records_queued=queued_records,
        batches_queued=queued_batches,
        batches_in_flight=in_flight,
        processes=sum(
            p != pid and is_alive(p, since) for _, p, since in SlotTable(segment).active()
        ),  # (the Sender has a slot too)
        sender_up=sender_up,
        sender_cpu_s=(cpu_seconds(pid) or 0.0) if sender_up else 0.0,
        internal_errors=internal_errors(segment),
        sender=(pid, started),
    )


def _queues(segment: Segment) -> tuple[int, int, int]:
    """(records queued, batches queued, batches in flight) over every partition."""
    records = queued = in_flight = 0
    for _, _, _, infos in partition_batches(segment):
        for info in infos:
            if info.state == IN_FLIGHT:
                in_flight += 1
            else:
                queued += 1
                records += info.record_count
    return records, queued, in_flight


def kafka_metrics(older: PoolSample | None, newer: PoolSample) -> dict[str, float]:
    """Every metric of ``METRICS``; rates and averages over ``older`` .. ``newer`` (0 with
    no older sample)."""
    n, c = newer, newer.counters
    values: dict[str, float] = {
        "record-send-total": c.records_sent,
        "record-error-total": c.records_failed,
        "record-retry-total": c.records_retried,
        "request-total": c.produce_requests,
        "outgoing-byte-total": c.bytes_sent,
        "incoming-byte-total": n.bytes_in,
        "connection-count": n.connections_up,
        "connection-creation-total": n.connects,
        "connection-close-total": n.disconnects,
        "buffer-total-bytes": n.buffer_total,
        "buffer-available-bytes": n.buffer_total - n.buffer_used,
        "waiting-threads": n.waiting,
        "records-queued": n.records_queued,
        "batches-queued": n.batches_queued,
        "batches-in-flight": n.batches_in_flight,
        "batch-expired-total": c.expired,
        "producer-processes": n.processes,
        "sender-up": float(n.sender_up),
        "sender-cpu-seconds-total": n.sender_cpu_s,
        "internal-error-total": n.internal_errors,
    }
    seconds = newer.at_s - older.at_s if older is not None else 0.0
    now, before = _totals(newer), _totals(older) if older is not None else None

    def delta(name: str) -> float:
        if before is None:
            return 0.0
        grown = now[name] - before[name]
        return float(grown if grown >= 0 else now[name])  # (a new Sender: from 0)

    def rate(name: str) -> float:
        return delta(name) / seconds if seconds > 0 else 0.0

    def ratio(top: str, bottom: str) -> float:
        below = delta(bottom)
        return delta(top) / below if below else 0.0

    values.update({
        "record-send-rate": rate("records_sent"),
        "record-error-rate": rate("records_failed"),
        "record-retry-rate": rate("records_retried"),
        "request-rate": rate("produce_requests"),
        "request-latency-avg": ratio("produce_latency_ms", "produce_responses"),
        "records-per-request-avg": ratio("records_sent", "produce_requests"),
        "batch-size-avg": ratio("batch_bytes", "batches_sent"),
        "outgoing-byte-rate": rate("bytes_sent"),
        "incoming-byte-rate": rate("bytes_in"),
    })  # fmt: skip
    return values


def _totals(sample: PoolSample) -> dict[str, int]:
    """A sample's cumulative values by name: the Sender's counters and bytes received."""
    return {**asdict(sample.counters), "bytes_in": sample.bytes_in}


class RateWindow:
    """A pool's samples of the last ``window_s`` seconds (the newest always kept)."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self.samples: deque[PoolSample] = deque()
        self.sender: tuple[int, int] | None = None  # the last Sender seen (pid, start time)

    def add(self, sample: PoolSample) -> None:
        if sample.sender != (0, 0):
            if self.sender not in (None, sample.sender):
                self.samples.clear()  # a new Sender: its counters started again from 0
            self.sender = sample.sender
        self.samples.append(sample)
        while len(self.samples) > 2 and sample.at_s - self.samples[1].at_s >= self.window_s:
            self.samples.popleft()

    def metrics(self) -> dict[str, float]:
        if not self.samples:
            raise ValueError("no sample yet")
        older = self.samples[0] if len(self.samples) > 1 else None
        return kafka_metrics(older, self.samples[-1])

    def sender_cpu_share(self) -> float | None:
        """The running Sender's CPU seconds per second over the window (None: fewer than two
        samples of it)."""
        if len(self.samples) < 2 or not self.samples[-1].sender_up:
            return None
        older, newer = self.samples[0], self.samples[-1]
        if not older.sender_up or newer.at_s <= older.at_s:
            return None
        return (newer.sender_cpu_s - older.sender_cpu_s) / (newer.at_s - older.at_s)


class PoolWatcher:
    """Samples pools over time: one pool, or every pool of this user as they come and go.

    A pool stays mapped while its name refers to it; a removed pool is dropped, and one
    created again under the same name starts a new window.
    """

    def __init__(
        self, pool: str | None = None, window_s: float = 30.0, must_exist: bool = True
    ) -> None:
        self.pool = pool
        self.window_s = window_s
        self.must_exist = must_exist and pool is not None
        self._segments: dict[str, Segment] = {}
        self._windows: dict[str, RateWindow] = {}
        self._unreadable: dict[str, int] = {}  # name → inode of a segment attach refused

    def sample(self) -> dict[str, dict[str, float]]:
        """Each pool's metrics, rates over the window. A pool missing, not this user's,
        half made or damaged is left out (``pool`` with ``must_exist``: its error raised)."""
        names = [self.pool] if self.pool else list_pools()
        for name in set(self._segments) - set(names):
            self._drop(name)
        out = {}
        for name in names:
            segment = self._segment(name)
            if segment is None:
                continue
            window = self._windows.setdefault(name, RateWindow(self.window_s))
            try:
                last = window.samples[-1] if window.samples else None
                window.add(sample(segment, previous=last))
            except Exception:  # a damaged pool: left out, never the end of the watch
                if self.must_exist:
                    raise
                self._drop(name)
                continue
            out[name] = window.metrics()
        return out

    def window(self, name: str) -> RateWindow:
        """The samples of a pool that ``sample`` returned."""
        return self._windows[name]

    def _segment(self, name: str) -> Segment | None:
        segment = self._segments.get(name)
        if segment is not None and not segment.is_current():
            self._drop(name)
            segment = None
        if segment is None:
            inode = _inode(name)
            if inode is not None and self._unreadable.get(name) == inode and not self.must_exist:
                return None  # (refused before: not waited for again, e.g. a half-made one)
            try:
                segment = Segment.attach(name)
            except (ShmError, OSError):
                if self.must_exist:
                    raise
                if inode is not None:
                    self._unreadable[name] = inode
                return None
            self._segments[name] = segment
        return segment

    def _drop(self, name: str) -> None:
        segment = self._segments.pop(name, None)
        if segment is not None:
            segment.close()
        self._windows.pop(name, None)

    def close(self) -> None:
        for name in list(self._segments):
            self._drop(name)


def _inode(name: str) -> int | None:
    try:
        return os.stat(f"/dev/shm/{PREFIX}{name}").st_ino
    except OSError:
        return None
