"""The transactional coordinator APIs, spoken with shmkafka's codec to the real peers (Tansu
and librdkafka's mock cluster), one request at a time: FindCoordinator for a transactional
id, InitProducerId with it, AddPartitionsToTxn before a partition's first transactional
batch, EndTxn; then the partition's log holds each transaction's data batch followed by
exactly one COMMIT or ABORT marker of its producer, and a second InitProducerId fences the
first epoch."""

from __future__ import annotations

import time
import uuid

import pytest

from shmkafka.protocol.control import ControlType, markers_of
from shmkafka.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from shmkafka.protocol.messages.find_coordinator import KEY_TYPE_TRANSACTION
from shmkafka.protocol.messages.transactions import AddPartitionsToTxnTopic
from shmkafka.protocol.schema import Message
from shmkafka.sender.txn_manager import State, TransactionManager
from tests.integration.kafka_io import (
    Cluster,
    cluster,
    drive_transaction,
    transactional_batch,
    unique_topic,
)
from tests.peers import Peer
from tests.wire import WireClient

# broker error codes met here (Kafka's numbers)
NONE, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS = 0, 15, 16, 51
PRODUCER_FENCED = 90


def _coordinator(c: Cluster, txn_id: str) -> WireClient:
    for _ in range(50):
        request = FindCoordinatorRequest(
            key=txn_id, key_type=KEY_TYPE_TRANSACTION, coordinator_keys=(txn_id,)
        )
        found = c.client().call(request, FindCoordinatorResponse).coordinator_for(txn_id)
        if found.error_code == NONE:
            return c.client((found.host, found.port))
        assert found.error_code == COORDINATOR_NOT_AVAILABLE, found
        time.sleep(0.2)
    raise AssertionError("no transaction coordinator")


def _retrying(client: WireClient, request: Message, response_cls: type, field: str) -> object:
    """Call until the answer is not CONCURRENT_TRANSACTIONS (a marker still being written)."""
    for _ in range(100):
        answer = client.call(request, response_cls)
        if getattr(answer, field) != CONCURRENT_TRANSACTIONS:
            return answer
        time.sleep(0.05)
    raise AssertionError(f"{type(request).__name__}: CONCURRENT_TRANSACTIONS for 5 s")


def _transaction(c: Cluster, coordinator: WireClient, txn_id: str, topic: str,
                 ids: tuple[int, int], sequence: int, value: bytes,
                 commit: bool) -> int:  # fmt: skip
    producer_id, epoch = ids
    added = coordinator.call(
        AddPartitionsToTxnRequest(txn_id, producer_id, epoch,
                                  (AddPartitionsToTxnTopic(topic, (0,)),)),
        AddPartitionsToTxnResponse,
    )  # fmt: skip
    errors = [p.partition_error_code for t in added.results for p in t.results_by_partition]
    assert errors == [NONE], added
    answer = c.produce(topic, 0, transactional_batch(value, producer_id, epoch, sequence),
                       transactional_id=txn_id)  # fmt: skip
    assert answer.error_code == NONE, answer
    ended = coordinator.call(EndTxnRequest(txn_id, producer_id, epoch, commit), EndTxnResponse)
    assert ended.error_code == NONE, ended
    return int(answer.base_offset)


def test_a_committed_and_an_aborted_transaction_leave_their_markers(peer: Peer) -> None:
    topic, txn_id = unique_topic("txnwire"), f"txn-{uuid.uuid4().hex[:8]}"
    with cluster(peer) as c:
        c.ensure_topic(topic, 1)
        coordinator = _coordinator(c, txn_id)
        init = _retrying(coordinator, InitProducerIdRequest(txn_id, 60_000),
                         InitProducerIdResponse, "error_code")  # fmt: skip
        assert isinstance(init, InitProducerIdResponse) and init.error_code == NONE, init
        ids = (init.producer_id, init.producer_epoch)
        assert ids[0] >= 0 and ids[1] >= 0
        committed = _transaction(c, coordinator, txn_id, topic, ids, 0, b"kept", commit=True)
        aborted = _transaction(c, coordinator, txn_id, topic, ids, 1, b"dropped", commit=False)
        # The coordinator writes the markers once EndTxn is answered. (The mock cluster's
        # control batches carry a CRC of 0: it is not checked there.)
        deadline = time.monotonic() + 10
        while True:
            batches = c.fetch_batches(topic, 0, aborted + 2, verify_crc=peer.name != "mock")
            if batches[-1].header.is_control or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        markers = [m for b in batches for m in markers_of(b)]
    data = [b for b in batches if not b.header.is_control]
    assert [b.base_offset for b in data] == [committed, aborted]
    assert all(b.header.is_transactional and b.header.producer_id == ids[0] for b in data)
    assert [(m.control_type, m.producer_id, m.producer_epoch) for m in markers] == [
        (ControlType.COMMIT, ids[0], ids[1]),
        (ControlType.ABORT, ids[0], ids[1]),
    ]
    # each data batch is followed by its own marker, before the next transaction's data
    kinds = [("marker" if b.header.is_control else "data") for b in batches]
    assert kinds == ["data", "marker", "data", "marker"]


def test_a_second_init_fences_the_first_epoch_on_tansu(tansu: Peer) -> None:
    """Tansu bumps the epoch of the same producer id and refuses the old epoch with
    PRODUCER_FENCED. (The mock cluster does not fence: a second InitProducerId gets a new
    producer id at epoch 0. Tansu closes the connection on an EndTxn of a fenced epoch
    rather than answer it, so AddPartitionsToTxn is what is asked here.)"""
    txn_id = f"fence-{uuid.uuid4().hex[:8]}"
    with cluster(tansu) as c:
        coordinator = _coordinator(c, txn_id)
        first = _retrying(coordinator, InitProducerIdRequest(txn_id, 60_000),
                          InitProducerIdResponse, "error_code")  # fmt: skip
        second = _retrying(coordinator, InitProducerIdRequest(txn_id, 60_000),
                           InitProducerIdResponse, "error_code")  # fmt: skip
        assert isinstance(first, InitProducerIdResponse)
        assert isinstance(second, InitProducerIdResponse)
        assert (first.error_code, second.error_code) == (NONE, NONE)
        assert second.producer_id == first.producer_id
        assert second.producer_epoch == first.producer_epoch + 1
        topics = (AddPartitionsToTxnTopic("any", (0,)),)
        stale = coordinator.call(
            AddPartitionsToTxnRequest(txn_id, first.producer_id, first.producer_epoch, topics),
            AddPartitionsToTxnResponse,
        )
    assert [p.partition_error_code for t in stale.results for p in t.results_by_partition] == [
        PRODUCER_FENCED
    ]


@pytest.mark.parametrize("version", [0, 3, 4])
def test_find_coordinator_answers_one_key_at_every_version(version: int) -> None:
    """The v0–v3 answer in place and the v4 batched answer read the same through
    ``coordinator_for`` (sans-IO: bytes in, typed answer out)."""
    from shmkafka.protocol.messages.find_coordinator import Coordinator

    if version < 4:
        answer = FindCoordinatorResponse(0, NONE, None, 3, "h", 9092)
    else:
        answer = FindCoordinatorResponse(0, coordinators=(Coordinator("t", 3, "h", 9092, NONE),))
    decoded = FindCoordinatorResponse.decode(answer.encode(version), version)
    assert decoded.coordinator_for("t") == Coordinator("t", 3, "h", 9092, NONE, None)


def test_the_state_machine_runs_a_transaction_on_the_peer(peer: Peer) -> None:
    """sender/txn_manager.py against a real coordinator: init, add the partition, the
    batch with the transaction's producer id and epoch, commit; the log holds the COMMIT."""
    topic, txn_id = unique_topic("txnsm"), f"sm-{uuid.uuid4().hex[:8]}"
    with cluster(peer) as c:
        c.ensure_topic(topic, 1)
        tm = TransactionManager(txn_id)
        tm.init_transactions()
        drive_transaction(tm, c, lambda: tm.state is State.READY)
        tm.begin()
        tm.add_partition(topic, 0)
        drive_transaction(tm, c, lambda: tm.send_allowed(topic, 0))
        batch = transactional_batch(b"sm", tm.producer_id, tm.producer_epoch, 0)
        produced = c.produce(topic, 0, batch, transactional_id=txn_id)
        assert produced.error_code == NONE
        tm.commit()
        drive_transaction(tm, c, lambda: tm.state is State.READY)
        assert tm.completed == [True]
        deadline = time.monotonic() + 10
        while True:
            batches = c.fetch_batches(topic, 0, 2, verify_crc=peer.name != "mock")
            if batches[-1].header.is_control or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert [m.control_type for b in batches for m in markers_of(b)] == [ControlType.COMMIT]
