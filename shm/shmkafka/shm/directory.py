"""The topic directory: topic → partitions → (deque id, leader, leader epoch), copy-on-write.

Kafka's CopyOnWriteMap across processes. Rules:
- One writer at a time (the Sender; tests), under the directory lock: it builds the new
  version in the copy that is not current, then publishes it by bumping
  ``directory_version`` (the current copy is ``version & 1``).
- Readers never lock: read the version, read the copy, read the version again; if it moved,
  retry. Each process caches the parsed directory per version, so a ``send()`` costs one
  8-byte read while the directory is unchanged.
- The directory only grows: a (topic, partition) keeps its deque id for the life of the pool
  (its deque may hold batches), so a publish that leaves out a known topic or partition
  carries the old entry forward. Deque ids come from ``deques_used`` and are never reused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shmkafka.shm.config import MAX_TOPIC_NAME
from shmkafka.shm.errors import CapacityError, ShmConfigError
from shmkafka.shm.layout import (
    DEQUE_HEADER,
    DIR_COPY_HEADER,
    H_DEQUES_USED,
    H_DIRECTORY_VERSION,
    H_TOPIC_REQUESTS,
    PARTITION_ENTRY,
    TOPIC_ENTRY,
    TOPIC_REQUEST,
    U32,
    U64,
    Layout,
)
from shmkafka.shm.segment import Segment

LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's legal topic names (use fullmatch)

MAX_READ_RETRIES = 1000


@dataclass(frozen=True)
class PartitionEntry:
    deque_id: int
    leader: int
    leader_epoch: int


@dataclass(frozen=True)
class PartitionLeader:
    """What the writer publishes for one partition."""

    leader: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True)
class DirectorySnapshot:
    version: int
    topics: Mapping[str, tuple[PartitionEntry, ...]]

    def by_deque(self) -> dict[int, tuple[str, int]]:
        return {
            entry.deque_id: (topic, partition)
            for topic, entries in self.topics.items()
            for partition, entry in enumerate(entries)
        }


class Directory:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.layout: Layout = segment.layout
        self._cached = DirectorySnapshot(-1, {})

    def version(self) -> int:
        version: int = U64.unpack_from(self.segment.buf, H_DIRECTORY_VERSION)[0]
        return version

    def snapshot(self) -> DirectorySnapshot:
        """The current directory (cached until the version word moves)."""
        cached = self._cached
        if U64.unpack_from(self.segment.buf, H_DIRECTORY_VERSION)[0] == cached.version:
            return cached
        for _ in range(MAX_READ_RETRIES):
            version = self.version()
            topics = self._read_copy(version & 1)
            if self.version() == version:
                self._cached = DirectorySnapshot(version, topics)
                return self._cached
        raise RuntimeError("topic directory kept changing while being read")

    def partitions(self, topic: str) -> tuple[PartitionEntry, ...] | None:
        return self.snapshot().topics.get(topic)

    def _read_copy(self, copy: int) -> dict[str, tuple[PartitionEntry, ...]]:
        buf = self.segment.buf
        at = self.layout.directory_copy_at(copy)
        topic_count, _ = DIR_COPY_HEADER.unpack_from(buf, at)
        topic_count = min(topic_count, self.layout.config.max_topics)  # torn read: retried
        topics_at = at + DIR_COPY_HEADER.size
        parts_at = topics_at + self.layout.config.max_topics * TOPIC_ENTRY.size
        out: dict[str, tuple[PartitionEntry, ...]] = {}
        for i in range(topic_count):
            name_len, name, count, first = TOPIC_ENTRY.unpack_from(
                buf, topics_at + i * TOPIC_ENTRY.size
            )
            if first + count > self.layout.config.max_partitions or name_len > MAX_TOPIC_NAME:
                break  # torn read; the version check makes the caller retry
            entries = tuple(
                PartitionEntry(
                    *PARTITION_ENTRY.unpack_from(
                        buf, parts_at + (first + p) * PARTITION_ENTRY.size
                    )[:3]
                )
                for p in range(count)
            )
            out[name[:name_len].decode("utf-8", "replace")] = entries
        return out

    # ------------------------------------------------------------------ the writer

    def publish(self, topics: Mapping[str, Sequence[PartitionLeader]]) -> DirectorySnapshot:
        """Write a new version with ``topics`` (known topics and partitions left out are
        carried forward). The caller holds the directory lock."""
        config = self.layout.config
        current = self.snapshot()
        merged: dict[str, list[PartitionLeader]] = {
            name: [PartitionLeader(e.leader, e.leader_epoch) for e in entries]
            for name, entries in current.topics.items()
        }
        for name, leaders in topics.items():
            carried = merged.get(name, [])
            merged[name] = list(leaders) + carried[len(leaders) :]
        topics = merged
        if len(topics) > config.max_topics:
            raise CapacityError(f"{len(topics)} topics exceed max_topics={config.max_topics}")
        total = sum(len(p) for p in topics.values())
        if total > config.max_partitions:
            raise CapacityError(f"{total} partitions exceed max_partitions={config.max_partitions}")
        buf = self.segment.buf
        deques_used: int = U32.unpack_from(buf, H_DEQUES_USED)[0]
        version = current.version + 1
        at = self.layout.directory_copy_at(version & 1)
        topics_at = at + DIR_COPY_HEADER.size
        parts_at = topics_at + config.max_topics * TOPIC_ENTRY.size
        index = 0
        for i, (name, leaders) in enumerate(topics.items()):
            encoded = name.encode("utf-8")
            if not encoded or len(encoded) > MAX_TOPIC_NAME:
                raise ShmConfigError(f"invalid topic name {name!r}")
            existing = current.topics.get(name, ())
            for p, leader in enumerate(leaders):
                if p < len(existing):
                    deque_id = existing[p].deque_id
                else:
                    if deques_used >= config.max_partitions:
                        raise CapacityError(f"max_partitions={config.max_partitions} reached")
                    deque_id = deques_used
                    deques_used += 1
                    self._init_deque(deque_id, p)
                PARTITION_ENTRY.pack_into(
                    buf, parts_at + (index + p) * PARTITION_ENTRY.size,
                    deque_id, leader.leader, leader.leader_epoch, 0,
                )  # fmt: skip
            TOPIC_ENTRY.pack_into(
                buf, topics_at + i * TOPIC_ENTRY.size, len(encoded), encoded, len(leaders), index
            )
            index += len(leaders)
        DIR_COPY_HEADER.pack_into(buf, at, len(topics), index)
        self.segment.store_u32(H_DEQUES_USED, deques_used)
        self.segment.store_u64(H_DIRECTORY_VERSION, version)  # publish last
        return self.snapshot()

    # ------------------------------------------------------------------ topic requests

    def request_topic(self, topic: str) -> None:
        """Ask the Sender to look a topic up. The caller holds the directory lock."""
        encoded = topic.encode("utf-8")
        if not encoded or len(encoded) > MAX_TOPIC_NAME:
            raise ShmConfigError(f"invalid topic name {topic!r}")
        if topic in self.requested_topics():
            return
        buf = self.segment.buf
        count: int = U32.unpack_from(buf, H_TOPIC_REQUESTS)[0]
        if count >= self.layout.config.max_topics:
            raise CapacityError(f"more than max_topics={self.layout.config.max_topics} requested")
        TOPIC_REQUEST.pack_into(
            buf, self.layout.topic_requests_at + count * TOPIC_REQUEST.size, len(encoded), encoded
        )
        self.segment.store_u32(H_TOPIC_REQUESTS, count + 1)

    def requested_topics(self) -> list[str]:
        buf = self.segment.buf
        count = min(U32.unpack_from(buf, H_TOPIC_REQUESTS)[0], self.layout.config.max_topics)
        out = []
        for i in range(count):
            length, raw = TOPIC_REQUEST.unpack_from(
                buf, self.layout.topic_requests_at + i * TOPIC_REQUEST.size
            )
            out.append(raw[:length].decode("utf-8", "replace"))
        return out

    def take_topic_requests(self) -> list[str]:
        """The Sender's side: read and clear the requests. The caller holds the lock."""
        topics = [t for t in self.requested_topics() if LEGAL_TOPIC.fullmatch(t)]
        self.segment.store_u32(H_TOPIC_REQUESTS, 0)
        return topics  # (producers check names before asking: others are memory damage)

    def _init_deque(self, deque_id: int, partition: int) -> None:
        DEQUE_HEADER.pack_into(
            self.segment.buf, self.layout.deque_at(deque_id), 0, 0, partition, 0, 0, 0
        )
