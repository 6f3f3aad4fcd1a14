"""OffsetFetch (key 9), v0–v7: a group's committed offsets, asked of its coordinator.
Flexible from v6.

v2 lets ``topics`` be null (every partition the group committed) and answers group-level
errors in a top-level ``error_code`` (v0–v1 can only put them on each partition); v3 adds
the throttle time, v5 the committed leader epoch, v7 ``require_stable`` (answer
UNSTABLE_OFFSET_COMMIT rather than an offset a transaction has not finished committing).
v8+ asks for several groups at once, in a different layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from shmkafka.protocol.schema import Array, Message, kf


@dataclass(frozen=True)
class OffsetFetchRequestTopic:
    name: str = kf("string")
    partition_indexes: tuple[int, ...] = kf(Array("int32"))


@dataclass(frozen=True)
class OffsetFetchRequest(Message):
    API_KEY = 9
    MIN_VERSION = 0
    MAX_VERSION = 7
    FLEXIBLE_FROM = 6

    group_id: str = kf("string")
    # None asks for every partition the group committed (v2+); an empty tuple for none.
    topics: tuple[OffsetFetchRequestTopic, ...] | None = kf(
        Array(OffsetFetchRequestTopic), nullable="2+"
    )
    require_stable: bool = kf("bool", "7+")


@dataclass(frozen=True)
class OffsetFetchResponsePartition:
    partition_index: int = kf("int32")
    committed_offset: int = kf("int64", default=-1)
    committed_leader_epoch: int = kf("int32", "5+", default=-1)
    metadata: str | None = kf("string", nullable="0+", default="")
    error_code: int = kf("int16")


@dataclass(frozen=True)
class OffsetFetchResponseTopic:
    name: str = kf("string")
    partitions: tuple[OffsetFetchResponsePartition, ...] = kf(Array(OffsetFetchResponsePartition))


@dataclass(frozen=True)
class OffsetFetchResponse(Message):
    API_KEY = 9
    MIN_VERSION = 0
    MAX_VERSION = 7
    FLEXIBLE_FROM = 6

    throttle_time_ms: int = kf("int32", "3+")
    topics: tuple[OffsetFetchResponseTopic, ...] = kf(Array(OffsetFetchResponseTopic))
    error_code: int = kf("int16", "2+")
