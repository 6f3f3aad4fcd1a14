"""ApiVersions (key 18), v0–v3. The response header stays v0 even in flexible versions."""

from __future__ import annotations

from dataclasses import dataclass

from shmkafka.protocol.schema import Array, Message, kf


@dataclass(frozen=True)
class ApiVersionsRequest(Message):
    API_KEY = 18
    MIN_VERSION = 0
    MAX_VERSION = 3
    FLEXIBLE_FROM = 3

    client_software_name: str = kf("string", "3+")
    client_software_version: str = kf("string", "3+")


@dataclass(frozen=True)
class ApiVersion:
    api_key: int = kf("int16")
    min_version: int = kf("int16")
    max_version: int = kf("int16")


@dataclass(frozen=True)
class SupportedFeatureKey:
    name: str = kf("string", "3+")
    min_version: int = kf("int16", "3+")
    max_version: int = kf("int16", "3+")


@dataclass(frozen=True)
class FinalizedFeatureKey:
    name: str = kf("string", "3+")
    max_version_level: int = kf("int16", "3+")
    min_version_level: int = kf("int16", "3+")


@dataclass(frozen=True)
class ApiVersionsResponse(Message):
    API_KEY = 18
    MIN_VERSION = 0
    MAX_VERSION = 3
    FLEXIBLE_FROM = 3

    error_code: int = kf("int16")
    api_keys: tuple[ApiVersion, ...] = kf(Array(ApiVersion))
    throttle_time_ms: int = kf("int32", "1+")
    supported_features: tuple[SupportedFeatureKey, ...] = kf(
        Array(SupportedFeatureKey), "3+", tag=0, tagged="3+"
    )
    finalized_features_epoch: int = kf("int64", "3+", tag=1, tagged="3+", default=-1)
    finalized_features: tuple[FinalizedFeatureKey, ...] = kf(
        Array(FinalizedFeatureKey), "3+", tag=2, tagged="3+"
    )
    zk_migration_ready: bool = kf("bool", "3+", tag=3, tagged="3+")
