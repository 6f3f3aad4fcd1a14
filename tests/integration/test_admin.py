"""shmkafka's admin client (sender/admin.py) against Tansu and broker_stub: topics it creates
are in the cluster's Metadata with their partition counts, topics it deletes are gone from
it, per-topic errors are reported (not raised), and a cluster that cannot be reached or does
not answer raises a typed error within the call's timeout.

Metadata is read with the tests' own plain-socket client (tests/wire.py), not the admin's."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.errors import KafkaTimeoutError, NoBrokersAvailable
from shmkafka.perf.brokers import free_port
from shmkafka.protocol.broker_errors import UnknownTopicOrPartitionError
from shmkafka.protocol.errors import UnsupportedApiVersionError
from shmkafka.protocol.messages import MetadataRequest, MetadataResponse
from shmkafka.protocol.other_api_errors import TopicAlreadyExistsError
from shmkafka.sender.admin import NewTopic, create_topics, delete_topics, raise_errors
from tests.integration.kafka_io import unique_topic
from tests.peers import Peer
from tests.wire import WireClient

pytestmark = pytest.mark.integration

TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def stub() -> Iterator[Peer]:
    """A 3-node broker_stub that creates no topic by itself."""
    with BrokerStub(nodes=3, auto_create_topics=False) as cluster:
        brokers = tuple(("127.0.0.1", cluster.ports[n]) for n in cluster.cluster.node_ids)
        yield Peer("broker_stub", brokers, can_create_topics=True, auto_partitions=1)


@pytest.fixture(params=["tansu", "broker_stub"])
def cluster(request: pytest.FixtureRequest) -> Peer:
    peer: Peer = request.getfixturevalue("tansu" if request.param == "tansu" else "stub")
    return peer


def partition_counts(peer: Peer) -> dict[str, int]:
    """Every topic of the cluster (Metadata for all topics) → its partition count."""
    with WireClient(*peer.brokers[-1]) as client:
        metadata = client.call(MetadataRequest(topics=None), MetadataResponse)
    assert all(t.error_code == 0 for t in metadata.topics), metadata
    return {t.name: len(t.partitions) for t in metadata.topics if t.name is not None}


def test_create_then_delete(cluster: Peer) -> None:
    a, b = unique_topic("admin-a"), unique_topic("admin-b")
    created = create_topics(
        cluster.bootstrap, [NewTopic(a, 3, 1), NewTopic(b, 1, 1)], timeout_ms=TIMEOUT_MS
    )
    assert created == {a: None, b: None}
    counts = partition_counts(cluster)
    assert counts[a] == 3 and counts[b] == 1

    deleted = delete_topics(cluster.bootstrap, [a, b], timeout_ms=TIMEOUT_MS)
    assert deleted == {a: None, b: None}
    assert not {a, b} & set(partition_counts(cluster))


def test_errors_are_reported_per_topic(cluster: Peer) -> None:
    existing, fresh = unique_topic("admin-exists"), unique_topic("admin-fresh")
    assert create_topics(cluster.bootstrap, [NewTopic(existing, 2, 1)]) == {existing: None}

    again = create_topics(
        cluster.bootstrap, [NewTopic(existing, 2, 1), NewTopic(fresh, 4, 1)], timeout_ms=TIMEOUT_MS
    )
    assert isinstance(again[existing], TopicAlreadyExistsError)
    assert again[fresh] is None  # the other topic of the request was created
    raise_errors(again, ignore=(TopicAlreadyExistsError,))
    with pytest.raises(TopicAlreadyExistsError):
        raise_errors(again)
    counts = partition_counts(cluster)
    assert counts[existing] == 2 and counts[fresh] == 4

    missing = unique_topic("admin-missing")
    deleted = delete_topics(cluster.bootstrap, [existing, fresh, missing], timeout_ms=TIMEOUT_MS)
    assert deleted[existing] is None and deleted[fresh] is None
    assert isinstance(deleted[missing], UnknownTopicOrPartitionError)
    assert not {existing, fresh} & set(partition_counts(cluster))


def test_a_closed_port_raises_within_the_timeout() -> None:
    port = free_port()  # bound, then closed: nothing listens there
    start = time.monotonic()
    with pytest.raises(NoBrokersAvailable) as info:
        create_topics(f"127.0.0.1:{port}", [NewTopic("never", 1, 1)], timeout_ms=1000)
    took = time.monotonic() - start
    assert 0.9 <= took < 3
    assert f"127.0.0.1:{port}" in str(info.value) and "Connection refused" in str(info.value)
    with pytest.raises(NoBrokersAvailable):
        delete_topics(f"127.0.0.1:{port}", ["never"], timeout_ms=300)


def test_a_broker_that_never_answers_raises_within_the_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        start = time.monotonic()
        with pytest.raises((NoBrokersAvailable, KafkaTimeoutError)):
            delete_topics(f"127.0.0.1:{port}", ["t"], timeout_ms=1000)
        assert time.monotonic() - start < 3


def test_a_cluster_without_create_topics_is_a_typed_error(mock_cluster: Peer) -> None:
    # librdkafka's mock cluster does not offer CreateTopics
    start = time.monotonic()
    with pytest.raises(UnsupportedApiVersionError):
        create_topics(mock_cluster.bootstrap, [NewTopic("t", 1, 1)], timeout_ms=TIMEOUT_MS)
    assert time.monotonic() - start < TIMEOUT_MS / 1000


def test_bootstrap_may_list_an_unreachable_server_first(stub: Peer) -> None:
    topic = unique_topic("admin-fallback")
    servers = [f"127.0.0.1:{free_port()}", *stub.bootstrap.split(",")]
    assert create_topics(servers, [NewTopic(topic, 2, 1)], timeout_ms=TIMEOUT_MS) == {topic: None}
    assert partition_counts(stub)[topic] == 2
    assert delete_topics(servers, [topic], timeout_ms=TIMEOUT_MS) == {topic: None}
