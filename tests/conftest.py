from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer.client import Client
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import DIRECTORY_LOCK
from tests import ledger


def _prefix() -> str:
    """Pools of this test process: its pid keeps apart concurrent runs (other checkouts)."""
    return f"t{os.getpid()}x"


@pytest.fixture(scope="session", autouse=True)
def no_segment_left_behind() -> Iterator[None]:
    """Every pool a test makes is removed (by the test, or by the Sender it started when that
    goes idle): nothing of ours may stay in /dev/shm."""
    yield
    prefix = "shmkafka." + _prefix()
    left = [n for n in os.listdir("/dev/shm") if n.startswith((prefix, "sem." + prefix))]
    assert left == [], f"left in /dev/shm: {left}"


@pytest.fixture
def pool_name() -> str:
    return _prefix() + uuid.uuid4().hex[:12]


SMALL = PoolConfig(
    batch_size=1024,
    buffer_memory=64 * 1024,
    max_request_size=64 * 1024,
    max_topics=8,
    max_partitions=128,
    max_processes=16,
    lock_stripes=8,
)


@pytest.fixture
def pool(pool_name: str) -> Iterator[SharedPool]:
    p = SharedPool.open(pool_name, SMALL)
    try:
        yield p
    finally:
        p.destroy()


def publish(pool: SharedPool, topics: dict[str, int]) -> None:
    with pool.locks.held(DIRECTORY_LOCK):
        pool.directory.publish({t: [PartitionLeader(1, 0)] * n for t, n in topics.items()})


@pytest.fixture
def pool_removed(pool_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Senders started by the test exit 300 ms after their last producer and remove their
    pool; the test waits for that, so nothing is left in /dev/shm."""
    monkeypatch.setenv("SHMKAFKA_SENDER_IDLE_EXIT_MS", "300")
    yield
    wait_removed(pool_name)


def wait_removed(pool_name: str) -> None:
    """Wait (15 s at most) until the pool's idle Sender has removed it."""
    deadline = time.monotonic() + 15
    while os.path.exists(f"/dev/shm/shmkafka.{pool_name}"):
        assert time.monotonic() < deadline, f"pool {pool_name} was not removed"
        time.sleep(0.05)


def discard(handle: Client) -> None:
    """Close a test's producer handle without flushing (no Sender will complete its
    records) and remove its pool."""
    handle._closed = True
    pool = handle.pool
    handle._detach(None)  # (the completion thread, if started, ends; the slot is freed)
    pool.destroy()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Long tests (``@pytest.mark.early``) go first: under xdist the rest run beside them,
    instead of one worker finishing alone at the end. (The same order in every worker.)"""
    items.sort(key=lambda item: item.get_closest_marker("early") is None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, Any, None]:
    """A passed test of catalogue cases (``test_case_NN...`` or ``@pytest.mark.catalogue``)
    goes into the ledger."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.passed:
        return
    cases = [int(n) for n in re.findall(r"(?:case|and)_(\d\d)", item.name.split("[")[0])]
    for mark in item.iter_markers("catalogue"):
        cases.extend(mark.args)
    if cases:
        ledger.note(item.nodeid, cases=tuple(cases))
