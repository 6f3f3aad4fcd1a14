"""The cluster's state, without I/O: nodes, topics, partitions with a replica set, leaders
with leader epochs, an ISR, and simulated followers that copy the leader's log.

Rules:
- Every method takes ``now_ms``; nothing here sleeps or reads a clock, so tests step time.
- A follower fetches when the leader's data is at least ``replication_lag_ms`` old, and
  learns the leader's high watermark as of its previous fetch (as in Kafka, a follower's HW
  lags one round). The leader's HW is the smallest LEO of its in-sync replicas.
- The ISR holds the live replicas that have what was acknowledged: a restarted replica is
  back in it once its log reaches the leader's high watermark (at once if it does), as any
  follower. A partition whose leader's node dies gets the first live in-sync replica as
  leader, with the leader epoch bumped.
- With ``storage_dir`` every replica's log is also a DiskLog (storage.py) under
  ``storage_dir/node-N/topic-partition/``, and the topics are recorded in
  ``storage_dir/topics.json``: a new Cluster on the same directory recovers them.
- Deleting a topic forgets its partitions at once. With ``storage_dir`` its replicas'
  directories are closed and renamed aside (``topic-partition.<id>-delete``, as Kafka does),
  so a topic created again under the name starts empty; a new Cluster on the directory
  removes what was renamed aside (the flusher thread may still hold a deleted log for a
  moment: its files stay until then).
- Links between nodes (``set_links``: the pairs whose probe got through lately; None, the
  default, is every pair) decide who replicates: a follower that cannot reach its leader does
  not fetch. With ``replica_lag_time_max_ms`` a follower that has not caught up for that
  long leaves the ISR (Kafka's ``replica.lag.time.max.ms``; 0 keeps it, as before).
- The controller's quorum: a live node that reaches fewer than a majority of the nodes (itself
  included) for ``session_timeout_ms`` is fenced. It stays up and answers, but leads
  nothing and is in no ISR: its partitions get a new leader from their ISR (epoch bumped).
  It is unfenced when it reaches a majority again, truncates by epoch, and rejoins the ISR
  once caught up. A leader cut off from its followers is so replaced while clients that
  still reach it are told NOT_LEADER_OR_FOLLOWER.
- acks=all is answered when the HW covers the batch with at least ``min_insync_replicas``
  in the ISR (else NOT_ENOUGH_REPLICAS_AFTER_APPEND), or NOT_LEADER_OR_FOLLOWER when the
  leader changed meanwhile (``ack_state``).
- A replica that restarts truncates by leader epoch (default), or, with
  ``truncate_on_restart="hw"``, at its own high watermark: the pre-KIP-101 behaviour that
  loses acknowledged records (KIP-101's scenario, kept to show the difference).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import uuid
from dataclasses import dataclass, field

from shmkafka.broker_stub.log import PartitionLog, ProducerFacts, StoredBatch
from shmkafka.broker_stub.storage import DiskLog, StorageConfig
from shmkafka.protocol.error_codes import ErrorCode

NO_LEADER = -1
DELETED_SUFFIX = "-delete"  # a deleted replica's directory: topic-partition.<id>-delete


@dataclass(eq=False)  # identity: partitions are kept in sets
class Partition:
    topic: str
    index: int
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    logs: dict[int, PartitionLog] = field(default_factory=dict)
    isr: list[int] = field(default_factory=list)
    # producer facts of each batch, by base offset, so followers copy producer state too
    producer_of: dict[int, ProducerFacts] = field(default_factory=dict)
    appended_ms: dict[int, int] = field(default_factory=dict)  # base offset → append time
    caught_up_ms: dict[int, int] = field(default_factory=dict)  # replica → last caught up

    @property
    def leader_log(self) -> PartitionLog:
        return self.logs[self.leader]


@dataclass
class ClusterConfig:
    nodes: int = 1
    partitions: int = 1
    replication_factor: int = 1
    auto_create_topics: bool = True
    min_insync_replicas: int = 1
    replication_lag_ms: int = 0
    max_message_bytes: int = 1024 * 1024 + 12
    log_append_time_topics: frozenset[str] = frozenset()
    truncate_on_restart: str = "epoch"  # or "hw"
    storage_dir: str | None = None
    replica_lag_time_max_ms: int = 0  # 0: a live follower stays in the ISR
    session_timeout_ms: int = 2000  # a node out of the quorum this long is fenced
    storage: StorageConfig = field(default_factory=StorageConfig)


class Cluster:
    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.node_ids = list(range(1, config.nodes + 1))
        self.live: set[int] = set(self.node_ids)
        self.fenced: set[int] = set()
        self.links: set[tuple[int, int]] | None = None  # (from, to) that get through
        self._out_of_quorum: dict[int, int] = {}  # node → since when (ms)
        self.topics: dict[str, list[Partition]] = {}
        self._producer_ids = itertools.count(1000)
        self._next_leader = 0
        self._created: list[tuple[str, int, int]] = []
        if config.storage_dir is not None:
            self._recover(config.storage_dir)

    def _recover(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        for node_dir in os.listdir(directory):  # the logs of topics deleted before
            if os.path.isdir(os.path.join(directory, node_dir)):
                for name in os.listdir(os.path.join(directory, node_dir)):
                    if name.endswith(DELETED_SUFFIX):
                        shutil.rmtree(os.path.join(directory, node_dir, name))
        path = os.path.join(directory, "topics.json")
        if not os.path.exists(path):
            return
        with open(path) as f:
            created = json.load(f)
        for name, count, factor in created:
            self.create_topic(name, count, factor)
        for parts in self.topics.values():
            for p in parts:  # a new epoch above any in the logs; the HW from the logs
                p.leader_epoch = max(log.latest_epoch() for log in p.logs.values()) + 1
                self._advance_hw(p)
        ids = [
            pid for parts in self.topics.values() for p in parts for pid in p.leader_log.producers
        ]
        self._producer_ids = itertools.count(max(ids, default=999) + 1)

    def _new_log(self, replica: int, topic: str, index: int) -> PartitionLog:
        if self.config.storage_dir is None:
            return PartitionLog()
        directory = os.path.join(self.config.storage_dir, f"node-{replica}", f"{topic}-{index}")
        return PartitionLog(DiskLog(directory, self.config.storage, 0))

    def disk_logs(self) -> list[DiskLog]:
        return [log.disk for parts in self.topics.values() for p in parts
                for log in p.logs.values() if log.disk is not None]  # fmt: skip

    # ------------------------------------------------------------------ topics

    def create_topic(self, name: str, partitions: int | None = None, rf: int | None = None) -> int:
        """NONE (0), or TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS or INVALID_REPLICATION_FACTOR."""
        if name in self.topics:
            return ErrorCode.TOPIC_ALREADY_EXISTS
        count = self.config.partitions if partitions in (None, -1) else partitions
        factor = self.config.replication_factor if rf in (None, -1) else rf
        assert count is not None and factor is not None
        if count < 1:
            return ErrorCode.INVALID_PARTITIONS
        if not 1 <= factor <= len(self.node_ids):
            return ErrorCode.INVALID_REPLICATION_FACTOR
        self.topics[name] = self._new_partitions(name, range(count), factor)
        self._created.append((name, count, factor))
        self._save_topics()
        return 0

    def add_partitions(self, name: str, count: int) -> int:
        """Grow ``name`` to ``count`` partitions (CreatePartitions): NONE (0), or
        UNKNOWN_TOPIC_OR_PARTITION, or INVALID_PARTITIONS unless ``count`` is larger."""
        parts = self.topics.get(name)
        if parts is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if count <= len(parts):
            return ErrorCode.INVALID_PARTITIONS
        factor = len(parts[0].replicas)
        parts += self._new_partitions(name, range(len(parts), count), factor)
        self._created = [(n, count if n == name else c, f) for n, c, f in self._created]
        self._save_topics()
        return 0

    def _new_partitions(self, name: str, indexes: range, factor: int) -> list[Partition]:
        parts = []
        for index in indexes:
            first = (self._next_leader + index) % len(self.node_ids)
            replicas = [self.node_ids[(first + k) % len(self.node_ids)] for k in range(factor)]
            live = [r for r in replicas if self.serving(r)]
            leader = live[0] if live else NO_LEADER
            partition = Partition(name, index, replicas, leader, 0, isr=live)
            partition.logs = {r: self._new_log(r, name, index) for r in replicas}
            parts.append(partition)
        self._next_leader += len(indexes)
        return parts

    def delete_topic(self, name: str) -> int:
        """NONE (0), or UNKNOWN_TOPIC_OR_PARTITION if there is no such topic."""
        parts = self.topics.pop(name, None)
        if parts is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        self._created = [entry for entry in self._created if entry[0] != name]
        self._save_topics()
        for p in parts:
            for log in p.logs.values():
                if log.disk is not None:
                    self._move_aside(log.disk)
        return 0

    def _move_aside(self, disk: DiskLog) -> None:
        disk.close()
        aside = f"{disk.directory}.{uuid.uuid4().hex}{DELETED_SUFFIX}"
        os.rename(disk.directory, aside)
        # a flusher round that still holds this log checkpoints its HW in the new place
        disk._hw_path = os.path.join(aside, os.path.basename(disk._hw_path))
        disk.directory = aside

    def _save_topics(self) -> None:
        if self.config.storage_dir is None:
            return
        path = os.path.join(self.config.storage_dir, "topics.json")
        with open(path + ".swap", "w") as f:
            json.dump(self._created, f)
        os.replace(path + ".swap", path)

    def partition(self, topic: str, index: int) -> Partition | None:
        parts = self.topics.get(topic)
        if parts is None or not 0 <= index < len(parts):
            return None
        return parts[index]

    def new_producer_id(self) -> int:
        return next(self._producer_ids)

    # ------------------------------------------------------------------ replication

    def replicate(self, now_ms: int) -> None:
        """One fetch round of every live follower, then the leaders' high watermarks."""
        for parts in self.topics.values():
            for p in parts:
                self.replicate_partition(p, now_ms)

    def replicate_partition(self, p: Partition, now_ms: int) -> None:
        """One partition's fetch round and high watermark (a produce without replication
        lag: the whole cluster's round would cost every partition on every append)."""
        if p.leader == NO_LEADER:
            return
        for replica in p.replicas:
            if replica != p.leader and self.serving(replica) and self.reaches(replica, p.leader):
                self._fetch(p, replica, now_ms)
        self._shrink_isr(p, now_ms)
        self._advance_hw(p)

    def _fetch(self, p: Partition, replica: int, now_ms: int) -> None:
        leader, mine = p.leader_log, p.logs[replica]
        mine.hw = min(leader.hw, mine.leo)  # what the leader told us last round
        for batch in leader.batches_from(mine.leo):
            if now_ms - p.appended_ms.get(batch.base_offset, 0) < self.config.replication_lag_ms:
                break
            mine.append_replica(batch, p.producer_of.get(batch.base_offset))
        if replica not in p.isr and mine.leo >= leader.hw:
            p.isr.append(replica)  # caught up: back in sync
            p.caught_up_ms[replica] = now_ms

    def _shrink_isr(self, p: Partition, now_ms: int) -> None:
        leo = p.leader_log.leo
        for replica in list(p.isr):
            if replica == p.leader or p.logs[replica].leo >= leo:
                p.caught_up_ms[replica] = now_ms
            elif (
                self.config.replica_lag_time_max_ms
                and now_ms - p.caught_up_ms.setdefault(replica, now_ms)
                > self.config.replica_lag_time_max_ms
            ):
                p.isr.remove(replica)

    def _advance_hw(self, p: Partition) -> None:
        leader = p.leader_log
        in_sync = [p.logs[r].leo for r in p.isr if r in self.live]
        leader.hw = max(leader.hw, min(in_sync)) if in_sync else leader.hw

    def acked(self, p: Partition, last_offset: int) -> bool:
        """acks=all: the high watermark covers the batch."""
        return p.leader != NO_LEADER and p.leader_log.hw > last_offset

    def ack_state(self, p: Partition, last_offset: int, leader: int, epoch: int) -> int | None:
        """An acks=all batch appended by ``leader`` in ``epoch``: None while it waits, else
        its answer's error code (0: acknowledged)."""
        if p.leader != leader or p.leader_epoch != epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if p.leader_log.hw <= last_offset:
            return None
        in_sync = sum(1 for r in p.isr if self.serving(r))
        if in_sync < self.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    # ------------------------------------------------------------------ links, quorum

    def serving(self, node: int) -> bool:
        """Up and not fenced: may lead and replicate."""
        return node in self.live and node not in self.fenced

    def reaches(self, a: int, b: int) -> bool:
        return self.links is None or (a, b) in self.links

    def set_links(self, links: set[tuple[int, int]] | None, now_ms: int) -> None:
        """The pairs of nodes whose probes get through now; then the quorum is checked."""
        self.links = links
        majority = len(self.node_ids) // 2 + 1
        for node in self.node_ids:
            if node not in self.live:
                self._out_of_quorum.pop(node, None)
                continue
            reached = 1 + sum(1 for m in self.node_ids if m != node and self.reaches(node, m))
            if reached >= majority:
                self._out_of_quorum.pop(node, None)
                if node in self.fenced:
                    self.unfence_node(node)
                continue
            since = self._out_of_quorum.setdefault(node, now_ms)
            if node not in self.fenced and now_ms - since >= self.config.session_timeout_ms:
                self.fence_node(node)

    def fence_node(self, node: int) -> None:
        """Out of the quorum: leadership and ISR places go to the others."""
        self.fenced.add(node)
        self._step_down(node, keep_last=True)

    def unfence_node(self, node: int) -> None:
        """Back in the quorum: it leads a leaderless partition only from its ISR (a clean
        election), and truncates to the leader of the others."""
        self.fenced.discard(node)
        for parts in self.topics.values():
            for p in parts:
                if node not in p.replicas:
                    continue
                if p.leader == NO_LEADER:
                    if node in p.isr:
                        self._become_leader(p, node)
                else:
                    self._truncate_by_epoch(p, node)

    # ------------------------------------------------------------------ leadership

    def move_leader(self, topic: str, index: int, to: int) -> None:
        p = self.topics[topic][index]
        if to not in p.replicas or not self.serving(to):
            raise ValueError(f"node {to} is not a live replica of {topic}-{index}")
        self._become_leader(p, to)

    def _become_leader(self, p: Partition, node: int) -> None:
        old = p.leader_log if p.leader != NO_LEADER and self.serving(p.leader) else None
        p.leader_epoch += 1
        p.leader = node
        log = p.logs[node]
        if old is not None:  # a clean move: the new leader first catches up
            for batch in old.batches_from(log.leo):
                log.append_replica(batch, p.producer_of.get(batch.base_offset))
        for replica in p.replicas:  # followers truncate to the new leader by epoch
            if replica != node:
                self._truncate_by_epoch(p, replica)
        p.isr = [r for r in p.replicas if self.serving(r) and p.logs[r].leo == log.leo]
        p.caught_up_ms.clear()  # (the lag of each is counted from the next round)
        if node not in p.isr:
            p.isr.insert(0, node)
        self._advance_hw(p)

    def _truncate_by_epoch(self, p: Partition, replica: int) -> None:
        mine = p.logs[replica]
        epoch = mine.latest_epoch()
        if epoch < 0 or p.leader == NO_LEADER:
            return
        end = p.leader_log.end_offset_for_epoch(epoch)
        if end < mine.leo:
            mine.truncate_to(end)

    def kill_node(self, node: int) -> None:
        self.live.discard(node)
        self.fenced.discard(node)  # (a restarted node is judged by its links anew)
        self._out_of_quorum.pop(node, None)
        self._step_down(node)

    def _step_down(self, node: int, keep_last: bool = False) -> None:
        """``node`` leaves every ISR and leadership; with ``keep_last`` (a fenced node, as
        Kafka's controller does) it stays the last member of an ISR it alone is left in, so
        that only it, never a stale replica, can lead that partition again."""
        for parts in self.topics.values():
            for p in parts:
                if node in p.isr and not (keep_last and p.isr == [node]):
                    p.isr.remove(node)
                if p.leader == node:
                    candidates = [r for r in p.isr if self.serving(r)]
                    if candidates:
                        self._become_leader(p, candidates[0])
                    else:
                        p.leader = NO_LEADER
                        p.leader_epoch += 1

    def restart_node(self, node: int) -> None:
        """The node comes back: each of its replicas truncates (by epoch, or at its HW) and
        rejoins as a follower, or as leader of a partition that had none."""
        self.live.add(node)
        for parts in self.topics.values():
            for p in parts:
                if node not in p.replicas:
                    continue
                mine = p.logs[node]
                hw_mode = self.config.truncate_on_restart == "hw"
                if hw_mode:
                    mine.truncate_to(mine.hw)
                if p.leader == NO_LEADER:
                    self._rejoin_isr(p, node)
                    self._become_leader(p, node)
                    continue
                if not hw_mode:
                    self._truncate_by_epoch(p, node)
                # In sync only if it has what was acknowledged: one back behind must not be
                # elected over replicas that have it (hw: pre-KIP-101's quick restart, which
                # rejoined at once and so lost acknowledged records)
                if hw_mode or mine.leo >= p.leader_log.hw:
                    self._rejoin_isr(p, node)

    @staticmethod
    def _rejoin_isr(p: Partition, node: int) -> None:
        if node not in p.isr:
            p.isr.append(node)
            p.caught_up_ms.pop(node, None)  # (counted from the next round)

    # ------------------------------------------------------------------ appends

    def record_append(
        self, p: Partition, batch: StoredBatch, producer: ProducerFacts | None, now_ms: int
    ) -> None:
        p.appended_ms[batch.base_offset] = now_ms
        if producer is not None:
            p.producer_of[batch.base_offset] = producer
        if len(p.isr) <= 1:
            self._advance_hw(p)
