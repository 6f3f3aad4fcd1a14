"""InitProducerId (key 22), v0–v4. Flexible from v2."""

from __future__ import annotations

from dataclasses import dataclass

from shmkafka.protocol.schema import Message, kf


@dataclass(frozen=True)
class InitProducerIdRequest(Message):
    API_KEY = 22
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_FROM = 2

    transactional_id: str | None = kf("string", nullable="0+", default=None)
    transaction_timeout_ms: int = kf("int32", default=-1)
    producer_id: int = kf("int64", "3+", default=-1)
    producer_epoch: int = kf("int16", "3+", default=-1)


@dataclass(frozen=True)
class InitProducerIdResponse(Message):
    API_KEY = 22
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_FROM = 2

    throttle_time_ms: int = kf("int32")
    error_code: int = kf("int16")
    producer_id: int = kf("int64", default=-1)
    producer_epoch: int = kf("int16", default=-1)
