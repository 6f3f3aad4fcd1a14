from __future__ import annotations

import os
import time
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


@pytest.fixture
def pool_removed(pool_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Senders started by the test exit 300 ms after their last producer and remove their
    pool; the test waits for that, so nothing is left in /dev/shm."""
    monkeypatch.setenv("SHMKAFKA_SENDER_IDLE_EXIT_MS", "300")
    yield
    deadline = time.monotonic() + 15
    while os.path.exists(f"/dev/shm/shmkafka.{pool_name}"):
        assert time.monotonic() < deadline, f"pool {pool_name} was not removed"
        time.sleep(0.05)
