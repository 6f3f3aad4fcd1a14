"""broker_stub deletes topics: ``Cluster.delete_topic`` (in memory and on disk) and the
DeleteTopics handler at every version it advertises (v1–v5 by name, v6 by name or id)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shmkafka.broker_stub.cluster import DELETED_SUFFIX, Cluster, ClusterConfig
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.broker_stub.validate import split_batches
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.messages import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    MetadataRequest,
    MetadataResponse,
)
from shmkafka.protocol.messages.delete_topics import DeletableTopicResult, DeleteTopicState
from shmkafka.protocol.records import BatchMeta, build_batch
from tests.wire import WireClient


def _append(cluster: Cluster, topic: str, count: int) -> None:
    p = cluster.topics[topic][0]
    data = build_batch([(1000 + i, b"k", b"v", []) for i in range(count)], BatchMeta())
    ((header, raw),) = split_batches(data)  # type: ignore[misc]
    stored = p.leader_log.append_as_leader(raw, header, p.leader_epoch, None)
    cluster.record_append(p, stored, None, 0)


def test_delete_topic_in_memory() -> None:
    cluster = Cluster(ClusterConfig(nodes=2, replication_factor=2))
    assert cluster.create_topic("t", 3) == 0
    assert cluster.delete_topic("t") == 0
    assert "t" not in cluster.topics
    assert cluster.delete_topic("t") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert cluster.create_topic("t", 1) == 0  # the name is free again
    assert len(cluster.topics["t"]) == 1


def test_delete_topic_on_disk_is_not_recovered_and_a_new_one_starts_empty(
    tmp_path: Path,
) -> None:
    config = ClusterConfig(nodes=1, storage_dir=str(tmp_path))
    cluster = Cluster(config)
    cluster.create_topic("gone", 1)
    cluster.create_topic("kept", 1)
    _append(cluster, "gone", 3)
    _append(cluster, "kept", 2)
    for log in cluster.disk_logs():
        log.fsync()
    assert cluster.delete_topic("gone") == 0
    assert json.loads((tmp_path / "topics.json").read_text()) == [["kept", 1, 1]]
    node_dir = tmp_path / "node-1"
    aside = [n for n in os.listdir(node_dir) if n.endswith(DELETED_SUFFIX)]
    assert len(aside) == 1 and aside[0].startswith("gone-0.")
    assert not (node_dir / "gone-0").exists()

    assert cluster.create_topic("gone", 1) == 0  # the same name again: an empty log
    assert cluster.topics["gone"][0].leader_log.leo == 0
    for log in cluster.disk_logs():
        log.close()

    recovered = Cluster(ClusterConfig(nodes=1, storage_dir=str(tmp_path)))
    assert set(recovered.topics) == {"gone", "kept"}
    assert recovered.topics["gone"][0].leader_log.leo == 0
    assert recovered.topics["kept"][0].leader_log.leo == 2
    assert not [n for n in os.listdir(node_dir) if n.endswith(DELETED_SUFFIX)]  # removed
    for log in recovered.disk_logs():
        log.close()


@pytest.fixture(scope="module")
def stub() -> Iterator[BrokerStub]:
    with BrokerStub(nodes=2, auto_create_topics=False) as cluster:
        yield cluster


def _topics(client: WireClient) -> set[str]:
    metadata = client.call(MetadataRequest(topics=None), MetadataResponse)
    return {t.name for t in metadata.topics if t.name}


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_delete_topics_by_name(stub: BrokerStub, version: int) -> None:
    stub.create_topic(f"v{version}", 2)
    with WireClient("127.0.0.1", stub.ports[2]) as client:
        assert client.broker_versions[DeleteTopicsRequest.API_KEY] == (1, 6)
        response = client.call(
            DeleteTopicsRequest(topic_names=(f"v{version}", "nope"), timeout_ms=1000),
            DeleteTopicsResponse,
            version,
        )
        assert response.responses == (
            DeletableTopicResult(f"v{version}", error_code=0),
            DeletableTopicResult("nope", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        )
        assert f"v{version}" not in _topics(client)


def test_delete_topics_v6_by_name_or_id(stub: BrokerStub) -> None:
    stub.create_topic("v6", 1)
    some_id = uuid.UUID(int=7)
    with WireClient("127.0.0.1", stub.ports[1]) as client:
        request = DeleteTopicsRequest(
            topics=(DeleteTopicState(name="v6"), DeleteTopicState(name=None, topic_id=some_id))
        )
        response = client.call(request, DeleteTopicsResponse, 6)
        assert response.responses == (
            DeletableTopicResult("v6", error_code=0),
            DeletableTopicResult(None, some_id, ErrorCode.UNKNOWN_TOPIC_ID),
        )
        assert "v6" not in _topics(client)
