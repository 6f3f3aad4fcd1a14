"""The transactional producer's coordinator APIs, at the versions a client sends
(before KIP-890 part 2, whose versions change what the broker may answer and bump the epoch
at every EndTxn):

- AddPartitionsToTxn (key 24), v0–v3: the partitions a transaction writes to, before their
  first batch. v4+ is the brokers' batched form (several transactions, ``verify_only``).
- AddOffsetsToTxn (key 25), v0–v3: the consumer group whose offsets the transaction commits.
- TxnOffsetCommit (key 28), v0–v3: those offsets, sent to the group coordinator; v3 adds the
  group's generation and member (KIP-447).
- EndTxn (key 26), v0–v3: commit or abort.

All four are flexible from v3.
"""

from __future__ import annotations

from dataclasses import dataclass

from shmkafka.protocol.schema import Array, Message, kf


@dataclass(frozen=True)
class AddPartitionsToTxnTopic:
    name: str = kf("string")
    partitions: tuple[int, ...] = kf(Array("int32"))


@dataclass(frozen=True)
class AddPartitionsToTxnRequest(Message):
    API_KEY = 24
    MIN_VERSION = 0
    MAX_VERSION = 3
    FLEXIBLE_FROM = 3

    transactional_id: str = kf("string")
    producer_id: int = kf("int64")
    producer_epoch: int = kf("int16")
    topics: tuple[AddPartitionsToTxnTopic, ...] = kf(Array(AddPartitionsToTxnTopic))


@dataclass(frozen=True)
class AddPartitionsToTxnPartitionResult:
    partition_index: int = kf("int32")
    partition_error_code: int = kf("int16")


@dataclass(frozen=True)
class AddPartitionsToTxnTopicResult:
    name: str = kf("string")
    results_by_partition: tuple[AddPartitionsToTxnPartitionResult, ...] = kf(
        Array(AddPartitionsToTxnPartitionResult)
    )


@dataclass(frozen=True)
class AddPartitionsToTxnResponse(Message):
    API_KEY = 24
    MIN_VERSION = 0
    MAX_VERSION = 3
    FLEXIBLE_FROM = 3

    throttle_time_ms: int = kf("int32")
    results: tuple[AddPartitionsToTxnTopicResult, ...] = kf(Array(AddPartitionsToTxnTopicResult))


@dataclass(frozen=True)
class AddOffsetsToTxnRequest(Message):
    API_KEY = 25
    MIN_VERSION = 0
    MAX_VERSION = 3
    FLEXIBLE_FROM = 3

    transactional_id: str = kf("string")
    producer_id: int = kf("int64")
    producer_epoch: int = kf("int16")
    group_id: str = kf("string")


@dataclass(frozen=True)
class AddOffsetsToTxnResponse(Message):
    API_KEY = 25
    MIN_VERSION = 0
    MAX_VERSION = 3
    FLEXIBLE_FROM = 3

    throttle_time_ms: int = kf("int32")
    error_code: int = kf("int16")


@dataclass(frozen=True)
class TxnOffsetCommitRequestPartition:
    partition_index: int = kf("int32")
    committed_offset: int = kf("int64")
    committed_leader_epoch: int = kf("int32", "2+", default=-1)
    committed_metadata: str | None = kf("string", nullable="0+", default=None)


@dataclass(frozen=True)
class TxnOffsetCommitRequestTopic:
    name: str = kf("string")
    partitions: tuple[TxnOffsetCommitRequestPartition, ...] = kf(
        Array(TxnOffsetCommitRequestPartition)
    )


@dataclass(frozen=True)
class TxnOffsetCommitRequest(Message):
    API_KEY = 28
    MIN_VERSION = 0
    MAX_VERSION = 3
    FLEXIBLE_FROM = 3

    transactional_id: str = kf("string")
    group_id: str = kf("string")
    producer_id: int = kf("int64")
    producer_epoch: int = kf("int16")
    generation_id: int = kf("int32", "3+", default=-1)
    member_id: str = kf("string", "3+", default="")
    group_instance_id: str | None = kf("string", "3+", nullable="3+", default=None)
    topics: tuple[TxnOffsetCommitRequestTopic, ...] = kf(Array(TxnOffsetCommitRequestTopic))


@dataclass(frozen=True)
class TxnOffsetCommitResponsePartition:
    partition_index: int = kf("int32")
    error_code: int = kf("int16")


@dataclass(frozen=True)
class TxnOffsetCommitResponseTopic:
    name: str = kf("string")
    partitions: tuple[TxnOffsetCommitResponsePartition, ...] = kf(
        Array(TxnOffsetCommitResponsePartition)
    )


@dataclass(frozen=True)
class TxnOffsetCommitResponse(Message):
    API_KEY = 28
    MIN_VERSION = 0
    MAX_VERSION = 3
    FLEXIBLE_FROM = 3

    throttle_time_ms: int = kf("int32")
    topics: tuple[TxnOffsetCommitResponseTopic, ...] = kf(Array(TxnOffsetCommitResponseTopic))


@dataclass(frozen=True)
class EndTxnRequest(Message):
    API_KEY = 26
    MIN_VERSION = 0
    MAX_VERSION = 3
    FLEXIBLE_FROM = 3

    transactional_id: str = kf("string")
    producer_id: int = kf("int64")
    producer_epoch: int = kf("int16")
    committed: bool = kf("bool")


@dataclass(frozen=True)
class EndTxnResponse(Message):
    API_KEY = 26
    MIN_VERSION = 0
    MAX_VERSION = 3
    FLEXIBLE_FROM = 3

    throttle_time_ms: int = kf("int32")
    error_code: int = kf("int16")
