"""broker_stub's OffsetFetch: the offsets a transaction committed for a group (with their
metadata and leader epoch), none of an aborted one, as kafka-python's admin client and our
own codec at v1 and v7 read them; a partition never committed, ``require_stable`` while a
transaction is open, and a request to a node that is not the group's coordinator."""

from __future__ import annotations

from collections.abc import Iterator

import kafka
import pytest
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTopicPartition

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.protocol.error_codes import ErrorCode as E
from shmkafka.protocol.messages import OffsetFetchRequest, OffsetFetchResponse
from shmkafka.protocol.messages.offset_fetch import (
    OffsetFetchRequestTopic,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from shmkafka.sender.txn_manager import PendingOffsets, State, TransactionManager
from tests.integration.kafka_io import Cluster, cluster, drive_transaction
from tests.peers import Peer

GROUP = "g"
TOPIC = "in"
COMMITTED = {(TOPIC, 0): 5, (TOPIC, 1): 7}
ABORTED = {(TOPIC, 0): 50, (TOPIC, 1): 70, ("elsewhere", 0): 3}


@pytest.fixture
def stub() -> Iterator[BrokerStub]:
    with BrokerStub(nodes=1, partitions=2) as s:
        yield s


def _peer(stub: BrokerStub) -> Peer:
    brokers = tuple(("127.0.0.1", port) for _, port in sorted(stub.ports.items()))
    return Peer("broker_stub", brokers, can_create_topics=True, auto_partitions=2)


def _ready(c: Cluster, txn_id: str) -> TransactionManager:
    tm = TransactionManager(txn_id, retry_backoff_ms=10)
    tm.init_transactions()
    drive_transaction(tm, c, lambda: tm.state is State.READY)
    return tm


def _send_offsets(c: Cluster, tm: TransactionManager, offsets: dict[tuple[str, int], int],
                  metadata: str) -> None:  # fmt: skip
    tm.begin()
    tm.send_offsets(PendingOffsets(
        GROUP, {tp: (offset, metadata) for tp, offset in offsets.items()},
        leader_epochs=dict.fromkeys(offsets, 0),
    ))  # fmt: skip
    drive_transaction(tm, c, lambda: tm._offsets is None)


def _end(c: Cluster, tm: TransactionManager, commit: bool) -> None:
    tm.commit() if commit else tm.abort()
    drive_transaction(tm, c, lambda: tm.state is State.READY)


def _fetch(c: Cluster, version: int, topics: tuple[OffsetFetchRequestTopic, ...] | None,
           require_stable: bool = False) -> OffsetFetchResponse:  # fmt: skip
    request = OffsetFetchRequest(GROUP, topics, require_stable)
    return c.client().call(request, OffsetFetchResponse, version=version)


def _committed_then_aborted(c: Cluster) -> TransactionManager:
    c.ensure_topic(TOPIC, 2)
    tm = _ready(c, "tx-offset-fetch")
    _send_offsets(c, tm, COMMITTED, "meta")
    _end(c, tm, commit=True)
    _send_offsets(c, tm, ABORTED, "aborted")
    _end(c, tm, commit=False)
    return tm


def test_kafka_python_reads_exactly_the_committed_offsets(stub: BrokerStub) -> None:
    with cluster(_peer(stub)) as c:
        _committed_then_aborted(c)
    admin = kafka.KafkaAdminClient(bootstrap_servers=stub.bootstrap)
    try:
        offsets = admin.list_group_offsets(GROUP)
    finally:
        admin.close()
    assert offsets == {GROUP: {
        KafkaTopicPartition(topic, index): OffsetAndMetadata(offset, "meta", 0)
        for (topic, index), offset in COMMITTED.items()
    }}  # fmt: skip


def test_v1_and_v7_answers(stub: BrokerStub) -> None:
    asked = (OffsetFetchRequestTopic(TOPIC, (0, 1)), OffsetFetchRequestTopic("elsewhere", (0,)))
    with cluster(_peer(stub)) as c:
        _committed_then_aborted(c)
        v1 = _fetch(c, 1, asked)
        v7 = _fetch(c, 7, asked)
        v7_all = _fetch(c, 7, None)
    # v1 has no leader epoch on the wire: it decodes as the default, -1
    assert v1 == OffsetFetchResponse(topics=(
        OffsetFetchResponseTopic(TOPIC, (
            OffsetFetchResponsePartition(0, 5, -1, "meta", 0),
            OffsetFetchResponsePartition(1, 7, -1, "meta", 0),
        )),
        OffsetFetchResponseTopic("elsewhere", (OffsetFetchResponsePartition(0, -1, -1, "", 0),)),
    ))  # fmt: skip
    assert v7 == OffsetFetchResponse(topics=(
        OffsetFetchResponseTopic(TOPIC, (
            OffsetFetchResponsePartition(0, 5, 0, "meta", 0),
            OffsetFetchResponsePartition(1, 7, 0, "meta", 0),
        )),
        OffsetFetchResponseTopic("elsewhere", (OffsetFetchResponsePartition(0, -1, -1, "", 0),)),
    ))  # fmt: skip
    assert v7_all == OffsetFetchResponse(topics=(v7.topics[0],))


def test_require_stable_refuses_an_offset_an_open_transaction_carries(stub: BrokerStub) -> None:
    asked = (OffsetFetchRequestTopic(TOPIC, (0, 1)),)
    with cluster(_peer(stub)) as c:
        tm = _committed_then_aborted(c)
        _send_offsets(c, tm, {(TOPIC, 0): 6}, "meta")
        stable = _fetch(c, 7, asked, require_stable=True)
        unstable = _fetch(c, 7, asked)
        _end(c, tm, commit=True)
        after = _fetch(c, 7, asked, require_stable=True)
    assert [(p.committed_offset, p.error_code) for p in stable.topics[0].partitions] == [
        (-1, E.UNSTABLE_OFFSET_COMMIT),
        (7, 0),
    ]
    assert [p.committed_offset for p in unstable.topics[0].partitions] == [5, 7]
    assert [p.committed_offset for p in after.topics[0].partitions] == [6, 7]


def test_not_coordinator_is_on_each_partition_before_v2_and_top_level_after() -> None:
    with BrokerStub(nodes=2, partitions=2) as stub:
        coordinator = stub.coordinator.node_for(GROUP)
        other = next(n for n in stub.ports if n != coordinator)
        peer = Peer("broker_stub", (("127.0.0.1", stub.ports[other]),), True, 2)
        asked = (OffsetFetchRequestTopic(TOPIC, (0,)),)
        with cluster(peer) as c:
            v1 = _fetch(c, 1, asked)
            v7 = _fetch(c, 7, asked)
    assert v1.topics[0].partitions == (
        OffsetFetchResponsePartition(0, -1, -1, "", E.NOT_COORDINATOR),
    )
    assert v7.error_code == E.NOT_COORDINATOR
