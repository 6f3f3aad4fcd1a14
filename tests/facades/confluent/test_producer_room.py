"""``Producer.produce`` on a full pool: it waits up to ``ROOM_WAIT_MS`` for room (librdkafka's
own queue would still take the record), then raises ``BufferError``; records it took are
all delivered once the broker drains."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.facades.confluent.producer import ROOM_WAIT_MS, Producer

pytestmark = pytest.mark.usefixtures("pool_removed")


@pytest.fixture
def stub() -> Iterator[BrokerStub]:
    with BrokerStub(nodes=1, partitions=2) as s:
        yield s


def test_a_full_pool_is_waited_for_then_buffer_error(stub: BrokerStub, pool_name: str) -> None:
    delivered: list[Any] = []
    producer = Producer({
        "bootstrap.servers": stub.bootstrap, "shmkafka.pool": pool_name, "linger.ms": 0,
        "batch.size": 16384, "queue.buffering.max.kbytes": 64,
        "message.timeout.ms": 60_000,
    })  # fmt: skip
    try:
        producer.produce("full", b"first", partition=0, on_delivery=lambda e, m: None)
        assert producer.flush(30) == 0
        stub.pause_node(1)  # nothing drains: the pool fills
        accepted, refused_after = 0, -1.0
        for i in range(1000):
            start = time.monotonic()
            try:
                producer.produce("full", b"x" * 1000, partition=i % 2,
                                 on_delivery=lambda e, m: delivered.append(e))  # fmt: skip
            except BufferError:
                refused_after = time.monotonic() - start
                break
            accepted += 1
        assert 0 < accepted < 1000, "the pool never filled"
        assert ROOM_WAIT_MS / 1000 * 0.9 <= refused_after < 2.0  # waited, and not for long
        stub.resume_node(1)
        assert producer.flush(30) == 0
        assert delivered == [None] * accepted  # every record it took, delivered
    finally:
        producer.close(5)
