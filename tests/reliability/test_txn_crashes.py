"""Transactions through crashes (issue 25's crash semantics), on broker_stub, whose
coordinator writes markers, holds the last stable offset and hides aborted records from a
read_committed consumer:

- the app SIGKILLed mid-transaction: the Sender sees its owner dead and aborts at once
  (the peers leave it open until transaction.timeout.ms, and the partition's last stable
  offset stuck with it);
- the app SIGKILLed after it asked for a commit: the Sender finishes the commit;
- the Sender SIGKILLed before and after its EndTxn: the next Sender ends the transaction
  with the same outcome, and the app's call returns it;
- the Sender SIGKILLed mid-transaction: the app learns the transaction must be aborted,
  aborts, and goes on.
Nothing committed is lost or doubled; nothing aborted is read."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.kafka import KafkaProducer
from shmkafka.kafka.errors import KafkaError
from shmkafka.protocol.control import markers_of
from shmkafka.protocol.messages import FetchRequest, FetchResponse
from shmkafka.protocol.messages.fetch import FetchPartition, FetchTopic
from tests import ledger
from tests.integration.kafka_io import Cluster, cluster, read_committed
from tests.peers import Peer
from tests.reliability import txn_workers

pytestmark = pytest.mark.usefixtures("pool_removed")
TOPIC = "txcrash"


@pytest.fixture
def stub() -> Iterator[BrokerStub]:
    with BrokerStub(nodes=1, partitions=1) as s:
        s.create_topic(TOPIC, 1)
        yield s


def _peer(stub: BrokerStub) -> Peer:
    brokers = tuple(("127.0.0.1", port) for _, port in sorted(stub.ports.items()))
    return Peer("broker_stub", brokers, can_create_topics=True, auto_partitions=1)


def _stable_and_high(c: Cluster) -> tuple[int, int]:
    leader = c.leaders.setdefault((TOPIC, 0), c.peer.brokers[0])
    topics = (FetchTopic(TOPIC, (FetchPartition(0, fetch_offset=0),)),)
    request = FetchRequest(max_wait_ms=10, min_bytes=1, isolation_level=1, topics=topics)
    data = c.client(leader).call(request, FetchResponse).responses[0].partitions[0]
    return int(data.last_stable_offset), int(data.high_watermark)


def _markers(c: Cluster) -> list[str]:
    _, high = _stable_and_high(c)
    batches = c.fetch_batches(TOPIC, 0, high)
    return [m.control_type.name for b in batches for m in markers_of(b)]


def _markers_once(c: Cluster, count: int, timeout: float = 20) -> list[str]:
    """The partition's markers, once it holds ``count`` (a marker is readable once the
    replicas have it: the high watermark moves on the next replication round)."""
    deadline = time.monotonic() + timeout
    while len(markers := _markers(c)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return markers


def _wait_stable(c: Cluster, timeout: float) -> float:
    """Seconds until the last stable offset reaches the high watermark (no open txn)."""
    started = time.monotonic()
    while True:
        stable, high = _stable_and_high(c)
        if stable == high:
            return time.monotonic() - started
        assert time.monotonic() - started < timeout, f"stable {stable} < high {high}"
        time.sleep(0.05)


def _arm(monkeypatch: pytest.MonkeyPatch, point: str, marker: Path) -> None:
    monkeypatch.setenv("SHMKAFKA_FAULT_AT", point)
    monkeypatch.setenv("SHMKAFKA_FAULT_FILE", str(marker))


def _commit_more(stub: BrokerStub, pool_name: str, txn_id: str, count: int) -> None:
    p = KafkaProducer(bootstrap_servers=stub.bootstrap, transactional_id=txn_id, pool=pool_name)
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(count):
            p.send(TOPIC, b"after:%d" % i, partition=0)
        p.commit_transaction()
    finally:
        p.close()


def test_an_app_killed_mid_transaction_is_aborted_by_the_sender(
    stub: BrokerStub, pool_name: str
) -> None:
    txn_id = f"dead-{uuid.uuid4().hex[:6]}"
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    args = (pool_name, stub.bootstrap, txn_id, TOPIC, 20, "hang", ready)
    victim = ctx.Process(target=txn_workers.transact_then, args=args)
    victim.start()
    try:
        assert ready.wait(60)
        with cluster(_peer(stub)) as c:
            stable, high = _stable_and_high(c)
            assert (stable, high) == (0, 20)  # the open transaction holds the stable offset
            os.kill(victim.pid or 0, signal.SIGKILL)
            victim.join(10)
            took = _wait_stable(c, timeout=20)
            assert took < 5  # the owner check is every 0.5 s; the peers wait 60 s
            assert _markers(c) == ["ABORT"]
            _commit_more(stub, pool_name, txn_id, 5)
            assert _markers(c) == ["ABORT", "COMMIT"]
    finally:
        victim.kill()
    assert read_committed(stub.bootstrap, TOPIC, 5) == [b"after:%d" % i for i in range(5)]
    ledger.note("app killed mid-transaction", app_kills=1, records=25)


def test_an_app_killed_after_asking_to_commit_is_committed(
    stub: BrokerStub, pool_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "fired"
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    with monkeypatch.context() as armed:
        _arm(armed, "txn.commit_posted", marker)
        victim = ctx.Process(target=txn_workers.transact_then,
                             args=(pool_name, stub.bootstrap, f"cm-{uuid.uuid4().hex[:6]}",
                                   TOPIC, 20, "commit", ready))  # fmt: skip
        victim.start()
    victim.join(60)
    assert victim.exitcode == -signal.SIGKILL and marker.read_text() == "txn.commit_posted"
    with cluster(_peer(stub)) as c:
        _wait_stable(c, timeout=20)
        assert _markers(c) == ["COMMIT"]
    assert read_committed(stub.bootstrap, TOPIC, 20) == [b"open:%d" % i for i in range(20)]
    ledger.note("app killed after commit", app_kills=1, records=20)


@pytest.mark.parametrize(("point", "commit"), [
    ("txn.before_end", True), ("txn.end_sent", True), ("txn.before_end", False),
])  # fmt: skip
def test_a_sender_killed_at_end_txn_ends_it_the_same_way(
    stub: BrokerStub, pool_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    point: str, commit: bool,
) -> None:  # fmt: skip
    marker = tmp_path / "fired"
    with monkeypatch.context() as armed:
        _arm(armed, point, marker)  # (inherited by the Sender this producer starts)
        p = KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name,
                          transactional_id=f"se-{uuid.uuid4().hex[:6]}")  # fmt: skip
    try:
        p.init_transactions()
        first_sender = p._handle.pool.sender()[0]
        p.begin_transaction()
        futures = [p.send(TOPIC, b"r:%d" % i, partition=0) for i in range(30)]
        if commit:
            p.commit_transaction()
        else:
            p.flush()  # (sent, so that the abort needs its EndTxn)
            p.abort_transaction()
        assert marker.read_text() == point  # the Sender died there; the next one ended it
        assert p._handle.pool.sender()[0] != first_sender
        assert all(f.succeeded() for f in futures)
    finally:
        p.close()
    with cluster(_peer(stub)) as c:
        _wait_stable(c, timeout=20)
        assert _markers(c) == ["COMMIT" if commit else "ABORT"]
    expected = [b"r:%d" % i for i in range(30)] if commit else []
    assert read_committed(stub.bootstrap, TOPIC, len(expected)) == expected
    ledger.note(f"Sender killed at {point}", sender_kills=1, records=30)


def test_a_sender_killed_mid_transaction_makes_it_abortable(
    stub: BrokerStub, pool_name: str
) -> None:
    p = KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name,
                      transactional_id=f"sm-{uuid.uuid4().hex[:6]}")  # fmt: skip
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(10):
            p.send(TOPIC, b"lost:%d" % i, partition=0)
        p.flush()
        os.kill(p._handle.pool.sender()[0], signal.SIGKILL)
        with pytest.raises(KafkaError, match="Sender restarted during the transaction"):
            p.commit_transaction()
        p.abort_transaction()
        p.begin_transaction()
        p.send(TOPIC, b"kept", partition=0)
        p.commit_transaction()
    finally:
        p.close()
    with cluster(_peer(stub)) as c:
        assert _markers(c) == ["ABORT", "COMMIT"]
    assert read_committed(stub.bootstrap, TOPIC, 1) == [b"kept"]
    ledger.note("Sender killed mid-transaction", sender_kills=1, records=11)


def test_coordinator_faults_through_the_pool(pool_name: str) -> None:
    """broker_stub's coordinator faults under a producer of the pool: CONCURRENT_TRANSACTIONS
    on EndTxn, NOT_COORDINATOR on AddPartitionsToTxn, and the coordinator moved to another
    node mid-transaction. The Sender retries and looks the coordinator up again; both
    transactions commit, once each."""
    from shmkafka.protocol.error_codes import ErrorCode as E

    txn_id = f"faults-{uuid.uuid4().hex[:6]}"
    with BrokerStub(nodes=3, partitions=1, replication_factor=3) as stub:
        stub.create_topic(TOPIC, 1)
        p = KafkaProducer(bootstrap_servers=stub.bootstrap, transactional_id=txn_id,
                          pool=pool_name)  # fmt: skip
        try:
            p.init_transactions()
            stub.control("fail_api", api_key=26, code=E.CONCURRENT_TRANSACTIONS, count=2)
            stub.control("fail_api", api_key=24, code=E.NOT_COORDINATOR, count=1)
            p.begin_transaction()
            for i in range(10):
                p.send(TOPIC, b"one:%d" % i, partition=0)
            p.commit_transaction()
            p.begin_transaction()
            p.send(TOPIC, b"two:0", partition=0)
            p.flush()
            before = stub.run(lambda: stub.coordinator.node_for(txn_id))
            moved_to = next(n for n in sorted(stub.ports) if n != before)
            stub.move_coordinator(txn_id, moved_to)
            p.send(TOPIC, b"two:1", partition=0)
            p.commit_transaction()
        finally:
            p.close()
        left = stub.run(lambda: [rule.remaining for rule in stub.faults.api_errors])
        assert left == [0, 0]  # (each injected error was answered)
        with cluster(_peer(stub)) as c:
            c.leaders[(TOPIC, 0)] = ("127.0.0.1", stub.ports[stub.leader(TOPIC, 0)])
            assert _markers_once(c, 2) == ["COMMIT", "COMMIT"]
        expected = [b"one:%d" % i for i in range(10)] + [b"two:0", b"two:1"]
        assert read_committed(stub.bootstrap, TOPIC, len(expected)) == expected
    ledger.note("coordinator faults", records=12)


def test_a_failed_batch_makes_the_transaction_abortable_and_the_abort_a_new_epoch(
    stub: BrokerStub, pool_name: str
) -> None:
    """A batch the broker refuses for good (INVALID_RECORD) had its sequence: the
    transaction must be aborted, and the abort takes a new epoch (sequences from 0), so the
    next transaction on the same partition commits (without it: OUT_OF_ORDER_SEQUENCE)."""
    from shmkafka.protocol.error_codes import ErrorCode as E

    p = KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name,
                      transactional_id=f"gap-{uuid.uuid4().hex[:6]}")  # fmt: skip
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(TOPIC, b"first", partition=0).get(30)
        stub.control("fail_produce", topic=TOPIC, partition=0, code=E.INVALID_RECORD, count=1)
        refused = p.send(TOPIC, b"refused", partition=0)
        with pytest.raises(KafkaError):
            refused.get(30)
        with pytest.raises(KafkaError):
            p.commit_transaction()  # (abortable)
        epoch = p._handle.pool.producer_identity()[1]
        p.abort_transaction()
        assert p._handle.pool.producer_identity()[1] == epoch + 1  # a new epoch
        p.begin_transaction()
        p.send(TOPIC, b"after", partition=0)
        p.commit_transaction()
    finally:
        p.close()
    with cluster(_peer(stub)) as c:
        assert _markers_once(c, 2) == ["ABORT", "COMMIT"]
    assert read_committed(stub.bootstrap, TOPIC, 1) == [b"after"]
    ledger.note("failed batch in a transaction", records=3)
