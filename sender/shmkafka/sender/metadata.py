"""Cluster metadata: brokers and partition leaders, published into the pool's directory.

Rules:
- The Sender is the directory's only writer: each Metadata response that changes leaders,
  epochs or partition counts becomes a new directory version (copy-on-write, see
  shm/directory.py), under the directory lock.
- A refresh is due when ``metadata.max.age.ms`` has passed, when something asked for one
  (an invalid-metadata error, an unknown leader, a topic an app process waits for, a broker
  that left or joined), and never more often than ``retry.backoff.ms``.
- Topics are requested by name and auto-created by the broker if it allows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.messages import MetadataRequest, MetadataResponse
from shmkafka.protocol.messages.metadata import MetadataRequestTopic
from shmkafka.shm.directory import PartitionLeader
from shmkafka.shm.layout import DIRECTORY_LOCK
from shmkafka.shm.pool import SharedPool


@dataclass
class Metadata:
    pool: SharedPool
    max_age_ms: int
    backoff_ms: int
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    leaders: dict[str, list[PartitionLeader]] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)
    wanted: set[str] = field(default_factory=set)
    last_refresh_ms: int = -(2**62)
    last_attempt_ms: int = -(2**62)
    need_update: bool = True
    in_flight: bool = False
    requested: frozenset[str] = frozenset()  # the topics of the request in flight

    def request_update(self) -> None:
        self.need_update = True

    def add_topics(self, topics: set[str]) -> None:
        if not topics <= self.wanted:
            self.wanted |= topics
            self.need_update = True

    def poll_topic_requests(self) -> None:
        """Pick up topics app processes asked for through the pool."""
        directory = self.pool.directory
        if not directory.requested_topics():
            return
        with self.pool.locks.held(DIRECTORY_LOCK):
            requested = set(directory.take_topic_requests())
        self.add_topics(requested)

    def due(self, now_ms: int) -> bool:
        if self.in_flight or now_ms - self.last_attempt_ms < self.backoff_ms:
            return False
        return self.need_update or now_ms - self.last_refresh_ms >= self.max_age_ms

    def request(self, now_ms: int) -> MetadataRequest:
        self.in_flight = True
        self.last_attempt_ms = now_ms
        self.wanted |= set(self.pool.directory.snapshot().topics)
        self.requested = frozenset(self.wanted)
        topics = tuple(MetadataRequestTopic(name=t) for t in sorted(self.wanted))
        return MetadataRequest(topics=topics, allow_auto_topic_creation=True)

    def failed(self) -> None:
        self.in_flight = False
        self.need_update = True

    def on_response(self, response: MetadataResponse, now_ms: int) -> bool:
        """Absorb a response; returns True if the broker set changed."""
        self.in_flight = False
        brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        changed = brokers != self.brokers
        self.brokers = brokers
        incomplete = False
        leaders: dict[str, list[PartitionLeader]] = {}
        for topic in response.topics:
            if topic.name is None:
                continue
            self.topic_errors[topic.name] = topic.error_code
            if topic.error_code or not topic.partitions:
                incomplete = True  # e.g. LEADER_NOT_AVAILABLE while a topic is being created
                continue
            parts = sorted(topic.partitions, key=lambda p: p.partition_index)
            entries = []
            for p in parts:
                leader = (
                    p.leader_id if p.error_code == ErrorCode.NONE and p.leader_id in brokers else -1
                )
                incomplete |= leader < 0
                entries.append(PartitionLeader(leader, p.leader_epoch))
            leaders[topic.name] = entries
        if leaders and leaders != {t: self.leaders.get(t) for t in leaders}:
            with self.pool.locks.held(DIRECTORY_LOCK):
                self.pool.directory.publish(leaders)
        self.leaders.update(leaders)
        self.last_refresh_ms = now_ms
        # A topic asked for while this request was in flight still needs its own answer.
        self.need_update = incomplete or not self.wanted <= self.requested
        return changed
