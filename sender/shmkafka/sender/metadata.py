"""Cluster metadata: brokers and partition leaders, published into the pool's directory.

Rules:
- The Sender is the directory's only writer: each Metadata response that changes leaders,
  epochs or partition counts becomes a new directory version (append-only, see
  shm/directory.py), under the directory lock.
- A full refresh (every known topic) is due when ``metadata.max.age.ms`` has passed or
  something asked for one (an invalid-metadata error, an unknown leader, a broker that left
  or joined), never more often than ``retry.backoff.ms``. A topic an app waits for is asked
  for alone, at once (with the others that arrived meanwhile); one answered incomplete (being
  created, no leader yet) is asked for again after the backoff. So a pool with 10,000
  topics pays for the new ones only, as librdkafka does.
- Topics are requested by name and auto-created by the broker if it allows it.
- A topic the directory refuses (a limit of the pool, a full /dev/shm) is recorded as
  refused for the apps, reported (``refused``: the Sender's error_cb event and log line),
  and no longer asked for until an app asks again: one topic past a limit never stops the
  others, nor the Sender.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.messages import MetadataRequest, MetadataResponse
from shmkafka.protocol.messages.metadata import MetadataRequestTopic
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import DIRECTORY_LOCK
from shmkafka.shm.refusals import Refusal


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
    last_full_attempt_ms: int = -(2**62)
    need_update: bool = True
    in_flight: bool = False
    requested: frozenset[str] = frozenset()  # the topics of the request in flight
    fresh: set[str] = field(default_factory=set)  # asked for by apps, not requested yet
    retry: set[str] = field(default_factory=set)  # answered incomplete: ask after the backoff
    full_in_flight: bool = False
    refused: list[Refusal] = field(default_factory=list)  # new refusals, for the Sender
    reported: set[tuple[str, int]] = field(default_factory=set)  # (topic, partitions) told

    def request_update(self) -> None:
        self.need_update = True

    def add_topics(self, topics: set[str]) -> None:
        """Topics apps wait for: asked for at once unless already known."""
        new = topics - self.leaders.keys() - self.requested
        self.wanted |= topics
        self.fresh |= new

    def forget(self, topic: str) -> None:
        """A topic retired for being idle: no refresh asks for it until an app does."""
        self.leaders.pop(topic, None)
        self.topic_errors.pop(topic, None)
        self.wanted.discard(topic)
        self.fresh.discard(topic)
        self.retry.discard(topic)
        self.reported = {r for r in self.reported if r[0] != topic}

    def poll_topic_requests(self) -> None:
        """Pick up topics app processes asked for through the pool."""
        directory = self.pool.directory
        if not directory.requested_topics():
            return
        with self.pool.locks.held(DIRECTORY_LOCK):
            requested = set(directory.take_topic_requests())
        self.add_topics(requested)

    def _full_due(self, now_ms: int) -> bool:
        return self.need_update or now_ms - self.last_refresh_ms >= self.max_age_ms

    def due(self, now_ms: int) -> bool:
        if self.in_flight:
            return False
        if self.fresh:
            return True
        if self._full_due(now_ms) and now_ms - self.last_full_attempt_ms >= self.backoff_ms:
            return True
        return bool(self.retry) and now_ms - self.last_attempt_ms >= self.backoff_ms

    def request(self, now_ms: int) -> MetadataRequest:
        self.in_flight = True
        # (a full refresh's backoff counts from the last full one: requests for new topics
        # arriving faster than the backoff never hold it back)
        self.full_in_flight = self._full_due(now_ms) and now_ms - self.last_full_attempt_ms >= (
            self.backoff_ms
        )
        self.last_attempt_ms = now_ms
        if self.full_in_flight:
            self.last_full_attempt_ms = now_ms
        if self.full_in_flight:
            self.wanted |= set(self.pool.directory.snapshot().topics)
            self.need_update = False
            asked = set(self.wanted)
        else:
            asked = self.fresh | self.retry
        self.fresh, self.retry = set(), set()
        self.requested = frozenset(asked)
        topics = tuple(MetadataRequestTopic(name=t) for t in sorted(asked))
        return MetadataRequest(topics=topics, allow_auto_topic_creation=True)

    def failed(self) -> None:
        self.in_flight = False
        if self.full_in_flight:
            self.need_update = True
        else:
            self.retry |= self.requested
        self.requested = frozenset()

    def on_response(self, response: MetadataResponse, now_ms: int) -> bool:
        """Absorb a response; returns True if the broker set changed."""
        self.in_flight = False
        if response.cluster_id and response.cluster_id != self.pool.cluster_id():
            self.pool.set_cluster_id(response.cluster_id)
        brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        changed = brokers != self.brokers
        self.brokers = brokers
        incomplete: set[str] = set()
        leaders: dict[str, list[PartitionLeader]] = {}
        for topic in response.topics:
            # Only the topics asked for: a broker may answer an empty list with every topic
            # (Tansu does), and those would fill the pool's directory.
            if topic.name is None or topic.name not in self.requested:
                continue
            self.topic_errors[topic.name] = topic.error_code
            if topic.error_code or not topic.partitions:
                incomplete.add(topic.name)  # e.g. LEADER_NOT_AVAILABLE while being created
                continue
            parts = sorted(topic.partitions, key=lambda p: p.partition_index)
            entries = []
            for p in parts:
                leader = (
                    p.leader_id if p.error_code == ErrorCode.NONE and p.leader_id in brokers else -1
                )
                if leader < 0:
                    incomplete.add(topic.name)
                entries.append(PartitionLeader(leader, p.leader_epoch))
            leaders[topic.name] = entries
        changed_leaders = {t: e for t, e in leaders.items() if self.leaders.get(t) != e}
        if changed_leaders:
            with self.pool.locks.held(DIRECTORY_LOCK):
                refused = self.pool.directory.publish(changed_leaders)
                for refusal in refused.values():
                    self.pool.directory.record_refusal(refusal)
            for name, refusal in refused.items():
                if name not in self.leaders:  # a new topic: it fails, and is not asked again
                    del changed_leaders[name]
                    self.wanted.discard(name)
                # (a known topic that grew past a limit keeps its partitions so far, their
                # leaders published; it is reported once, not at every refresh)
                if (name, refusal.needed) not in self.reported:
                    self.reported.add((name, refusal.needed))
                    self.refused.append(refusal)
        self.leaders.update(changed_leaders)
        if self.full_in_flight:
            self.last_refresh_ms = now_ms
        answered = {t.name for t in response.topics if t.name is not None}
        # (a topic the broker left out of its answer is asked for again, like one incomplete)
        self.retry |= (incomplete | (self.requested - answered)) & self.wanted
        self.requested = frozenset()
        return changed
