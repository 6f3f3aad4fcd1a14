"""The bases of the facades: ``send`` (KafkaProducer) and ``produce`` (Producer) in C for
the common record (``_tracker_entry.c``, this module's C twin), and the append AIOKafkaProducer's
async ``send`` calls (``_fast_append``), or, when the extension is not built, these Python
ones, which go straight to the facade's own Python method (``_send`` / ``_produce``).

Rules:
- A facade's Python method is the reference: the C entry takes only records it would send
  unchanged, and hands it every other call with the same arguments.
- A facade binds its entry to its client (``Client.bind_entry`` with an ``EntryBinding``)
  once the client is up (again after a fork, with the child's client), and calls
  ``_fast_disable`` when it closes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shmkafka.pool import native

# the partitioners the C entry computes for keyed records (keyless: the pool's sticky one),
# as _tracker_entry.c numbers them
PARTITION_NONE, PARTITION_MURMUR2, PARTITION_CRC32, PARTITION_RANDOM = 0, 1, 2, 3


@dataclass(frozen=True)
class EntryBinding:
    """What a facade's C entry needs besides the client's own state: how it partitions keyed
    records, the size below which a record needs no size check, and for ``produce`` the
    configured callback, the report queue, the queue of records waiting for their topic and
    librdkafka's ``queue.buffering.max.messages``."""

    partitioner: int
    size_precheck: int
    on_delivery: Any = None
    reports: Any = None
    unassigned: Any = None
    max_messages: int = 0


class _PyEntry:
    """Without the extension the C path is never on."""

    def _fast_enable(self, *args: Any) -> None:
        return None

    def _fast_guard(self, buffer: Any, offset: int, expected: int) -> None:
        return None

    def _fast_disable(self) -> None:
        return None

    def _fast_enabled(self) -> bool:
        return False


class PySendEntry(_PyEntry):
    def send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> Any:  # fmt: skip
        """Append one record; returns a future of RecordMetadata (kafka-python's)."""
        return self._send(topic, value, key, headers, partition, timestamp_ms)

    def _send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
              partition: int | None = None, timestamp_ms: int | None = None) -> Any:  # fmt: skip
        raise NotImplementedError


class PyProduceEntry(_PyEntry):
    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Any = None, callback: Any = None, timestamp: int = 0,
                headers: Any = None) -> None:  # fmt: skip
        """Queue one record for sending; its delivery report is served by poll() or flush()
        (confluent-kafka's)."""
        self._produce(topic, value, key, partition, on_delivery, callback, timestamp, headers)

    def _produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                 on_delivery: Any = None, callback: Any = None, timestamp: int = 0,
                 headers: Any = None) -> None:  # fmt: skip
        raise NotImplementedError


class PyAppendEntry(_PyEntry):
    def _fast_append(self, topic: str, value: Any, key: Any, report: Any) -> bool | int:
        """Append the common record in C: True. Nothing written, the Python path takes it:
        False (not tried: always, without the extension), or C's verdict (an int)."""
        return False


# What the C append says of a record it left, nothing written (_tracker_internal.h's
# VERDICT_*, its twin): p >= 0 partition p needs a new batch; -2 - p partition p's stripe
# was taken; -1 resolve the record anew (the directory moved, or input C leaves to Python).
VERDICT_RESOLVE = -1
VERDICT_BUSY = -2


def verdict_of(verdict: int) -> tuple[int | None, bool]:
    """(the partition C chose, or None; whether it needs a new batch)."""
    if verdict >= 0:
        return verdict, True
    if verdict <= VERDICT_BUSY:
        return VERDICT_BUSY - verdict, False
    return None, False


if TYPE_CHECKING:
    SendEntry = PySendEntry
    ProduceEntry = PyProduceEntry
    AppendEntry = PyAppendEntry
else:
    try:
        native.check()
        from shmkafka.producer._tracker import AppendEntry, ProduceEntry, SendEntry
    except ImportError:  # not built
        SendEntry, ProduceEntry, AppendEntry = PySendEntry, PyProduceEntry, PyAppendEntry
