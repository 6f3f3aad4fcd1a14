"""The confluent API's records waiting in the app for their topic's metadata
(``confluent_records.serve_waiting``): a topic that becomes known in the middle of a pass
never lets a later record of it overtake an earlier one, and the queue is never empty while
a record still waits (the producing thread appends directly when it is)."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from shmkafka.facades.confluent.records import Unassigned, serve_waiting


class _Topics:
    def still_waiting(self, topic: str) -> None:
        return None


class _Handle:
    topics = _Topics()

    def connect_failure(self) -> None:
        return None


def _record(topic: str, n: int, deadline: float | None = None) -> Unassigned:
    far = time.monotonic() + 60 if deadline is None else deadline
    return Unassigned(topic, b"%d" % n, None, [], -1, 0, (None, None, b"", 0.0), far)


def test_a_topic_known_mid_pass_keeps_its_records_in_order() -> None:
    queue = deque(_record("t", n) for n in range(5))
    known = {"t": False}
    appended: list[bytes | None] = []
    sizes_seen: list[int] = []

    def append(handle: Any, record: Unassigned) -> bool:
        sizes_seen.append(len(queue))
        if not known[record.topic]:
            known[record.topic] = True  # (the metadata lands just after this record looked)
            return False
        appended.append(record.value)
        return True

    serve_waiting(queue, _Handle(), append, lambda r, e: None)
    assert appended == [] and [r.value for r in queue] == [b"%d" % n for n in range(5)]
    assert sizes_seen == [5]  # the first record waited: its later ones were not tried
    serve_waiting(queue, _Handle(), append, lambda r, e: None)
    assert appended == [b"%d" % n for n in range(5)] and not queue


def test_the_queue_holds_a_waiting_record_until_it_is_served() -> None:
    queue = deque([_record("slow", 0), _record("fast", 1), _record("slow", 2)])
    appended: list[bytes | None] = []

    def append(handle: Any, record: Unassigned) -> bool:
        assert queue, "the queue emptied while a record waited"
        if record.topic == "slow":
            return False
        appended.append(record.value)
        return True

    serve_waiting(queue, _Handle(), append, lambda r, e: None)
    assert appended == [b"1"]  # another topic's record goes on
    assert [r.value for r in queue] == [b"0", b"2"]


def test_records_past_their_deadline_fail_in_order() -> None:
    past = time.monotonic() - 1
    queue = deque([_record("t", 0, past), _record("t", 1, past), _record("t", 2)])
    failed: list[bytes | None] = []
    serve_waiting(queue, _Handle(), lambda h, r: False, lambda r, e: failed.append(r.value))
    assert failed == [b"0", b"1"] and [r.value for r in queue] == [b"2"]
