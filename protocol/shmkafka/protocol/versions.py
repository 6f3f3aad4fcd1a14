"""API version negotiation: the highest version both the client and the broker support."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from shmkafka.protocol.errors import UnsupportedApiVersionError
from shmkafka.protocol.messages import APIS
from shmkafka.protocol.messages.api_versions import ApiVersion

# api key → (min, max) that this codec implements.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    key: (request.MIN_VERSION, request.MAX_VERSION) for key, (request, _) in APIS.items()
}


def broker_versions(api_keys: Iterable[ApiVersion]) -> dict[int, tuple[int, int]]:
    return {a.api_key: (a.min_version, a.max_version) for a in api_keys}


def negotiate(
    api_key: int,
    broker: Mapping[int, tuple[int, int]],
    client: Mapping[int, tuple[int, int]] = CLIENT_VERSIONS,
) -> int:
    """The version to use for ``api_key``; UnsupportedApiVersionError if the ranges are disjoint."""
    if api_key not in broker:
        raise UnsupportedApiVersionError(f"the broker does not support api key {api_key}")
    if api_key not in client:
        raise UnsupportedApiVersionError(f"shmkafka does not implement api key {api_key}")
    broker_min, broker_max = broker[api_key]
    client_min, client_max = client[api_key]
    version = min(broker_max, client_max)
    if version < max(broker_min, client_min):
        raise UnsupportedApiVersionError(
            f"api key {api_key}: broker supports {broker_min}-{broker_max}, "
            f"shmkafka {client_min}-{client_max}"
        )
    return version


def negotiate_all(
    broker: Mapping[int, tuple[int, int]],
    client: Mapping[int, tuple[int, int]] = CLIENT_VERSIONS,
) -> dict[int, int]:
    """Negotiated versions for every API both sides know; disjoint ranges are left out."""
    out: dict[int, int] = {}
    for api_key in client:
        try:
            out[api_key] = negotiate(api_key, broker, client)
        except UnsupportedApiVersionError:
            continue
    return out
