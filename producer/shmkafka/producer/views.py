"""What a client shows of its pool to the APIs above it (the facades, otel): its cluster
view, a topic's partitions, the Sender's statistics and broker table, metrics samples, and
whether the Sender runs and has heard from the cluster. The facades stand on this and on
``Client`` (client.py), never on the pool's or the shared memory's modules (tests/unit/
test_imports.py), so the pool's layout can change under them.

The types they need to name come from here too: ``ClusterView`` (a directory snapshot),
``BrokerStats`` and its ``BROKER_STATES``, ``MetricsWindow``, ``SenderEvent``, and
``native_check``, the switch of every C part.
"""

from __future__ import annotations

import time
from typing import Any

from shmkafka.pool import native
from shmkafka.pool.metrics import PoolSample, RateWindow, sample
from shmkafka.pool.sender_link import sender_alive
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.pool.stat import segment_stat
from shmkafka.shm.broker_stats import STATES as BROKER_STATES
from shmkafka.shm.broker_stats import BrokerStats
from shmkafka.shm.directory_view import DirectorySnapshot as ClusterView
from shmkafka.shm.directory_view import PartitionEntry
from shmkafka.shm.events import Event as SenderEvent

MetricsWindow = RateWindow
native_check = native.check

__all__ = [
    "BROKER_STATES", "BrokerStats", "ClusterView", "MetricsWindow", "PoolView", "SenderEvent",
    "native_check",
]  # fmt: skip


class PoolView:
    """A client's read-only view of its pool (``Client`` is one)."""

    pool: SharedPool
    durable_wait_ms: int

    @property
    def forked(self) -> bool:
        """This client came over a fork: it belongs to the parent process."""
        return self.pool.forked

    @property
    def durable_sends(self) -> bool:
        """pool_durability="sync": a record is on the disk before its send returns."""
        return self.pool.config.pool_durability == "sync"

    def wait_durable(self) -> None:
        """Return once every record this thread appended is on the disk; one commit covers
        every record appended meanwhile, by every process (pool/durability.py). A sync
        pool's ``send`` calls it unless ``waits_in_send`` is off (asyncio: the facade
        awaits it in a thread instead, never blocking the loop). Raises
        DurabilityTimeoutError if the disk takes more than delivery_timeout_ms."""
        committer = self.pool.committer
        assert committer is not None
        committer.wait_durable(self.durable_wait_ms / 1000)

    def partitions(self, topic: str) -> tuple[PartitionEntry, ...] | None:
        """The topic's partitions as the pool knows them now, or None."""
        return self.pool.directory.partitions(topic)

    def cluster_view(self) -> ClusterView:
        """The topics and partition leaders the pool's Sender knows now."""
        return self.pool.directory.snapshot()

    def stat(self) -> dict[str, Any]:
        """What ``shmkafka stat`` shows of the pool."""
        return segment_stat(self.pool.segment)

    def broker_stats(self) -> list[BrokerStats]:
        """The Sender's table of its broker connections."""
        return self.pool.brokers.read()

    def metrics_sample(self, previous: PoolSample | None = None) -> PoolSample:
        """A sample of the pool's counters, for a MetricsWindow (pool/metrics.py)."""
        return sample(self.pool.segment, previous=previous)

    def sender_running(self) -> bool:
        """A live Sender serves the pool."""
        return sender_alive(self.pool)

    def heard_from_cluster(self) -> bool:
        """The Sender has had an answer from the cluster: a producer id or metadata."""
        pool = self.pool
        return pool.producer_identity()[0] >= 0 or pool.directory.version() > 0

    def cluster_id(self, timeout: float | None) -> str | None:
        """The cluster id the pool's Sender read from the brokers, waiting up to ``timeout``
        s (None or negative: without end); None if it is not known by then."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while (found := self.pool.cluster_id()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.01)
        return found

    def known_cluster_id(self) -> str | None:
        """The cluster id, if the Sender has read it yet (no wait)."""
        return self.pool.cluster_id()
