"""``Producer.list_topics()``'s answer, shaped as confluent-kafka's ``ClusterMetadata``, from
the pool's directory (the topics and partition leaders its Sender knows)."""

from __future__ import annotations

from typing import Any

from shmkafka.producer.views import ClusterView as DirectorySnapshot


class PartitionMetadata:
    def __init__(self, partition: int, leader: int) -> None:
        self.id = partition
        self.leader = leader
        self.replicas = [leader] if leader >= 0 else []
        self.isrs = list(self.replicas)
        self.error = None

    def __repr__(self) -> str:
        return f"PartitionMetadata({self.id})"


class TopicMetadata:
    def __init__(self, topic: str, partitions: dict[int, PartitionMetadata]) -> None:
        self.topic = topic
        self.partitions = partitions
        self.error = None

    def __repr__(self) -> str:
        return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions)"


class ClusterMetadata:
    """``brokers`` is empty: the pool records partition leaders' ids, not addresses."""

    def __init__(self, topics: dict[str, TopicMetadata]) -> None:
        self.topics = topics
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.brokers: dict[int, Any] = {}
        self.orig_broker_id = -1
        self.orig_broker_name: str | None = None


def cluster_metadata(snapshot: DirectorySnapshot, topic: str | None) -> ClusterMetadata:
    names = [topic] if topic is not None else list(snapshot.topics)
    return ClusterMetadata({
        name: TopicMetadata(name, {
            p: PartitionMetadata(p, e.leader) for p, e in enumerate(snapshot.topics[name])
        })
        for name in names
    })  # fmt: skip
