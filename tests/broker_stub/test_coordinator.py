"""broker_stub's transaction coordinator, driven by the transactional state machine
(sender/txn_manager.py) over the wire: markers in the log, the last stable offset held while
a transaction is open, aborted transactions hidden from a read_committed confluent-kafka
consumer, offsets committed with the transaction, and each injected coordinator fault
(CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, a moved coordinator, fencing, INVALID_TXN_STATE,
an expired transaction)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from shmkafka.broker_stub.coordinator import CommittedOffset
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.protocol.control import ControlType, markers_of
from shmkafka.protocol.error_codes import ErrorCode as E
from shmkafka.protocol.messages import FetchRequest, FetchResponse
from shmkafka.protocol.messages.fetch import FetchPartition, FetchTopic
from shmkafka.protocol.txn_errors import TxnAction
from shmkafka.sender.txn_manager import PendingOffsets, State, TransactionManager
from tests.integration.kafka_io import (
    Cluster,
    cluster,
    drive_transaction,
    read_committed,
    transactional_batch,
)
from tests.peers import Peer

TOPIC = "txn"


@pytest.fixture
def stub() -> Iterator[BrokerStub]:
    with BrokerStub(nodes=3, partitions=1, replication_factor=3) as s:
        yield s


def _peer(stub: BrokerStub) -> Peer:
    brokers = tuple(("127.0.0.1", port) for _, port in sorted(stub.ports.items()))
    return Peer("broker_stub", brokers, can_create_topics=True, auto_partitions=1)


def _ready(c: Cluster, txn_id: str, **kwargs: int) -> TransactionManager:
    tm = TransactionManager(txn_id, retry_backoff_ms=10, **kwargs)
    tm.init_transactions()
    drive_transaction(tm, c, lambda: tm.state is State.READY)
    return tm


def _produce(c: Cluster, tm: TransactionManager, sequence: int, value: bytes) -> int:
    batch = transactional_batch(value, tm.producer_id, tm.producer_epoch, sequence)
    return int(c.produce(TOPIC, 0, batch, transactional_id=tm.transactional_id).error_code)


def _transaction(c: Cluster, tm: TransactionManager, sequence: int, value: bytes,
                 commit: bool) -> None:  # fmt: skip
    tm.begin()
    tm.add_partition(TOPIC, 0)
    drive_transaction(tm, c, lambda: tm.send_allowed(TOPIC, 0))
    assert _produce(c, tm, sequence, value) == 0
    tm.commit() if commit else tm.abort()
    drive_transaction(tm, c, lambda: tm.state is State.READY)


def _fetch(c: Cluster, committed: bool) -> tuple[int, list[tuple[int, int]], bytes | None]:
    topics = (FetchTopic(TOPIC, (FetchPartition(0, fetch_offset=0),)),)
    request = FetchRequest(max_wait_ms=10, min_bytes=1, isolation_level=int(committed),
                           topics=topics)  # fmt: skip
    data = c.client(c.leaders[(TOPIC, 0)]).call(request, FetchResponse).responses[0].partitions[0]
    aborted = [(a.producer_id, a.first_offset) for a in data.aborted_transactions or ()]
    records = None if data.records is None else bytes(data.records)
    return int(data.last_stable_offset), aborted, records


def test_markers_stable_offset_and_read_committed(stub: BrokerStub) -> None:
    with cluster(_peer(stub)) as c:
        c.ensure_topic(TOPIC, 1)
        tm = _ready(c, "tx-a")
        _transaction(c, tm, 0, b"committed", commit=True)
        tm.begin()
        tm.add_partition(TOPIC, 0)
        drive_transaction(tm, c, lambda: tm.send_allowed(TOPIC, 0))
        assert _produce(c, tm, 1, b"aborted") == 0
        stable, _, _ = _fetch(c, committed=True)
        assert stable == 2  # held at the open transaction's first offset (after 0 and its marker)
        tm.abort()
        drive_transaction(tm, c, lambda: tm.state is State.READY)
        _transaction(c, tm, 2, b"after", commit=True)
        stable, aborted, _ = _fetch(c, committed=True)
        batches = c.fetch_batches(TOPIC, 0, 6)
    assert stable == 6 and aborted == [(tm.producer_id, 2)]
    assert [[m.control_type for m in markers_of(b)] for b in batches] == [
        [],
        [ControlType.COMMIT],
        [],
        [ControlType.ABORT],
        [],
        [ControlType.COMMIT],
    ]
    assert read_committed(stub.bootstrap, TOPIC, 2) == [b"committed", b"after"]


def test_offsets_are_committed_with_the_transaction_only(stub: BrokerStub) -> None:
    with cluster(_peer(stub)) as c:
        c.ensure_topic(TOPIC, 1)
        tm = _ready(c, "tx-offsets")
        for commit, offset in ((False, 5), (True, 9)):
            tm.begin()
            tm.send_offsets(PendingOffsets("group-1", {("in", 0): (offset, None)}))
            drive_transaction(tm, c, lambda: tm._offsets is None)
            committed = stub.coordinator.committed_offsets.get("group-1", {}).get(("in", 0))
            assert committed is None or committed.offset != offset
            tm.commit() if commit else tm.abort()
            drive_transaction(tm, c, lambda: tm.state is State.READY)
    assert stub.coordinator.committed_offsets["group-1"] == {("in", 0): CommittedOffset(9)}


def test_injected_coordinator_faults_are_retried_or_looked_up(stub: BrokerStub) -> None:
    with cluster(_peer(stub)) as c:
        c.ensure_topic(TOPIC, 1)
        tm = _ready(c, "tx-faults")
        stub.control("fail_api", api_key=26, code=E.CONCURRENT_TRANSACTIONS, count=2)  # EndTxn
        stub.control("fail_api", api_key=24, code=E.NOT_COORDINATOR, count=1)  # AddPartitions
        _transaction(c, tm, 0, b"one", commit=True)
        assert stub.faults.api_errors[0].remaining == 0 == stub.faults.api_errors[1].remaining
        # the coordinator moves between AddPartitionsToTxn and EndTxn
        tm.begin()
        tm.add_partition(TOPIC, 0)
        drive_transaction(tm, c, lambda: tm.send_allowed(TOPIC, 0))
        assert _produce(c, tm, 1, b"two") == 0
        before = tm.coordinator
        moved_to = next(n for n in sorted(stub.ports) if n != before)
        stub.control("move_coordinator", transactional_id="tx-faults", to=moved_to)
        tm.commit()
        drive_transaction(tm, c, lambda: tm.state is State.READY)
        assert tm.coordinator == moved_to and tm.completed == [True, True]
    assert read_committed(stub.bootstrap, TOPIC, 2) == [b"one", b"two"]


def test_a_second_producer_fences_the_first(stub: BrokerStub) -> None:
    with cluster(_peer(stub)) as c:
        c.ensure_topic(TOPIC, 1)
        first = _ready(c, "tx-shared")
        first.begin()
        first.add_partition(TOPIC, 0)
        drive_transaction(first, c, lambda: first.send_allowed(TOPIC, 0))
        assert _produce(c, first, 0, b"of the first") == 0
        second = _ready(c, "tx-shared")  # aborts the first's open transaction
        assert second.producer_epoch == first.producer_epoch + 1
        assert _produce(c, first, 1, b"late") == E.PRODUCER_FENCED
        first.commit()
        drive_transaction(first, c, lambda: first.state is State.FATAL_ERROR)
    assert first.error is not None and first.error.action is TxnAction.FENCED
    assert read_committed(stub.bootstrap, TOPIC, 0) == []


def test_invalid_txn_state_is_fatal_and_an_unadded_partition_is_refused(stub: BrokerStub) -> None:
    with cluster(_peer(stub)) as c:
        c.ensure_topic(TOPIC, 1)
        tm = _ready(c, "tx-state")
        tm.begin()
        assert _produce(c, tm, 0, b"not added") == E.INVALID_TXN_STATE
        stub.control("fail_api", api_key=24, code=E.INVALID_TXN_STATE, count=1)
        tm.add_partition(TOPIC, 0)
        drive_transaction(tm, c, lambda: tm.state is State.FATAL_ERROR)
    assert tm.error is not None and tm.error.error_code == E.INVALID_TXN_STATE


def test_an_expired_transaction_is_aborted_and_its_producer_fenced(stub: BrokerStub) -> None:
    with cluster(_peer(stub)) as c:
        c.ensure_topic(TOPIC, 1)
        tm = _ready(c, "tx-expiring", transaction_timeout_ms=200)
        tm.begin()
        tm.add_partition(TOPIC, 0)
        drive_transaction(tm, c, lambda: tm.send_allowed(TOPIC, 0))
        assert _produce(c, tm, 0, b"expired") == 0
        time.sleep(0.4)
        stub.run(stub.coordinator.expire)
        tm.commit()
        drive_transaction(tm, c, lambda: tm.state is State.FATAL_ERROR)
        batches = c.fetch_batches(TOPIC, 0, 2)
    assert [m.control_type for b in batches for m in markers_of(b)] == [ControlType.ABORT]
    assert tm.error is not None and tm.error.action is TxnAction.FENCED
