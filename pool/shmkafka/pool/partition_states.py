"""The Sender's read of the deques, every round: each partition with queued batches, with
what ``ready()`` needs to decide (``PartitionState``).

Rules:
- Read without locks: a snapshot that ``drain`` re-checks under the stripe lock.
- Only active deques are looked at; one found empty is handed to ``deactivate``, which
  takes it out of the active set under its stripe lock.
- A deque's route (topic, partition, leader) is as of the directory's version: looked up
  once per deque and version, as the directory's own snapshot is read once per version.
- It runs every round for every queued partition, so it reads little: one load of a
  deque's ends, one unpack of its first batch's descriptor (perf/bench_sender_round.py).
  That read is in C where the extension is built (``FastAppend.queued_heads``,
  _append_drain.c); ``_queued_heads`` is its Python twin and the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shmkafka.pool.shared_pool import SharedPool

if TYPE_CHECKING:
    from shmkafka.pool._append import FastAppend

# (deque id, first batch id, queued: 1, or 2 for more, slab count, attempts, write position,
# record count, created ms, last append ms)
Head = tuple[int, int, int, int, int, int, int, int, int]

FULL_MARGIN = 64  # a batch with less room than this takes no more records: it is full


@dataclass(slots=True)
class PartitionState:
    """The ``ready()`` inputs for one partition with queued batches (a snapshot: nothing
    changes it once made; not frozen, which would make each one cost five times more)."""

    deque_id: int
    topic: str
    partition: int
    leader: int
    queued: int
    first_batch_id: int
    first_size: int
    first_full: bool
    created_ms: int
    last_append_ms: int
    attempts: int


class PartitionStates:
    def __init__(
        self, pool: SharedPool, deactivate: Callable[[int], None],
        reader: FastAppend | None = None,
    ) -> None:  # fmt: skip
        self.pool = pool
        self._deactivate = deactivate
        self._heads = self._queued_heads if reader is None else reader.queued_heads
        self._slab_size = pool.config.slab_size
        self._max_records = pool.config.batch_max_records or 1 << 32
        self._routes: dict[int, tuple[str, int, int]] = {}  # deque id → topic, partition, leader
        self._routes_version = -1

    def read(self) -> list[PartitionState]:
        out: list[PartitionState] = []
        pool = self.pool
        snapshot = pool.directory.snapshot()
        if snapshot.version != self._routes_version:
            self._routes.clear()
            self._routes_version = snapshot.version
        heads, empties = self._heads(pool.deques_used())
        for deque_id in empties:
            self._deactivate(deque_id)
        routes, slab_size, max_records = self._routes, self._slab_size, self._max_records
        for deque_id, first, queued, slabs, attempts, write_pos, records, created, last in heads:
            route = routes.get(deque_id)
            if route is None:
                found = pool.directory.owner(deque_id)
                if found is None:
                    continue  # (no published topic owns it: nothing appends to it)
                topic, partition = found
                leader = snapshot.topics[topic][partition].leader
                route = routes[deque_id] = (topic, partition, leader)
            full = (
                queued > 1 or slabs * slab_size - write_pos < FULL_MARGIN or records >= max_records
            )
            out.append(PartitionState(deque_id, route[0], route[1], route[2], queued, first,
                                      write_pos, full, created, last, attempts))  # fmt: skip
        return out

    def _queued_heads(self, deques_used: int) -> tuple[list[Head], list[int]]:
        """Each active deque's head, and the active deques found empty: the Python twin of
        ``FastAppend.queued_heads``. Damaged ends (an id past the slabs) give neither: the
        Sender's sweep (sender/integrity.py) empties such a deque."""
        deques, head = self.pool.deques, self.pool.batches.head
        heads: list[Head] = []
        empties: list[int] = []
        for deque_id in deques.active(deques_used):
            first, queued = deques.first_and_length(deque_id)
            if first is None:
                if deques.is_empty(deque_id):
                    empties.append(deque_id)
                continue
            heads.append((deque_id, first, queued, *head(first)))
        return heads, empties
