"""SaslHandshake (key 17), v0–v1, and SaslAuthenticate (key 36), v0–v2 (flexible from v2),
after Kafka's SaslHandshakeRequest/Response.json and SaslAuthenticateRequest/Response.json.

A client sends SaslHandshake v1 naming its mechanism (the broker answers with the ones it
enables), then the mechanism's messages, each wrapped in a SaslAuthenticate request (v1+:
the response carries the session's lifetime, for re-authentication, KIP-368).
"""

from __future__ import annotations

from dataclasses import dataclass

from shmkafka.protocol.schema import Array, Message, kf


@dataclass(frozen=True)
class SaslHandshakeRequest(Message):
    API_KEY = 17
    MIN_VERSION = 0
    MAX_VERSION = 1
    FLEXIBLE_FROM = 99  # never flexible

    mechanism: str = kf("string")


@dataclass(frozen=True)
class SaslHandshakeResponse(Message):
    API_KEY = 17
    MIN_VERSION = 0
    MAX_VERSION = 1
    FLEXIBLE_FROM = 99  # never flexible

    error_code: int = kf("int16")
    mechanisms: tuple[str, ...] = kf(Array("string"))


@dataclass(frozen=True)
class SaslAuthenticateRequest(Message):
    API_KEY = 36
    MIN_VERSION = 0
    MAX_VERSION = 2
    FLEXIBLE_FROM = 2

    auth_bytes: bytes = kf("bytes")


@dataclass(frozen=True)
class SaslAuthenticateResponse(Message):
    API_KEY = 36
    MIN_VERSION = 0
    MAX_VERSION = 2
    FLEXIBLE_FROM = 2

    error_code: int = kf("int16")
    error_message: str | None = kf("string", nullable="0+", default=None)
    auth_bytes: bytes = kf("bytes", default=b"")
    session_lifetime_ms: int = kf("int64", "1+", default=0)
