"""The Sender's fields in the pool header: who it is (``recorded_sender``) and its
cumulative counters, for ``shmkafka stat`` and the metrics (metrics.py): written by the
Sender only, read by anyone without a lock.

Rules:
- Only the running Sender writes them (layout.py: sender_stats, sender_bytes_sent,
  sender_record_stats), each in one aligned store, after every poll and before it wakes the
  apps whose records a response completed: an app woken for an acknowledged record sees it
  counted (failures found outside a poll, such as expiry, are counted at the next poll).
- A new Sender starts them again from 0 (readers treat a decrease as a restart).
- Fields are read one by one: two counters read a moment apart may disagree by a round.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from shmkafka.shm.layout import (
    H_SENDER_BYTES,
    H_SENDER_HEARTBEAT,
    H_SENDER_PID,
    H_SENDER_RECORD_STATS,
    H_SENDER_START,
    H_SENDER_STATS,
    I32,
    I64,
    SENDER_RECORD_STATS,
    SENDER_STATS,
)
from shmkafka.shm.procs import is_alive
from shmkafka.shm.segment import Segment


def recorded_sender(segment: Segment) -> tuple[int, int, int]:
    """(pid, start time, last heartbeat ms) of the Sender recorded in the header (0s: none;
    the pid is as the Sender's own PID namespace numbers it)."""
    buf = segment.buf
    return (
        I32.unpack_from(buf, H_SENDER_PID)[0],
        I64.unpack_from(buf, H_SENDER_START)[0],
        I64.unpack_from(buf, H_SENDER_HEARTBEAT)[0],
    )


def recorded_sender_alive(segment: Segment) -> bool:
    """The recorded Sender is a live process, as seen from this PID namespace."""
    pid, started, _ = recorded_sender(segment)
    return pid > 0 and is_alive(pid, started)


@dataclass
class SenderCounters:
    # SENDER_STATS, in its order
    produce_requests: int = 0
    batches_sent: int = 0
    records_sent: int = 0
    retries: int = 0  # batches sent again
    errors: int = 0  # batches failed
    expired: int = 0  # batches failed by delivery.timeout.ms
    # SENDER_RECORD_STATS, in its order
    records_failed: int = 0  # the records of failed and expired batches
    records_retried: int = 0
    produce_responses: int = 0
    produce_latency_ms: int = 0  # summed over the responses
    batch_bytes: int = 0  # bytes of the record batches sent (compressed, headers included)
    # sender_bytes_sent
    bytes_sent: int = 0

    def publish(self, segment: Segment) -> None:
        """Each field in one aligned 8-byte store: a reader never sees one torn (pack_into
        would zero the fields, then write them byte by byte)."""
        for offset, name in zip(_OFFSETS, _NAMES, strict=True):
            segment.store_u64(offset, getattr(self, name))

    @classmethod
    def read(cls, segment: Segment) -> SenderCounters:
        words = segment.words
        return cls(**{name: int(words[at >> 3]) for at, name in zip(_OFFSETS, _NAMES, strict=True)})


# Where each field is, in the fields' order
_OFFSETS = (
    *(H_SENDER_STATS + 8 * i for i in range(SENDER_STATS.size // 8)),
    *(H_SENDER_RECORD_STATS + 8 * i for i in range(SENDER_RECORD_STATS.size // 8)),
    H_SENDER_BYTES,
)
_NAMES = tuple(f.name for f in fields(SenderCounters))
assert len(_OFFSETS) == len(_NAMES)

# What ``shmkafka stat`` shows of them
SHOWN = ("produce_requests", "batches_sent", "records_sent", "retries", "errors", "expired",
         "records_failed", "records_retried")  # fmt: skip
