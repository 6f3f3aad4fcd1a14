"""The transactional id's state machine (sender/txn_manager.py), driven with scripted
answers and a stepped clock: the order of its requests, when EndTxn may go, and what each
kind of error does to the transaction and the producer."""

from __future__ import annotations

from typing import Any

import pytest

from shmkafka.protocol.error_codes import ErrorCode as E
from shmkafka.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from shmkafka.protocol.messages.find_coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
from shmkafka.protocol.messages.transactions import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnTopicResult,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from shmkafka.protocol.txn_errors import TxnAction
from shmkafka.sender.txn_manager import (
    PendingOffsets,
    State,
    Target,
    TransactionManager,
    TxnRequest,
    TxnStateError,
)


def _found(node: int, code: int = 0) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(0, code, None, node, "h", 9092)


def _added(request: Any, code: int = 0) -> AddPartitionsToTxnResponse:
    return AddPartitionsToTxnResponse(0, tuple(
        AddPartitionsToTxnTopicResult(t.name, tuple(
            AddPartitionsToTxnPartitionResult(p, code) for p in t.partitions))
        for t in request.message.topics
    ))  # fmt: skip


def _step(tm: TransactionManager, now: int, answer: Any, unacked: int = 0) -> TxnRequest:
    request = tm.next_request(now, unacked)
    assert request is not None
    tm.handle(request, answer(request) if callable(answer) else answer, now)
    return request


def _ready(tm: TransactionManager) -> None:
    tm.init_transactions()
    find = _step(tm, 0, _found(2))
    assert isinstance(find.message, FindCoordinatorRequest)
    assert (find.message.key_type, find.message.key, find.target) == (
        KEY_TYPE_TRANSACTION, "tx", Target.ANY_NODE,
    )  # fmt: skip
    init = _step(tm, 0, InitProducerIdResponse(0, 0, 42, 3))
    assert isinstance(init.message, InitProducerIdRequest) and init.node == 2
    assert (tm.state, tm.producer_id, tm.producer_epoch) == (State.READY, 42, 3)


def test_a_committed_transaction_in_order() -> None:
    tm = TransactionManager("tx")
    _ready(tm)
    tm.begin()
    tm.add_partition("t", 1)
    tm.add_partition("t", 0)
    assert not tm.send_allowed("t", 0)  # not before AddPartitionsToTxn answers
    add = _step(tm, 0, _added)
    assert isinstance(add.message, AddPartitionsToTxnRequest)
    assert [(t.name, t.partitions) for t in add.message.topics] == [("t", (0, 1))]
    assert tm.send_allowed("t", 0) and tm.send_allowed("t", 1)
    tm.add_partition("t", 0)  # (already added: nothing to ask)
    assert tm.next_request(0, 1) is None
    tm.commit()
    assert tm.next_request(0, 2) is None  # batches unacknowledged: no EndTxn yet
    end = _step(tm, 0, EndTxnResponse(0, 0), unacked=0)
    assert isinstance(end.message, EndTxnRequest) and end.message.committed
    assert (end.message.producer_id, end.message.producer_epoch) == (42, 3)
    assert (tm.state, tm.completed) == (State.READY, [True])
    assert not tm.send_allowed("t", 0)  # the next transaction adds them again


def test_offsets_go_to_the_group_coordinator_after_add_offsets() -> None:
    tm = TransactionManager("tx")
    _ready(tm)
    tm.begin()
    tm.send_offsets(PendingOffsets("g", {("in", 0): (10, None)}, 5, "member-1"))
    add = _step(tm, 0, AddOffsetsToTxnResponse(0, 0))
    assert isinstance(add.message, AddOffsetsToTxnRequest) and add.message.group_id == "g"
    find = _step(tm, 0, _found(7))
    assert isinstance(find.message, FindCoordinatorRequest)
    assert (find.message.key_type, find.message.key) == (KEY_TYPE_GROUP, "g")
    ok = TxnOffsetCommitResponse(0, (TxnOffsetCommitResponseTopic(
        "in", (TxnOffsetCommitResponsePartition(0, 0),)),))  # fmt: skip
    commit = _step(tm, 0, ok)
    assert commit.target is Target.GROUP_COORDINATOR and commit.node == 7
    assert isinstance(commit.message, TxnOffsetCommitRequest)
    assert (commit.message.generation_id, commit.message.member_id) == (5, "member-1")
    assert commit.message.topics[0].partitions[0].committed_offset == 10
    tm.commit()
    end = _step(tm, 0, EndTxnResponse(0, 0))
    assert isinstance(end.message, EndTxnRequest) and tm.completed == [True]


def test_retry_waits_for_the_backoff_and_a_moved_coordinator_is_looked_up() -> None:
    tm = TransactionManager("tx", retry_backoff_ms=100)
    _ready(tm)
    tm.begin()
    tm.add_partition("t", 0)
    _step(tm, 1000, lambda r: _added(r, E.CONCURRENT_TRANSACTIONS))
    assert tm.next_request(1099, 0) is None  # backing off
    assert not tm.send_allowed("t", 0)
    _step(tm, 1100, lambda r: _added(r, E.NOT_COORDINATOR))
    find = _step(tm, 1200, _found(5))
    assert isinstance(find.message, FindCoordinatorRequest) and tm.coordinator == 5
    add = _step(tm, 1200, _added)
    assert add.node == 5 and tm.send_allowed("t", 0)
    lost = tm.next_request(1200, 0)
    assert lost is None  # nothing pending
    tm.commit()
    end = tm.next_request(1200, 0)
    assert end is not None
    tm.handle(end, None, 1200)  # the connection dropped: look the coordinator up again
    assert isinstance(_step(tm, 1300, _found(6)).message, FindCoordinatorRequest)
    again = _step(tm, 1300, EndTxnResponse(0, 0))
    assert again.node == 6 and tm.completed == [True]


def test_an_abortable_error_must_be_aborted_then_the_producer_goes_on() -> None:
    tm = TransactionManager("tx")
    _ready(tm)
    tm.begin()
    tm.add_partition("t", 0)
    _step(tm, 0, lambda r: _added(r, E.TOPIC_AUTHORIZATION_FAILED))
    assert tm.state is State.ABORTABLE_ERROR
    assert tm.error is not None and tm.error.action is TxnAction.ABORTABLE
    with pytest.raises(TxnStateError, match="must be aborted"):
        tm.commit()
    tm.abort()
    assert tm.next_request(0, 0) is None  # nothing was added: no EndTxn
    assert (tm.state, tm.completed, tm.error) == (State.READY, [False], None)
    tm.begin()  # the producer goes on


def test_a_failed_batch_makes_the_transaction_abortable_and_abort_waits_for_in_flight() -> None:
    tm = TransactionManager("tx")
    _ready(tm)
    tm.begin()
    tm.add_partition("t", 0)
    _step(tm, 0, _added)
    tm.batch_failed(E.MESSAGE_TOO_LARGE)
    assert tm.state is State.ABORTABLE_ERROR and not tm.send_allowed("t", 0)
    tm.abort()
    assert tm.next_request(0, 1) is None  # a batch still in flight
    end = _step(tm, 0, EndTxnResponse(0, 0))
    assert isinstance(end.message, EndTxnRequest) and not end.message.committed
    assert tm.completed == [False]


@pytest.mark.parametrize("code", [E.PRODUCER_FENCED, E.INVALID_TXN_STATE])
def test_fenced_or_fatal_ends_the_producer(code: int) -> None:
    tm = TransactionManager("tx")
    _ready(tm)
    tm.begin()
    tm.commit()
    assert tm.next_request(0, 0) is None and tm.completed == [True]  # (nothing added)
    tm.begin()
    tm.add_partition("t", 0)
    _step(tm, 0, _added)
    tm.commit()
    _step(tm, 0, EndTxnResponse(0, code))
    assert tm.state is State.FATAL_ERROR and tm.error is not None
    assert tm.error.action is (TxnAction.FENCED if code == E.PRODUCER_FENCED else TxnAction.FATAL)
    for call in (tm.begin, tm.abort, tm.commit):
        with pytest.raises(TxnStateError, match="the producer failed"):
            call()


def test_calls_out_of_order_change_nothing() -> None:
    tm = TransactionManager("tx")
    with pytest.raises(TxnStateError, match="UNINITIALIZED, not READY"):
        tm.begin()
    _ready(tm)
    with pytest.raises(TxnStateError, match="READY, not IN_TRANSACTION"):
        tm.commit()
    with pytest.raises(TxnStateError):
        tm.add_partition("t", 0)
    with pytest.raises(TxnStateError):
        tm.init_transactions()
    assert tm.state is State.READY and tm.next_request(0, 0) is None
