"""Fetch (key 1), v4–v12. Flexible from v12 (topic names; topic ids arrive in v13)."""

from __future__ import annotations

from dataclasses import dataclass

from shmkafka.protocol.schema import Array, Message, kf


@dataclass(frozen=True)
class FetchPartition:
    partition: int = kf("int32")
    current_leader_epoch: int = kf("int32", "9+", default=-1)
    fetch_offset: int = kf("int64")
    last_fetched_epoch: int = kf("int32", "12+", default=-1)
    log_start_offset: int = kf("int64", "5+", default=-1)
    partition_max_bytes: int = kf("int32", default=1 << 20)


@dataclass(frozen=True)
class FetchTopic:
    topic: str = kf("string", "0-12")
    partitions: tuple[FetchPartition, ...] = kf(Array(FetchPartition))


@dataclass(frozen=True)
class ForgottenTopic:
    topic: str = kf("string", "7-12")
    partitions: tuple[int, ...] = kf(Array("int32"), "7+")


@dataclass(frozen=True)
class FetchRequest(Message):
    API_KEY = 1
    MIN_VERSION = 4
    MAX_VERSION = 12
    FLEXIBLE_FROM = 12

    cluster_id: str | None = kf("string", "12+", nullable="12+", tag=0, tagged="12+", default=None)
    replica_id: int = kf("int32", "0-14", default=-1)
    max_wait_ms: int = kf("int32", default=500)
    min_bytes: int = kf("int32", default=1)
    max_bytes: int = kf("int32", "3+", default=0x7FFFFFFF)
    isolation_level: int = kf("int8", "4+")
    session_id: int = kf("int32", "7+")
    session_epoch: int = kf("int32", "7+", default=-1)
    topics: tuple[FetchTopic, ...] = kf(Array(FetchTopic))
    forgotten_topics_data: tuple[ForgottenTopic, ...] = kf(Array(ForgottenTopic), "7+")
    rack_id: str = kf("string", "11+")


@dataclass(frozen=True)
class EpochEndOffset:
    epoch: int = kf("int32", "12+", default=-1)
    end_offset: int = kf("int64", "12+", default=-1)


@dataclass(frozen=True)
class LeaderIdAndEpoch:
    leader_id: int = kf("int32", "12+", default=-1)
    leader_epoch: int = kf("int32", "12+", default=-1)


@dataclass(frozen=True)
class SnapshotId:
    end_offset: int = kf("int64", default=-1)
    epoch: int = kf("int32", default=-1)


@dataclass(frozen=True)
class AbortedTransaction:
    producer_id: int = kf("int64", "4+")
    first_offset: int = kf("int64", "4+")


@dataclass(frozen=True)
class PartitionData:
    partition_index: int = kf("int32")
    error_code: int = kf("int16")
    high_watermark: int = kf("int64")
    last_stable_offset: int = kf("int64", "4+", default=-1)
    log_start_offset: int = kf("int64", "5+", default=-1)
    diverging_epoch: EpochEndOffset = kf(EpochEndOffset, "12+", tag=0, tagged="12+")
    current_leader: LeaderIdAndEpoch = kf(LeaderIdAndEpoch, "12+", tag=1, tagged="12+")
    snapshot_id: SnapshotId = kf(SnapshotId, "12+", tag=2, tagged="12+")
    aborted_transactions: tuple[AbortedTransaction, ...] | None = kf(
        Array(AbortedTransaction), "4+", nullable="4+", default=None
    )
    preferred_read_replica: int = kf("int32", "11+", default=-1)
    records: bytes | None = kf("records", nullable="0+")


@dataclass(frozen=True)
class FetchableTopicResponse:
    topic: str = kf("string", "0-12")
    partitions: tuple[PartitionData, ...] = kf(Array(PartitionData))


@dataclass(frozen=True)
class FetchResponse(Message):
    API_KEY = 1
    MIN_VERSION = 4
    MAX_VERSION = 12
    FLEXIBLE_FROM = 12

    throttle_time_ms: int = kf("int32", "1+")
    error_code: int = kf("int16", "7+")
    session_id: int = kf("int32", "7+")
    responses: tuple[FetchableTopicResponse, ...] = kf(Array(FetchableTopicResponse))
