"""Catalogue cases 27–29 through a loopback TCP proxy between the Sender and broker_stub:
a stall longer than the request timeout, a black hole, a reset right after a Produce went
through, and a truncated response. With idempotence every record ends up exactly once, in
order, and no future hangs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.facades.kafka_python.producer import KafkaProducer
from shmkafka.pool.stat import pool_stat
from tests.integration.kafka_io import consume_all
from tests.reliability.proxy import Proxy

pytestmark = pytest.mark.usefixtures("pool_removed")


@pytest.fixture
def proxied() -> Iterator[tuple[BrokerStub, Proxy]]:
    with BrokerStub(nodes=1, partitions=2) as stub:
        proxy = Proxy(("127.0.0.1", stub.ports[1]))
        stub.advertise(1, proxy.port)  # Metadata advertises the proxy: all traffic crosses it
        try:
            yield stub, proxy
        finally:
            proxy.close()


@pytest.mark.catalogue(27, 28, 29)
@pytest.mark.parametrize(
    ("kind", "seconds"),
    [("delay", 2.0), ("blackhole", 2.0), ("reset", 0.3), ("truncate", 0.3)],
)
def test_network_faults_lose_and_duplicate_nothing(
    proxied: tuple[BrokerStub, Proxy], pool_name: str, kind: str, seconds: float
) -> None:
    stub, proxy = proxied
    producer = KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{proxy.port}", pool=pool_name, acks="all", linger_ms=5,
        request_timeout_ms=1000, delivery_timeout_ms=30_000, retry_backoff_ms=50,
    )  # fmt: skip
    with producer:
        producer.partitions_for("net")
        futures = [producer.send("net", b"a%d" % i, key=b"k") for i in range(100)]
        producer.flush(20)
        proxy.set(kind, delay_s=seconds)
        threading.Timer(seconds, proxy.set, args=("pass",)).start()
        start = time.monotonic()
        futures += [producer.send("net", b"b%d" % i, key=b"k") for i in range(100)]
        producer.flush(30)  # bounded: no future hangs
        assert time.monotonic() - start < 30
        assert all(f.succeeded() for f in futures), [f.exception for f in futures if f.failed()]
        offsets = [f.get(0).offset for f in futures]
        assert offsets == sorted(offsets) and len(set(offsets)) == 200
        assert pool_stat(pool_name)["sender"]["retries"] > 0  # the fault did bite
    got = consume_all(SimpleNamespace(bootstrap=stub.bootstrap), "net", [0, 1], 200)
    values = [m.value() for m in got]
    assert len(values) == 200 == len(set(values))  # exactly once
