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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shmkafka.pool.shared_pool import SharedPool

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
    def __init__(self, pool: SharedPool, deactivate: Callable[[int], None]) -> None:
        self.pool = pool
        self._deactivate = deactivate
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
        routes, deques, head = self._routes, pool.deques, pool.batches.head
        for deque_id in deques.active(pool.deques_used()):
            first, queued = deques.first_and_length(deque_id)
            if first is None:
                if deques.is_empty(deque_id):
                    self._deactivate(deque_id)
                continue
            route = routes.get(deque_id)
            if route is None:
                found = pool.directory.owner(deque_id)
                if found is None:
                    continue  # (no published topic owns it: nothing appends to it)
                topic, partition = found
                leader = snapshot.topics[topic][partition].leader
                route = routes[deque_id] = (topic, partition, leader)
            slabs, attempts, write_pos, records, created, last_append = head(first)
            full = (
                queued > 1
                or slabs * self._slab_size - write_pos < FULL_MARGIN
                or records >= self._max_records
            )
            out.append(PartitionState(deque_id, route[0], route[1], route[2], queued, first,
                                      write_pos, full, created, last_append, attempts))  # fmt: skip
        return out
