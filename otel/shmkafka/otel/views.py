"""The Sender's view of recent batches (how many requests carried each, the broker node, how
long it waited in the pool, the request's round trip), found by a record's offset.

Rules:
- The Sender writes its view into each batch's completion in shared memory
  (shm/rings.py); this process's completion thread hands every batch result to
  ``heard`` (producer/results.py's ``batch_listener``) before the records' reports and
  callbacks run, so a span ending in one finds its batch here.
- Per partition only the last ``PER_PARTITION`` batches are kept: a confluent report served
  much later than its batch completed (a ``poll`` that waited behind hundreds of batches of
  one partition) ends its span without the view.
- Only delivered batches are kept: a failed record's span has its error, not an offset.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from shmkafka.shm.rings import Completion, SenderView

PER_PARTITION = 256
BatchRange = tuple[int, int, SenderView]  # first offset, last offset, the view


class BatchViews:
    def __init__(self, per_partition: int = PER_PARTITION) -> None:
        self._per_partition = per_partition
        self._recent: dict[tuple[str, int], deque[BatchRange]] = {}
        self._lock = threading.Lock()

    def heard(self, futures: list[Any], completion: Completion) -> None:
        """A batch result's futures (in offset order) and its completion."""
        view = completion.view
        if view is None or completion.base_offset < 0 or completion.error_code:
            return
        first, last = futures[0], futures[-1]
        batch = (completion.offset_of(first.offset_delta), completion.offset_of(last.offset_delta),
                 view)  # fmt: skip
        key = (first.topic, first.partition)
        with self._lock:
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = deque(maxlen=self._per_partition)
            recent.append(batch)

    def find(self, topic: str, partition: int, offset: int) -> SenderView | None:
        """The view of the batch that holds this record, if it is among the recent ones."""
        with self._lock:
            recent = self._recent.get((topic, partition))
            for low, high, view in reversed(recent or ()):
                if low <= offset <= high:
                    return view
        return None
