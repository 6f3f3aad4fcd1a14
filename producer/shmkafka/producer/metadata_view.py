"""``Producer.list_topics()``'s answer, shaped as confluent-kafka's ``ClusterMetadata``, from
the pool's directory (the topics and partition leaders its Sender knows)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from shmkafka.shm.directory_view import DirectorySnapshot

if TYPE_CHECKING:
    from shmkafka.producer.handle import ProducerHandle

METADATA_POLL_S = 0.01


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


TOPIC_POLL_S = 0.0005  # how often a send waiting for its topic looks at the directory
TOPIC_FIRST_POLLS_S = (0.00005, 0.005)  # ... but every 50 µs for the first 5 ms


def metadata_poll_s(waited_s: float) -> float:
    """How long a wait for a topic's metadata sleeps between looks, ``waited_s`` into it:
    briefly at first (the Sender usually answers within a millisecond or two), then
    TOPIC_POLL_S."""
    step, first = TOPIC_FIRST_POLLS_S
    return step if waited_s < first else TOPIC_POLL_S


def wait_for_cluster_id(handle: ProducerHandle, timeout: float | None) -> str | None:
    """The cluster id the pool's Sender read from the brokers, waiting up to ``timeout`` s
    (None or negative: without end); None if it is not known by then."""
    deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
    while (found := handle.pool.cluster_id()) is None:
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(metadata_poll_s(0.01))
    return found


def wait_for_metadata(handle: ProducerHandle, topic: str | None, deadline: float) -> bool:
    """Wait until the pool's directory has ``topic`` (None: any metadata, or a reachable
    cluster); False at ``deadline``. A topic a limit of the pool refused raises its
    PoolCapacityError (shmkafka's KafkaError tree: the caller gives it its API's form)."""
    directory = handle.pool.directory
    if topic is not None and directory.partitions(topic) is None:
        handle.request_topic(topic)
    while (
        not (directory.version() > 0 or handle.cluster_reachable())
        if topic is None
        else directory.partitions(topic) is None
    ):
        if time.monotonic() >= deadline:
            return False
        refused = handle.still_waiting(topic) if topic is not None else None
        if refused is not None:
            raise refused
        time.sleep(METADATA_POLL_S)
    return True
