"""The pool's event ring: what the Sender tells every producer's app — errors that concern
the whole pool (a broker unreachable or unresolvable, all brokers down, authentication or
metadata refused) and the Sender's own log lines.

Rules:
- Only the Sender writes (it holds the pool's Sender lock), event after event into a ring of
  ``EVENT_SLOTS`` entries (layout.py, region EVENTS). An entry is published in three
  stores: its seq set to 0, its fields, then its seq set to its number; then the header's
  ``events_published`` counter moves on. A reader (any producer process, no lock) takes an
  entry only if its seq reads the same number before and after it copied the fields, so a
  slow reader that the writer laps skips what was overwritten instead of reading a torn one.
- Codes are librdkafka's (``_TRANSPORT`` -195 and so on), the vocabulary of confluent-kafka's
  ``error_cb``; the kafka-python API logs them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from shmkafka.shm.layout import E_SEQ, EVENT, EVENT_SLOTS, H_EVENTS_PUBLISHED, U64
from shmkafka.shm.segment import Segment

# librdkafka's local error codes the Sender reports (rdkafka.h, RD_KAFKA_RESP_ERR__*)
TRANSPORT = -195
RESOLVE = -193
ALL_BROKERS_DOWN = -187
SSL = -181
AUTHENTICATION = -169
FATAL = -150

ERROR, LOG = 0, 1  # kinds
TEXT_MAX = 230  # bytes of UTF-8 an entry holds (EVENT's last field)


@dataclass(frozen=True)
class Event:
    number: int
    wall_ms: int
    code: int
    level: int  # a logging level (20 INFO, 30 WARNING, 40 ERROR)
    kind: int
    fatal: bool
    text: str

    @property
    def is_error(self) -> bool:
        return self.kind == ERROR


class EventRing:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.layout = segment.layout
        self._writing = threading.Lock()  # the Sender's threads publish one at a time

    def published(self) -> int:
        """How many events were ever written (the next one is this + 1)."""
        return int(U64.unpack_from(self.segment.buf, H_EVENTS_PUBLISHED)[0])

    def publish(
        self, code: int, text: str, *, kind: int = ERROR, level: int = 40, fatal: bool = False,
        wall_ms: int,
    ) -> int:  # fmt: skip
        """Write the next event (the Sender only); returns its number."""
        with self._writing:
            return self._publish(code, text, kind, level, fatal, wall_ms)

    def _publish(self, code: int, text: str, kind: int, level: int, fatal: bool,
                 wall_ms: int) -> int:  # fmt: skip
        number = self.published() + 1
        at = self.layout.event_at(number)
        encoded = text.encode("utf-8", "replace")[:TEXT_MAX]
        self.segment.store_u64(at + E_SEQ, 0)
        EVENT.pack_into(
            self.segment.buf, at, 0, wall_ms, code, level // 10, kind, int(fatal),
            len(encoded), encoded,
        )  # fmt: skip
        self.segment.store_u64(at + E_SEQ, number)
        self.segment.store_u64(H_EVENTS_PUBLISHED, number)
        return number

    def read_after(self, seen: int) -> tuple[list[Event], int]:
        """The events after number ``seen`` still in the ring, and the new ``seen``."""
        last = self.published()
        out = []
        for number in range(max(seen + 1, last - EVENT_SLOTS + 1), last + 1):
            event = self._read(number)
            if event is not None:
                out.append(event)
        return out, max(seen, last)

    def _read(self, number: int) -> Event | None:
        buf, at = self.segment.buf, self.layout.event_at(number)
        seq, wall_ms, code, level, kind, fatal, size, raw = EVENT.unpack_from(buf, at)
        if seq != number or U64.unpack_from(buf, at + E_SEQ)[0] != number:
            return None  # being written, or overwritten by a later event
        text = raw[: min(size, TEXT_MAX)].decode("utf-8", "replace")
        return Event(number, wall_ms, code, level * 10, kind, bool(fatal), text)
