from __future__ import annotations

import multiprocessing as mp

import pytest

from shmkafka.shm.directory import PartitionLeader
from shmkafka.shm.errors import CapacityError, ShmConfigError
from shmkafka.shm.layout import DIRECTORY_LOCK
from shmkafka.shm.pool import SharedPool
from tests.conftest import publish


def test_publish_and_read_in_another_process_handle(pool: SharedPool) -> None:
    with pool.locks.held(DIRECTORY_LOCK):
        pool.directory.publish({"orders": [PartitionLeader(1, 5), PartitionLeader(2, 7)]})
    reader = SharedPool.open(pool.name)
    try:
        entries = reader.directory.partitions("orders")
        assert entries is not None
        assert [(e.leader, e.leader_epoch) for e in entries] == [(1, 5), (2, 7)]
        assert len({e.deque_id for e in entries}) == 2
        assert reader.directory.partitions("missing") is None
    finally:
        reader.detach()


def test_deque_ids_survive_new_versions(pool: SharedPool) -> None:
    publish(pool, {"a": 2})
    before = pool.directory.partitions("a")
    publish(pool, {"a": 4, "b": 1})  # a grew, b arrived
    after = pool.directory.partitions("a")
    assert before is not None and after is not None
    assert [e.deque_id for e in after[:2]] == [e.deque_id for e in before]
    b = pool.directory.partitions("b")
    assert b is not None
    ids = {e.deque_id for e in after} | {b[0].deque_id}
    assert len(ids) == 5
    assert pool.directory.version() == 2


def test_capacity_limits_are_clear_errors(pool: SharedPool) -> None:
    with pytest.raises(CapacityError, match="max_topics=8"):
        publish(pool, {f"t{i}": 1 for i in range(9)})
    with pytest.raises(CapacityError, match="max_partitions=128"):
        publish(pool, {"big": 129})
    with pytest.raises(ShmConfigError, match="invalid topic name"):
        publish(pool, {"x" * 250: 1})


def test_left_out_topics_and_partitions_are_carried_forward(pool: SharedPool) -> None:
    publish(pool, {"a": 3, "b": 1})
    a = pool.directory.partitions("a")
    publish(pool, {"b": 2})
    assert pool.directory.partitions("a") == a
    b = pool.directory.partitions("b")
    assert b is not None and len(b) == 2
    publish(pool, {"a": 1})
    assert pool.directory.partitions("a") == a  # partitions never shrink


def _flip(name: str, rounds: int) -> None:
    pool = SharedPool.open(name)
    try:
        for i in range(2, rounds + 2):
            leaders = {f"topic{t}": [PartitionLeader(i, i)] * (t + 2) for t in range(3)}
            with pool.locks.held(DIRECTORY_LOCK):
                pool.directory.publish(leaders)
    finally:
        pool.detach()


def test_readers_never_see_a_torn_version(pool: SharedPool) -> None:
    with pool.locks.held(DIRECTORY_LOCK):
        pool.directory.publish({f"topic{t}": [PartitionLeader(1, 1)] * (t + 2) for t in range(3)})
    writer = mp.get_context("fork").Process(target=_flip, args=(pool.name, 3000))
    writer.start()
    seen = set()
    while writer.is_alive() or not seen:
        snapshot = pool.directory.snapshot()
        # Every entry of one version was written with leader == epoch == that round.
        stamps = {(e.leader, e.leader_epoch) for es in snapshot.topics.values() for e in es}
        assert len(stamps) == 1, (snapshot.version, stamps)
        seen.add(snapshot.version)
    writer.join(30)
    assert writer.exitcode == 0
    assert len(seen) > 10  # the reader really overlapped many versions
