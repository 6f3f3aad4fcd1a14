"""CreateTopics (key 19), v2–v5. Flexible from v5."""

from __future__ import annotations

from dataclasses import dataclass

from shmkafka.protocol.schema import Array, Message, kf


@dataclass(frozen=True)
class CreatableReplicaAssignment:
    partition_index: int = kf("int32")
    broker_ids: tuple[int, ...] = kf(Array("int32"))


@dataclass(frozen=True)
class CreatableTopicConfig:
    name: str = kf("string")
    value: str | None = kf("string", nullable="0+", default=None)


@dataclass(frozen=True)
class CreatableTopic:
    name: str = kf("string")
    num_partitions: int = kf("int32", default=-1)
    replication_factor: int = kf("int16", default=-1)
    assignments: tuple[CreatableReplicaAssignment, ...] = kf(Array(CreatableReplicaAssignment))
    configs: tuple[CreatableTopicConfig, ...] = kf(Array(CreatableTopicConfig))


@dataclass(frozen=True)
class CreateTopicsRequest(Message):
    API_KEY = 19
    MIN_VERSION = 2
    MAX_VERSION = 5
    FLEXIBLE_FROM = 5

    topics: tuple[CreatableTopic, ...] = kf(Array(CreatableTopic))
    timeout_ms: int = kf("int32", default=60000)
    validate_only: bool = kf("bool", "1+")


@dataclass(frozen=True)
class CreatableTopicConfigs:
    name: str = kf("string", "5+")
    value: str | None = kf("string", "5+", nullable="5+", default=None)
    read_only: bool = kf("bool", "5+")
    config_source: int = kf("int8", "5+", default=-1)
    is_sensitive: bool = kf("bool", "5+")


@dataclass(frozen=True)
class CreatableTopicResult:
    name: str = kf("string")
    error_code: int = kf("int16")
    error_message: str | None = kf("string", "1+", nullable="0+", default=None)
    topic_config_error_code: int = kf("int16", "5+", tag=0, tagged="5+")
    num_partitions: int = kf("int32", "5+", default=-1)
    replication_factor: int = kf("int16", "5+", default=-1)
    configs: tuple[CreatableTopicConfigs, ...] | None = kf(
        Array(CreatableTopicConfigs), "5+", nullable="5+"
    )


@dataclass(frozen=True)
class CreateTopicsResponse(Message):
    API_KEY = 19
    MIN_VERSION = 2
    MAX_VERSION = 5
    FLEXIBLE_FROM = 5

    throttle_time_ms: int = kf("int32", "2+")
    topics: tuple[CreatableTopicResult, ...] = kf(Array(CreatableTopicResult))
