"""Produce (key 0), v3–v9. Flexible from v9. ``records`` holds raw RecordBatch bytes."""

from __future__ import annotations

from dataclasses import dataclass

from shmkafka.protocol.schema import Array, Message, kf


@dataclass(frozen=True)
class PartitionProduceData:
    index: int = kf("int32")
    # (a memoryview of a batch in shared memory is written from there, not copied; a
    # tuple is written as the concatenation of its parts: see finalize_batch)
    records: bytes | memoryview | tuple[bytes | memoryview, ...] | None = kf(
        "records", nullable="0+"
    )


@dataclass(frozen=True)
class TopicProduceData:
    name: str = kf("string")
    partition_data: tuple[PartitionProduceData, ...] = kf(Array(PartitionProduceData))


@dataclass(frozen=True)
class ProduceRequest(Message):
    API_KEY = 0
    MIN_VERSION = 3
    MAX_VERSION = 9
    FLEXIBLE_FROM = 9

    transactional_id: str | None = kf("string", "3+", nullable="3+", default=None)
    acks: int = kf("int16")
    timeout_ms: int = kf("int32")
    topic_data: tuple[TopicProduceData, ...] = kf(Array(TopicProduceData))


@dataclass(frozen=True)
class BatchIndexAndErrorMessage:
    batch_index: int = kf("int32", "8+")
    batch_index_error_message: str | None = kf("string", "8+", nullable="8+", default=None)


@dataclass(frozen=True)
class PartitionProduceResponse:
    index: int = kf("int32")
    error_code: int = kf("int16")
    base_offset: int = kf("int64")
    log_append_time_ms: int = kf("int64", "2+", default=-1)
    log_start_offset: int = kf("int64", "5+", default=-1)
    record_errors: tuple[BatchIndexAndErrorMessage, ...] = kf(
        Array(BatchIndexAndErrorMessage), "8+"
    )
    error_message: str | None = kf("string", "8+", nullable="8+", default=None)


@dataclass(frozen=True)
class TopicProduceResponse:
    name: str = kf("string")
    partition_responses: tuple[PartitionProduceResponse, ...] = kf(Array(PartitionProduceResponse))


@dataclass(frozen=True)
class ProduceResponse(Message):
    API_KEY = 0
    MIN_VERSION = 3
    MAX_VERSION = 9
    FLEXIBLE_FROM = 9

    responses: tuple[TopicProduceResponse, ...] = kf(Array(TopicProduceResponse))
    throttle_time_ms: int = kf("int32", "1+")
