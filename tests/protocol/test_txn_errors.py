"""The transactional producer's error sorting (protocol/txn_errors.py), case by case as the
Java client's TransactionManager sorts them."""

from __future__ import annotations

import pytest

from shmkafka.protocol.error_codes import ErrorCode as E
from shmkafka.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from shmkafka.protocol.txn_errors import TABLE, TxnAction, classify

A = TxnAction
COORDINATOR_APIS = [InitProducerIdRequest, AddPartitionsToTxnRequest, AddOffsetsToTxnRequest,
                    EndTxnRequest, TxnOffsetCommitRequest]  # fmt: skip


def test_the_table_names_each_api_by_its_key() -> None:
    keys = {r.API_KEY for r in [*COORDINATOR_APIS, FindCoordinatorRequest, ProduceRequest]}
    assert set(TABLE) == keys


@pytest.mark.parametrize("api", COORDINATOR_APIS, ids=lambda r: r.__name__)
def test_coordinator_apis_share_the_coordinator_and_fencing_cases(api: type) -> None:
    key = api.API_KEY
    assert classify(key, E.NOT_COORDINATOR) is A.FIND_COORDINATOR
    assert classify(key, E.COORDINATOR_NOT_AVAILABLE) is A.FIND_COORDINATOR
    assert classify(key, E.COORDINATOR_LOAD_IN_PROGRESS) is A.RETRY
    assert classify(key, E.PRODUCER_FENCED) is A.FENCED
    assert classify(key, E.INVALID_PRODUCER_EPOCH) is A.FENCED
    assert classify(key, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) is A.FATAL
    assert classify(key, E.MESSAGE_TOO_LARGE) is A.FATAL  # (unexpected: fatal)
    assert classify(key, E.PRODUCER_FENCED).is_fatal


@pytest.mark.parametrize(
    ("api", "code", "action"),
    [
        (AddPartitionsToTxnRequest, E.CONCURRENT_TRANSACTIONS, A.RETRY),
        (AddPartitionsToTxnRequest, E.UNKNOWN_TOPIC_OR_PARTITION, A.RETRY),
        (AddPartitionsToTxnRequest, E.TOPIC_AUTHORIZATION_FAILED, A.ABORTABLE),
        (AddPartitionsToTxnRequest, E.UNKNOWN_PRODUCER_ID, A.ABORTABLE),
        (AddPartitionsToTxnRequest, E.INVALID_TXN_STATE, A.FATAL),
        (AddOffsetsToTxnRequest, E.GROUP_AUTHORIZATION_FAILED, A.ABORTABLE),
        (TxnOffsetCommitRequest, E.UNKNOWN_MEMBER_ID, A.ABORTABLE),
        (TxnOffsetCommitRequest, E.ILLEGAL_GENERATION, A.ABORTABLE),
        (TxnOffsetCommitRequest, E.REQUEST_TIMED_OUT, A.FIND_COORDINATOR),
        (EndTxnRequest, E.CONCURRENT_TRANSACTIONS, A.RETRY),
        (EndTxnRequest, E.TRANSACTION_ABORTABLE, A.ABORTABLE),
        (EndTxnRequest, E.INVALID_TXN_STATE, A.FATAL),
        (FindCoordinatorRequest, E.COORDINATOR_NOT_AVAILABLE, A.RETRY),
        (FindCoordinatorRequest, E.GROUP_AUTHORIZATION_FAILED, A.ABORTABLE),
        (ProduceRequest, E.OUT_OF_ORDER_SEQUENCE_NUMBER, A.ABORTABLE),
        (ProduceRequest, E.MESSAGE_TOO_LARGE, A.ABORTABLE),  # a failed batch: abort
        (ProduceRequest, E.PRODUCER_FENCED, A.FENCED),
        (ProduceRequest, E.CLUSTER_AUTHORIZATION_FAILED, A.FATAL),
    ],
)
def test_each_apis_own_cases(api: type, code: int, action: TxnAction) -> None:
    assert classify(api.API_KEY, code) is action


def test_none_is_not_an_error() -> None:
    with pytest.raises(ValueError, match="NONE"):
        classify(EndTxnRequest.API_KEY, E.NONE)
