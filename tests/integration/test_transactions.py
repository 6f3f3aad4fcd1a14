"""Transactions through the pool, on the real peers (Tansu and librdkafka's mock cluster):
kafka-python's API here; the log must hold each transaction's data batches, each followed
by its COMMIT or ABORT marker, and nothing else."""

from __future__ import annotations

import time
import uuid

import pytest

from shmkafka.kafka import KafkaProducer
from shmkafka.kafka.errors import IllegalStateError, KafkaError, ProducerFencedError
from shmkafka.protocol.control import markers_of
from shmkafka.protocol.records import RecordBatch
from tests.conftest import wait_removed
from tests.integration.kafka_io import Cluster, cluster, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")


def _txn_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def log_of(c: Cluster, peer: Peer, topic: str, partition: int, markers: int) -> list[RecordBatch]:
    """The partition's batches, once it holds ``markers`` control batches."""
    deadline = time.monotonic() + 15
    while True:
        end = c.list_offset(topic, partition, -1)  # (LATEST: the high watermark)
        batches = c.fetch_batches(topic, partition, end, verify_crc=peer.name != "mock")
        if sum(b.header.is_control for b in batches) >= markers or time.monotonic() > deadline:
            return batches
        time.sleep(0.1)


def outcomes(batches: list[RecordBatch]) -> list[tuple[str, list[bytes]]]:
    """[("COMMIT" | "ABORT", the values of the data batches before that marker), ...]"""
    out, pending = [], []
    for batch in batches:
        if batch.header.is_control:
            (marker,) = markers_of(batch)
            out.append((marker.control_type.name, pending))
            pending = []
        else:
            assert batch.header.is_transactional
            pending += [r.value for r in batch.records]
    assert not pending, f"data after the last marker: {pending}"
    return out


def test_kafka_python_commit_and_abort(peer: Peer, pool_name: str) -> None:
    topic = unique_topic("txkp")
    with cluster(peer) as c:
        c.ensure_topic(topic, 1)
        p = KafkaProducer(bootstrap_servers=peer.bootstrap, transactional_id=_txn_id("kp"),
                          pool=pool_name)  # fmt: skip
        try:
            p.init_transactions()
            p.begin_transaction()
            futures = [p.send(topic, f"c{i}".encode(), partition=0) for i in range(5)]
            p.commit_transaction()
            assert all(f.is_done and f.succeeded() for f in futures)
            p.begin_transaction()
            aborted = [p.send(topic, f"a{i}".encode(), partition=0) for i in range(3)]
            p.flush()
            p.abort_transaction()
            assert all(f.is_done for f in aborted)
            p.begin_transaction()
            p.send(topic, b"last", partition=0)
            p.commit_transaction()
        finally:
            p.close()
        batches = log_of(c, peer, topic, 0, 3)
    assert outcomes(batches) == [
        ("COMMIT", [f"c{i}".encode() for i in range(5)]),
        ("ABORT", [f"a{i}".encode() for i in range(3)]),
        ("COMMIT", [b"last"]),
    ]
    producer_ids = {b.header.producer_id for b in batches}
    assert len(producer_ids) == 1


def test_kafka_python_state_errors(tansu: Peer, pool_name: str) -> None:
    """kafka-python's errors for calls out of order (checked against kafka-python itself in
    tests/conformance)."""
    p = KafkaProducer(bootstrap_servers=tansu.bootstrap, transactional_id=_txn_id("st"),
                      pool=pool_name)  # fmt: skip
    try:
        with pytest.raises(KafkaError):
            p.begin_transaction()  # before init
        p.init_transactions()
        with pytest.raises(IllegalStateError, match="Cannot call send in state READY"):
            p.send("t", b"x")
        with pytest.raises(KafkaError, match="Invalid transition"):
            p.commit_transaction()
        p.begin_transaction()
        with pytest.raises(KafkaError, match="Invalid transition"):
            p.begin_transaction()
        p.abort_transaction()
    finally:
        p.close()
    plain = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name + "x")
    try:
        with pytest.raises(IllegalStateError, match="without setting a transactional_id"):
            plain.init_transactions()
    finally:
        plain.close()
    wait_removed(pool_name + "x")


def test_a_second_producer_fences_the_first(peer: Peer, pool_name: str) -> None:
    txn_id, topic = _txn_id("fence"), unique_topic("txfence")
    with cluster(peer) as c:
        c.ensure_topic(topic, 1)
        conf = {"bootstrap_servers": peer.bootstrap, "transactional_id": txn_id}
        first = KafkaProducer(pool=pool_name, **conf)
        second = KafkaProducer(pool=pool_name, **conf)
        try:
            first.init_transactions()
            first.begin_transaction()
            first.send(topic, b"fenced", partition=0)
            second.init_transactions()
            with pytest.raises(ProducerFencedError):
                first.commit_transaction()
            second.begin_transaction()
            second.send(topic, b"kept", partition=0)
            second.commit_transaction()
        finally:
            first.close(0)
            second.close()
        batches = log_of(c, peer, topic, 0, 1)
    committed = [values for kind, values in outcomes(batches) if kind == "COMMIT"]
    assert committed == [[b"kept"]]
