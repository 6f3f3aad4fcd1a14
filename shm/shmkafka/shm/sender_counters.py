"""The Sender's cumulative counters in the pool header, for ``shmkafka stat`` and the
metrics (metrics.py): written by the Sender only, read by anyone without a lock.

Rules:
- Only the running Sender writes them (layout.py: sender_stats, sender_bytes_sent,
  sender_record_stats), after every poll and before it wakes the apps whose records a
  response completed, so an app that saw its record acknowledged sees it counted.
- A new Sender starts them again from 0 (readers treat a decrease as a restart).
- Fields are read one by one: two counters read a moment apart may disagree by a round.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields

from shmkafka.shm.layout import (
    H_SENDER_BYTES,
    H_SENDER_RECORD_STATS,
    H_SENDER_STATS,
    SENDER_RECORD_STATS,
    SENDER_STATS,
    U64,
)
from shmkafka.shm.segment import Segment


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
    # sender_bytes_sent
    bytes_sent: int = 0

    def publish(self, segment: Segment) -> None:
        values = astuple(self)
        SENDER_STATS.pack_into(segment.buf, H_SENDER_STATS, *values[:6])
        SENDER_RECORD_STATS.pack_into(segment.buf, H_SENDER_RECORD_STATS, *values[6:10])
        segment.store_u64(H_SENDER_BYTES, self.bytes_sent)

    @classmethod
    def read(cls, segment: Segment) -> SenderCounters:
        buf = segment.buf
        values = (
            *SENDER_STATS.unpack_from(buf, H_SENDER_STATS),
            *SENDER_RECORD_STATS.unpack_from(buf, H_SENDER_RECORD_STATS),
            U64.unpack_from(buf, H_SENDER_BYTES)[0],
        )
        return cls(**dict(zip((f.name for f in fields(cls)), values, strict=True)))


# What ``shmkafka stat`` shows of them
SHOWN = ("produce_requests", "batches_sent", "records_sent", "retries", "errors", "expired",
         "records_failed", "records_retried")  # fmt: skip
