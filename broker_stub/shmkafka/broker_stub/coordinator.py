"""The stub's transaction coordinator: transactional ids, their producer ids and epochs, the
partitions and groups of each open transaction, the COMMIT/ABORT markers written at its
end, and what read_committed readers need (the last stable offset, the aborted
transactions). Sans-IO over the cluster state, one instance per cluster.

Rules:
- A transactional id's coordinator is one live node, by a stable hash of the id unless a
  test moved it (``move``); a request to another node gets NOT_COORDINATOR, and a dead
  coordinator COORDINATOR_NOT_AVAILABLE.
- InitProducerId with a transactional id keeps its producer id and bumps the epoch; an open
  transaction of the old epoch is aborted first (its markers written). An older epoch on
  any later request is PRODUCER_FENCED.
- EndTxn writes one marker into every partition of the transaction (a control batch of its
  producer id and epoch, no sequence), then commits the group offsets it carried (commit
  only), each with its leader epoch and metadata (a null metadata kept as "", as Kafka
  does). EndTxn with the outcome just completed is answered NONE (a client's retry); the
  other outcome, or no open transaction, is INVALID_TXN_STATE.
- A transaction open longer than its timeout is aborted by the coordinator, with the epoch
  bumped (the producer is fenced, as Kafka does).
- A transactional batch is accepted only for a partition its transaction added.
- OffsetFetch answers a partition the group never committed with offset -1, leader epoch
  -1 and metadata "", no error; with ``require_stable``, a partition an open transaction
  carries an offset for answers UNSTABLE_OFFSET_COMMIT (Kafka's classic coordinator).
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field

from shmkafka.broker_stub.cluster import Cluster, Partition
from shmkafka.protocol.clock import wall_ms
from shmkafka.protocol.control import ControlType, encode_marker_key, encode_marker_value
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.records import BatchHeader, BatchMeta, build_batch, decode_batch_header
from shmkafka.protocol.records import make_attributes as _attributes

TopicPartition = tuple[str, int]
EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT = (
    "Empty",
    "Ongoing",
    "CompleteCommit",
    "CompleteAbort",
)


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


NO_OFFSET = CommittedOffset(-1)


@dataclass
class Transaction:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: str = EMPTY
    started_ms: int = 0
    partitions: set[TopicPartition] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)


@dataclass
class PartitionTxns:
    """One partition's transactions, for read_committed: the first offset of each open one
    (by producer id), and the aborted ones (producer id, first offset, marker offset)."""

    open_first: dict[int, int] = field(default_factory=dict)
    aborted: list[tuple[int, int, int]] = field(default_factory=list)


@dataclass
class Coordinator:
    cluster: Cluster
    transactions: dict[str, Transaction] = field(default_factory=dict)
    committed_offsets: dict[str, dict[TopicPartition, CommittedOffset]] = field(
        default_factory=dict
    )
    partition_txns: dict[TopicPartition, PartitionTxns] = field(default_factory=dict)
    moved: dict[str, int] = field(default_factory=dict)  # transactional id → node (tests)
    markers_written: int = 0

    # ------------------------------------------------------------------ placement

    def node_for(self, key: str) -> int | None:
        """The coordinator of ``key`` (None: no live node)."""
        if key in self.moved:
            node = self.moved[key]
            return node if node in self.cluster.live else None
        live = sorted(self.cluster.live)
        return live[zlib.crc32(key.encode()) % len(live)] if live else None

    def check_node(self, key: str, node: int) -> int:
        """NONE if ``node`` coordinates ``key``, else the error to answer."""
        found = self.node_for(key)
        if found is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE if found == node else ErrorCode.NOT_COORDINATOR

    def move(self, transactional_id: str, node: int) -> None:
        self.moved[transactional_id] = node

    # ------------------------------------------------------------------ the APIs

    def init_producer_id(self, txn_id: str, timeout_ms: int) -> tuple[int, int, int]:
        """(error code, producer id, epoch)."""
        self.expire()
        txn = self.transactions.get(txn_id)
        if txn is None:
            txn = Transaction(txn_id, self.cluster.new_producer_id(), -1, timeout_ms)
            self.transactions[txn_id] = txn
        if txn.state == ONGOING:
            self._end(txn, commit=False)
        txn.epoch += 1
        txn.timeout_ms, txn.state = timeout_ms, EMPTY
        return ErrorCode.NONE, txn.producer_id, txn.epoch

    def add_partitions(self, txn_id: str, producer_id: int, epoch: int,
                       partitions: list[TopicPartition]) -> int:  # fmt: skip
        txn, code = self._open(txn_id, producer_id, epoch)
        if txn is None:
            return code
        for tp in partitions:
            if self.cluster.partition(*tp) is None:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        txn.partitions.update(partitions)
        return ErrorCode.NONE

    def add_offsets(self, txn_id: str, producer_id: int, epoch: int, group_id: str) -> int:
        txn, code = self._open(txn_id, producer_id, epoch)
        if txn is not None:
            txn.groups.add(group_id)
        return code

    def txn_offset_commit(self, txn_id: str, producer_id: int, epoch: int, group_id: str,
                          offsets: dict[TopicPartition, CommittedOffset]) -> int:  # fmt: skip
        txn = self.transactions.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch < txn.epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn.state != ONGOING or group_id not in txn.groups:
            return ErrorCode.INVALID_TXN_STATE
        txn.offsets.setdefault(group_id, {}).update(offsets)
        return ErrorCode.NONE

    def end_txn(self, txn_id: str, producer_id: int, epoch: int, commit: bool) -> int:
        self.expire()
        txn = self.transactions.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch < txn.epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn.state in (COMPLETE_COMMIT, COMPLETE_ABORT):
            done = txn.state == COMPLETE_COMMIT
            return ErrorCode.NONE if done == commit else ErrorCode.INVALID_TXN_STATE
        if txn.state != ONGOING:
            return ErrorCode.INVALID_TXN_STATE
        self._end(txn, commit)
        return ErrorCode.NONE

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool
    ) -> list[tuple[TopicPartition, CommittedOffset, int]]:
        """(partition, committed offset, error code) of each of ``partitions``, or of every
        partition the group committed (None)."""
        self.expire()  # (an expired transaction's offsets are no longer pending)
        committed = self.committed_offsets.get(group_id, {})
        pending = {tp for txn in self.transactions.values() if txn.state == ONGOING
                   for tp in txn.offsets.get(group_id, {})}  # fmt: skip
        answers: list[tuple[TopicPartition, CommittedOffset, int]] = []
        for tp in sorted(committed) if partitions is None else partitions:
            if require_stable and tp in pending:
                answers.append((tp, NO_OFFSET, ErrorCode.UNSTABLE_OFFSET_COMMIT))
            else:
                answers.append((tp, committed.get(tp, NO_OFFSET), ErrorCode.NONE))
        return answers

    # ------------------------------------------------------------------ the data path

    def check_append(self, topic: str, index: int, header: BatchHeader) -> int:
        """A transactional batch's admission: its transaction must have added the partition."""
        if not header.is_transactional:
            return ErrorCode.NONE
        txn = self._by_producer(header.producer_id)
        if txn is not None and header.producer_epoch < txn.epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn is None or txn.state != ONGOING or (topic, index) not in txn.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def appended(self, topic: str, index: int, header: BatchHeader, base_offset: int) -> None:
        if header.is_transactional:
            txns = self.partition_txns.setdefault((topic, index), PartitionTxns())
            txns.open_first.setdefault(header.producer_id, base_offset)

    def last_stable_offset(self, topic: str, index: int, hw: int) -> int:
        txns = self.partition_txns.get((topic, index))
        if txns is None or not txns.open_first:
            return hw
        return min(hw, *txns.open_first.values())

    def aborted_in(self, topic: str, index: int, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions that overlap
        [start, end)."""
        txns = self.partition_txns.get((topic, index))
        if txns is None:
            return []
        return [(pid, first) for pid, first, marker in txns.aborted
                if first < end and marker >= start]  # fmt: skip

    def expire(self, now_ms: int | None = None) -> None:
        now = wall_ms() if now_ms is None else now_ms
        for txn in self.transactions.values():
            if txn.state == ONGOING and now - txn.started_ms > txn.timeout_ms:
                self._end(txn, commit=False)
                txn.epoch += 1  # (the producer that let it expire is fenced)

    # ------------------------------------------------------------------ inside

    def _by_producer(self, producer_id: int) -> Transaction | None:
        return next((t for t in self.transactions.values() if t.producer_id == producer_id),
                    None)  # fmt: skip

    def _open(self, txn_id: str, producer_id: int, epoch: int) -> tuple[Transaction | None, int]:
        """The transaction a request adds to (opened if empty), or the error to answer."""
        self.expire()
        txn = self.transactions.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch < txn.epoch:
            return None, ErrorCode.PRODUCER_FENCED
        if epoch > txn.epoch:
            return None, ErrorCode.INVALID_PRODUCER_EPOCH
        if txn.state != ONGOING:
            txn.state, txn.started_ms = ONGOING, wall_ms()
            txn.partitions, txn.groups, txn.offsets = set(), set(), {}
        return txn, ErrorCode.NONE

    def _end(self, txn: Transaction, commit: bool) -> None:
        kind = ControlType.COMMIT if commit else ControlType.ABORT
        for topic, index in sorted(txn.partitions):
            p = self.cluster.partition(topic, index)
            if p is not None:
                self._write_marker(p, txn, kind)
        if commit:
            for group, offsets in txn.offsets.items():
                self.committed_offsets.setdefault(group, {}).update(offsets)
        txn.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT

    def _write_marker(self, p: Partition, txn: Transaction, kind: ControlType) -> None:
        meta = BatchMeta(attributes=_attributes(transactional=True, control=True),
                         producer_id=txn.producer_id, producer_epoch=txn.epoch)  # fmt: skip
        data = build_batch([(wall_ms(), encode_marker_key(kind), encode_marker_value(0), [])], meta)
        header = decode_batch_header(data)
        # (no sequence: the producer's sequence state is not the marker's to move)
        log = p.leader_log
        stored = log.append_as_leader(data, dataclasses.replace(header, producer_id=-1),
                                      p.leader_epoch, None)  # fmt: skip
        self.cluster.record_append(p, stored, None, wall_ms())
        self.markers_written += 1
        txns = self.partition_txns.setdefault((p.topic, p.index), PartitionTxns())
        first = txns.open_first.pop(txn.producer_id, None)
        if kind is ControlType.ABORT and first is not None:
            txns.aborted.append((txn.producer_id, first, stored.base_offset))
