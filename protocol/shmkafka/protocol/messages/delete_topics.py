"""DeleteTopics (key 20), v1–v6. Flexible from v4; v6 names topics by name or topic id.

v0 (removed in Kafka 4.0) is left out: v1–v3 have the same body, v1 is the baseline. A
request may fill both ``topic_names`` (v1–v5) and ``topics`` (v6): only the fields of the
version sent are on the wire.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from shmkafka.protocol.primitives import ZERO_UUID
from shmkafka.protocol.schema import Array, Message, kf


@dataclass(frozen=True)
class DeleteTopicState:
    name: str | None = kf("string", "6+", nullable="6+", default=None)
    topic_id: uuid.UUID = kf("uuid", "6+", default=ZERO_UUID)


@dataclass(frozen=True)
class DeleteTopicsRequest(Message):
    API_KEY = 20
    MIN_VERSION = 1
    MAX_VERSION = 6
    FLEXIBLE_FROM = 4

    topics: tuple[DeleteTopicState, ...] = kf(Array(DeleteTopicState), "6+")
    topic_names: tuple[str, ...] = kf(Array("string"), "0-5")
    timeout_ms: int = kf("int32", default=60000)


@dataclass(frozen=True)
class DeletableTopicResult:
    name: str | None = kf("string", nullable="6+")
    topic_id: uuid.UUID = kf("uuid", "6+", default=ZERO_UUID)
    error_code: int = kf("int16")
    error_message: str | None = kf("string", "5+", nullable="5+", default=None)


@dataclass(frozen=True)
class DeleteTopicsResponse(Message):
    API_KEY = 20
    MIN_VERSION = 1
    MAX_VERSION = 6
    FLEXIBLE_FROM = 4

    throttle_time_ms: int = kf("int32", "1+")
    responses: tuple[DeletableTopicResult, ...] = kf(Array(DeletableTopicResult))
