from __future__ import annotations

import os
import uuid
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


def _prefix() -> str:
    return "i" + os.environ.get("PYTEST_XDIST_WORKER", "gw")[-3:] + "x"


@pytest.fixture(scope="session", autouse=True)
def no_pool_left_behind() -> Iterator[None]:
    """The Senders these tests start remove their pools when they go idle."""
    yield
    prefix = "shmkafka." + _prefix()
    left = [n for n in os.listdir("/dev/shm") if n.startswith((prefix, "sem." + prefix))]
    assert left == [], f"left in /dev/shm: {left[:5]}"


@pytest.fixture
def pool_name() -> str:
    return _prefix() + uuid.uuid4().hex[:12]
