from __future__ import annotations

import pytest

from shmkafka.protocol.errors import UnsupportedApiVersionError
from shmkafka.protocol.messages.api_versions import ApiVersion
from shmkafka.protocol.versions import CLIENT_VERSIONS, broker_versions, negotiate, negotiate_all


def test_client_ranges_come_from_the_message_classes() -> None:
    assert CLIENT_VERSIONS[0] == (3, 9)  # Produce
    assert CLIENT_VERSIONS[3] == (1, 12)  # Metadata
    assert CLIENT_VERSIONS[18] == (0, 3)  # ApiVersions


def test_highest_common_version() -> None:
    broker = broker_versions([ApiVersion(0, 0, 11), ApiVersion(3, 0, 7), ApiVersion(22, 3, 5)])
    assert negotiate(0, broker) == 9  # we stop at 9
    assert negotiate(3, broker) == 7  # the broker stops at 7
    assert negotiate(22, broker) == 4


def test_disjoint_ranges_are_a_typed_error() -> None:
    with pytest.raises(UnsupportedApiVersionError, match="broker supports 0-2, shmkafka 3-9"):
        negotiate(0, {0: (0, 2)})


def test_missing_api_is_a_typed_error() -> None:
    with pytest.raises(UnsupportedApiVersionError, match="does not support api key 19"):
        negotiate(19, {0: (0, 9)})


def test_negotiate_all_leaves_out_what_cannot_be_used() -> None:
    assert negotiate_all({0: (0, 2), 1: (4, 16), 3: (0, 13)}) == {1: 12, 3: 12}
