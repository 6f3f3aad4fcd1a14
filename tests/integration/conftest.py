from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.peers import Peer, run_mock_cluster, run_tansu


@pytest.fixture(scope="session")
def tansu() -> Iterator[Peer]:
    with run_tansu() as peer:
        yield peer


@pytest.fixture(scope="session")
def mock_cluster() -> Iterator[Peer]:
    with run_mock_cluster() as peer:
        yield peer


@pytest.fixture(params=["tansu", "mock"])
def peer(request: pytest.FixtureRequest) -> Peer:
    name = "mock_cluster" if request.param == "mock" else "tansu"
    result: Peer = request.getfixturevalue(name)
    return result
