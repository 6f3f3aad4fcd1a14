"""The pool's own figures as OpenTelemetry instruments, read from shared memory.

Rules:
- Every pool this process's producers use is observed (``joined_pools``), but a pool's
  figures are reported by one process only: the live process holding the pool's lowest slot.
  A host with 32 workers on one pool reports one copy of its Sender's counters, not 32;
  when that process exits, the next lowest reports them.
- Each observation reads the segment without a lock (a moment's view, as ``shmkafka stat``
  does), at the meter's export interval, never on the send path.
- The Sender's counters are monotonic sums of the Sender's life (ObservableCounter); use and
  depth are gauges. Every point carries ``shmkafka.pool.name``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from shmkafka.pool.bufferpool import BufferPool
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.pool.stat import partition_batches
from shmkafka.producer.process_slot import joined_pools
from shmkafka.shm.sender_counters import SenderCounters

POOL = "shmkafka.pool.name"
# instrument name → (the SenderCounters field it reports, unit, description)
SENDER_COUNTERS = {
    "shmkafka.sender.requests": ("produce_requests", "{request}", "Produce requests sent."),
    "shmkafka.sender.retries": ("retries", "{batch}", "Batches sent again after an error."),
    "shmkafka.sender.errors": ("errors", "{batch}", "Batches failed by a broker's error."),
    "shmkafka.sender.expired": ("expired", "{batch}", "Batches failed by delivery.timeout.ms."),
    "shmkafka.sender.records.sent": ("records_sent", "{record}", "Records acknowledged."),
    "shmkafka.sender.records.failed": ("records_failed", "{record}", "Records failed."),
}


active = False  # set while an instrumentor is on (an instrument cannot be taken back)


def reporting_pools() -> list[SharedPool]:
    """The pools this process reports: those whose lowest live slot is its own (none while
    no instrumentor is on)."""
    if not active:
        return []
    out = []
    for pool in joined_pools():
        live = pool.slots.live()
        if live and min(live) == pool.slot:
            out.append(pool)
    return out


def register(meter: Meter) -> None:
    """Create the pool's instruments on ``meter`` (observed at each export)."""
    meter.create_observable_gauge(
        "shmkafka.pool.buffer.usage", [_buffer_usage], unit="By",
        description="Bytes of the pool's buffer memory held by records not yet acknowledged.",
    )  # fmt: skip
    meter.create_observable_gauge(
        "shmkafka.pool.buffer.limit", [_buffer_limit], unit="By",
        description="The pool's buffer memory (buffer.memory).",
    )  # fmt: skip
    meter.create_observable_gauge(
        "shmkafka.pool.queue.depth", [_queue_depth], unit="{record}",
        description="Records in the pool's batches, waiting to be sent or acknowledged.",
    )  # fmt: skip
    for name, (field, unit, description) in SENDER_COUNTERS.items():
        meter.create_observable_counter(name, [_sender_counter(field)], unit=unit,
                                        description=description)  # fmt: skip


def _buffer_usage(options: CallbackOptions) -> Iterable[Observation]:
    for pool in reporting_pools():
        used = BufferPool.used_slabs(pool.segment) * pool.config.slab_size
        yield Observation(used, {POOL: pool.name})


def _buffer_limit(options: CallbackOptions) -> Iterable[Observation]:
    for pool in reporting_pools():
        yield Observation(pool.config.buffer_memory, {POOL: pool.name})


def _queue_depth(options: CallbackOptions) -> Iterable[Observation]:
    for pool in reporting_pools():
        depth = sum(
            info.record_count
            for _, _, _, infos in partition_batches(pool.segment)
            for info in infos
        )
        yield Observation(depth, {POOL: pool.name})


def _sender_counter(field: str) -> Any:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        for pool in reporting_pools():
            counters = SenderCounters.read(pool.segment)
            yield Observation(getattr(counters, field), {POOL: pool.name})

    return observe
