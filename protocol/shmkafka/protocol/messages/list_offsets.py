"""ListOffsets (key 2), v1–v7. Flexible from v6."""

from __future__ import annotations

from dataclasses import dataclass

from shmkafka.protocol.schema import Array, Message, kf

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True)
class ListOffsetsPartition:
    partition_index: int = kf("int32")
    current_leader_epoch: int = kf("int32", "4+", default=-1)
    timestamp: int = kf("int64")


@dataclass(frozen=True)
class ListOffsetsTopic:
    name: str = kf("string")
    partitions: tuple[ListOffsetsPartition, ...] = kf(Array(ListOffsetsPartition))


@dataclass(frozen=True)
class ListOffsetsRequest(Message):
    API_KEY = 2
    MIN_VERSION = 1
    MAX_VERSION = 7
    FLEXIBLE_FROM = 6

    replica_id: int = kf("int32", default=-1)
    isolation_level: int = kf("int8", "2+")
    topics: tuple[ListOffsetsTopic, ...] = kf(Array(ListOffsetsTopic))


@dataclass(frozen=True)
class ListOffsetsPartitionResponse:
    partition_index: int = kf("int32")
    error_code: int = kf("int16")
    timestamp: int = kf("int64", "1+", default=-1)
    offset: int = kf("int64", "1+", default=-1)
    leader_epoch: int = kf("int32", "4+", default=-1)


@dataclass(frozen=True)
class ListOffsetsTopicResponse:
    name: str = kf("string")
    partitions: tuple[ListOffsetsPartitionResponse, ...] = kf(Array(ListOffsetsPartitionResponse))


@dataclass(frozen=True)
class ListOffsetsResponse(Message):
    API_KEY = 2
    MIN_VERSION = 1
    MAX_VERSION = 7
    FLEXIBLE_FROM = 6

    throttle_time_ms: int = kf("int32", "2+")
    topics: tuple[ListOffsetsTopicResponse, ...] = kf(Array(ListOffsetsTopicResponse))
