"""FindCoordinator (key 10), v0–v4. Flexible from v3; v4 asks for several keys at once.

A request may fill both ``key`` (v0–v3) and ``coordinator_keys`` (v4): only the fields of
the version sent are on the wire, so the caller fills both and negotiation picks. v5 and v6
change only what a broker may answer (KIP-890's TRANSACTION_ABORTABLE, share groups).
"""

from __future__ import annotations

from dataclasses import dataclass

from shmkafka.protocol.schema import Array, Message, kf

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


@dataclass(frozen=True)
class FindCoordinatorRequest(Message):
    API_KEY = 10
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_FROM = 3

    key: str = kf("string", "0-3", default="")
    key_type: int = kf("int8", "1+", default=KEY_TYPE_GROUP)
    coordinator_keys: tuple[str, ...] = kf(Array("string"), "4+")


@dataclass(frozen=True)
class Coordinator:
    key: str = kf("string", "4+")
    node_id: int = kf("int32", "4+")
    host: str = kf("string", "4+")
    port: int = kf("int32", "4+")
    error_code: int = kf("int16", "4+")
    error_message: str | None = kf("string", "4+", nullable="4+", default=None)


@dataclass(frozen=True)
class FindCoordinatorResponse(Message):
    API_KEY = 10
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_FROM = 3

    throttle_time_ms: int = kf("int32", "1+")
    error_code: int = kf("int16", "0-3")
    error_message: str | None = kf("string", "1-3", nullable="1-3", default=None)
    node_id: int = kf("int32", "0-3", default=-1)
    host: str = kf("string", "0-3", default="")
    port: int = kf("int32", "0-3", default=-1)
    coordinators: tuple[Coordinator, ...] = kf(Array(Coordinator), "4+")

    def coordinator_for(self, key: str) -> Coordinator:
        """The answer for ``key``, whatever the version (v0–v3 answer one key, in place)."""
        for found in self.coordinators:
            if found.key == key:
                return found
        if self.coordinators:
            return Coordinator(key, -1, "", -1, self.coordinators[0].error_code, None)
        return Coordinator(key, self.node_id, self.host, self.port, self.error_code,
                           self.error_message)  # fmt: skip
