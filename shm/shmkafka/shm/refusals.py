"""The refusals ring: topics the directory could not take, and the limit that refused each.

Rules:
- Written by the directory's writer (the Sender) under the directory lock: refusal n (from
  1) is written into entry (n - 1) % REFUSAL_SLOTS, then the header's refusals count moves
  to n (publish last). Apps read it without locks: a process remembers the count when it
  asks for a topic, and looks for that topic among the refusals recorded since.
"""

from __future__ import annotations

from dataclasses import dataclass

from shmkafka.shm.config import MAX_TOPIC_NAME
from shmkafka.shm.layout import (
    H_REFUSALS,
    REFUSAL,
    REFUSAL_SLOTS,
    REFUSED_MEMORY,
    REFUSED_PARTITIONS,
    REFUSED_TOPICS,
    U64,
)
from shmkafka.shm.segment import Segment

LIMIT_SETTINGS = {  # what raises each limit, for the errors that name it
    REFUSED_TOPICS: "max_topics (confluent: shmkafka.max.topics)",
    REFUSED_PARTITIONS: "max_partitions (confluent: shmkafka.max.partitions)",
    REFUSED_MEMORY: "the size of /dev/shm (docs/deployment.md)",
}


@dataclass(frozen=True)
class Refusal:
    """A topic the directory could not take, and the limit that refused it."""

    topic: str
    limit: int
    needed: int
    number: int = 0

    def message(self) -> str:
        what = {
            REFUSED_TOPICS: "the pool's directory holds max_topics topics already",
            REFUSED_PARTITIONS: f"its {self.needed} partitions exceed the pool's room "
            "for partitions",
            REFUSED_MEMORY: f"/dev/shm has no room for its {self.needed} partitions",
        }.get(self.limit, "a limit of the pool")
        setting = LIMIT_SETTINGS.get(self.limit, "")
        return f"topic {self.topic!r} cannot be added: {what} (raise {setting})"


def record_refusal(segment: Segment, refusal: Refusal) -> None:
    number: int = U64.unpack_from(segment.buf, H_REFUSALS)[0] + 1
    encoded = refusal.topic.encode("utf-8")
    REFUSAL.pack_into(
        segment.buf, segment.layout.refusal_at(number), len(encoded), encoded,
        refusal.limit, min(refusal.needed, 0xFFFFFFFF),
    )  # fmt: skip
    segment.store_u64(H_REFUSALS, number)  # publish last


def refusal_count(segment: Segment) -> int:
    count: int = U64.unpack_from(segment.buf, H_REFUSALS)[0]
    return count


def find_refusal(segment: Segment, topic: str, after: int = 0) -> Refusal | None:
    """The latest refusal of ``topic`` numbered above ``after``, among the last
    REFUSAL_SLOTS recorded."""
    last, encoded = refusal_count(segment), topic.encode("utf-8")
    for number in range(last, max(after, last - REFUSAL_SLOTS), -1):
        length, raw, limit, needed = REFUSAL.unpack_from(
            segment.buf, segment.layout.refusal_at(number)
        )
        if raw[: min(length, MAX_TOPIC_NAME)] == encoded:
            return Refusal(topic, limit, needed, number)
    return None
