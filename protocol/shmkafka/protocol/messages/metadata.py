"""Metadata (key 3), v1–v12. Flexible from v9; topic ids from v10."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from shmkafka.protocol.primitives import ZERO_UUID
from shmkafka.protocol.schema import Array, Message, kf

UNSET_AUTHORIZED_OPERATIONS = -(2**31)


@dataclass(frozen=True)
class MetadataRequestTopic:
    topic_id: uuid.UUID = kf("uuid", "10+", default=ZERO_UUID)
    name: str | None = kf("string", nullable="10+")


@dataclass(frozen=True)
class MetadataRequest(Message):
    API_KEY = 3
    MIN_VERSION = 1
    MAX_VERSION = 12
    FLEXIBLE_FROM = 9

    # None asks for every topic (v1+); an empty tuple asks for none.
    topics: tuple[MetadataRequestTopic, ...] | None = kf(
        Array(MetadataRequestTopic), nullable="1+", default=None
    )
    allow_auto_topic_creation: bool = kf("bool", "4+", default=True)
    include_cluster_authorized_operations: bool = kf("bool", "8-10")
    include_topic_authorized_operations: bool = kf("bool", "8+")


@dataclass(frozen=True)
class MetadataResponseBroker:
    node_id: int = kf("int32")
    host: str = kf("string")
    port: int = kf("int32")
    rack: str | None = kf("string", "1+", nullable="1+", default=None)


@dataclass(frozen=True)
class MetadataResponsePartition:
    error_code: int = kf("int16")
    partition_index: int = kf("int32")
    leader_id: int = kf("int32")
    leader_epoch: int = kf("int32", "7+", default=-1)
    replica_nodes: tuple[int, ...] = kf(Array("int32"))
    isr_nodes: tuple[int, ...] = kf(Array("int32"))
    offline_replicas: tuple[int, ...] = kf(Array("int32"), "5+")


@dataclass(frozen=True)
class MetadataResponseTopic:
    error_code: int = kf("int16")
    name: str | None = kf("string", nullable="12+")
    topic_id: uuid.UUID = kf("uuid", "10+", default=ZERO_UUID)
    is_internal: bool = kf("bool", "1+")
    partitions: tuple[MetadataResponsePartition, ...] = kf(Array(MetadataResponsePartition))
    topic_authorized_operations: int = kf("int32", "8+", default=UNSET_AUTHORIZED_OPERATIONS)


@dataclass(frozen=True)
class MetadataResponse(Message):
    API_KEY = 3
    MIN_VERSION = 1
    MAX_VERSION = 12
    FLEXIBLE_FROM = 9

    throttle_time_ms: int = kf("int32", "3+")
    brokers: tuple[MetadataResponseBroker, ...] = kf(Array(MetadataResponseBroker))
    cluster_id: str | None = kf("string", "2+", nullable="2+", default=None)
    controller_id: int = kf("int32", "1+", default=-1)
    topics: tuple[MetadataResponseTopic, ...] = kf(Array(MetadataResponseTopic))
    cluster_authorized_operations: int = kf("int32", "8-10", default=UNSET_AUTHORIZED_OPERATIONS)
