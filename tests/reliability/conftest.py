"""Fixtures and helpers of the catalogue tests: a one-node broker_stub, a producer on it,
reading back with confluent-kafka, and the pool's invariants."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.facades.kafka_python.producer import KafkaProducer
from shmkafka.pool.shared_pool import SharedPool
from tests.integration.kafka_io import consume_all


@pytest.fixture
def stub() -> Iterator[BrokerStub]:
    with BrokerStub(nodes=1, partitions=2) as s:
        yield s


def producer(stub: BrokerStub, pool: str, **kwargs: Any) -> KafkaProducer:
    settings: dict[str, Any] = {"linger_ms": 5, **kwargs}
    return KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool, **settings)


def read_back(stub: BrokerStub, topic: str, count: int, partitions: int = 2) -> list[Any]:
    return consume_all(
        SimpleNamespace(bootstrap=stub.bootstrap), topic, list(range(partitions)), count
    )


def invariants(pool: str) -> list[str]:
    handle = SharedPool.open(pool)
    try:
        return handle.check_invariants()
    finally:
        handle.detach()
