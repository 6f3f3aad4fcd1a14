"""A partition count increased while producers send (a fault of the soak's nemesis, at the
smallest scale): the pool's Sender learns the new partitions at its next metadata refresh,
records reach them, and every record is delivered exactly once, in order per partition."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.facades.kafka_python.producer import KafkaProducer
from tests.integration.kafka_io import consume_all

pytestmark = pytest.mark.usefixtures("pool_removed")


def test_records_reach_partitions_added_mid_run(pool_name: str) -> None:
    with BrokerStub(nodes=3, partitions=2, replication_factor=2) as stub:
        stub.create_topic("grow", 2)
        producer = KafkaProducer(
            bootstrap_servers=stub.bootstrap, pool=pool_name, acks="all", linger_ms=5,
            enable_idempotence=True, metadata_max_age_ms=500,
        )  # fmt: skip
        with producer:
            futures = [producer.send("grow", b"a%d" % i) for i in range(200)]
            producer.flush(20)
            stub.add_partitions("grow", 4)
            assert stub.partition_count("grow") == 4
            deadline = time.monotonic() + 20
            while {2, 3} - set(producer.partitions_for("grow")):
                assert time.monotonic() < deadline, producer.partitions_for("grow")
                time.sleep(0.1)
            futures += [producer.send("grow", b"b%d" % i, key=b"k%d" % i) for i in range(400)]
            producer.flush(20)
            outcomes = [f.get(0) for f in futures]
        assert {m.partition for m in outcomes[200:]} == {0, 1, 2, 3}
        got = consume_all(SimpleNamespace(bootstrap=stub.bootstrap), "grow", [0, 1, 2, 3], 600)
    values = [m.value() for m in got]
    assert sorted(values) == sorted([b"a%d" % i for i in range(200)] +
                                    [b"b%d" % i for i in range(400)])  # fmt: skip
    sent_order: dict[int, list[int]] = {}  # partition → send order of its records, by offset
    for m in sorted(got, key=lambda m: (m.partition(), m.offset())):
        rank = int(m.value()[1:]) + (200 if m.value().startswith(b"b") else 0)
        sent_order.setdefault(m.partition(), []).append(rank)
    assert all(ranks == sorted(ranks) for ranks in sent_order.values())
