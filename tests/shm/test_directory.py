from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import time
from typing import Any

import pytest

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.errors import CapacityError, ShmConfigError
from shmkafka.shm.layout import DIRECTORY_LOCK, REFUSED_PARTITIONS, REFUSED_TOPICS
from tests.conftest import SMALL, publish


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


def test_a_topic_past_a_limit_is_refused_and_the_others_are_published(pool: SharedPool) -> None:
    with pool.locks.held(DIRECTORY_LOCK):
        refused = pool.directory.publish(
            {f"t{i}": [PartitionLeader(1, 0)] for i in range(9)}  # max_topics is 8
        )
    assert list(refused) == ["t8"] and refused["t8"].limit == REFUSED_TOPICS
    assert "max_topics" in refused["t8"].message()
    assert all(pool.directory.partitions(f"t{i}") is not None for i in range(8))
    assert pool.directory.partitions("t8") is None
    # a new topic when the directory is full is refused at the request, at once
    with pool.locks.held(DIRECTORY_LOCK), pytest.raises(CapacityError, match="max_topics"):
        pool.directory.request_topic("t9")


def test_partitions_past_the_limit_refuse_their_topic_only(pool_name: str) -> None:
    config = dataclasses.replace(SMALL, max_partitions=128)
    with SharedPool.open(pool_name, config) as pool:
        with pool.locks.held(DIRECTORY_LOCK):
            refused = pool.directory.publish(
                {"big": [PartitionLeader(1, 0)] * 129, "small": [PartitionLeader(1, 0)] * 4}
            )
            assert [r.limit for r in refused.values()] == [REFUSED_PARTITIONS]
            pool.directory.record_refusal(refused["big"])
        assert pool.directory.partitions("big") is None
        assert len(pool.directory.partitions("small") or ()) == 4
        found = pool.directory.refusal("big")
        assert found is not None and found.needed == 129 and "max_partitions" in found.message()
        assert pool.directory.refusal("small") is None
        pool.destroy()


def test_invalid_topic_names_are_rejected(pool: SharedPool) -> None:
    with pytest.raises(ShmConfigError, match="invalid topic name"):
        publish(pool, {"x" * 250: 1})


def test_ten_thousand_topics_and_100k_partitions_fit_with_defaults(pool_name: str) -> None:
    """The default pool holds 10,000 topics of 10 partitions; memory is reserved as they
    are added (a fresh process parses them incrementally)."""
    with SharedPool.open(pool_name, PoolConfig(buffer_memory=1 << 20)) as pool:
        before = _allocated(pool)
        for first in range(0, 10_000, 1000):
            with pool.locks.held(DIRECTORY_LOCK):
                refused = pool.directory.publish(
                    {f"t{i}": [PartitionLeader(1, 0)] * 10 for i in range(first, first + 1000)}
                )
            assert not refused
        grown = _allocated(pool) - before
        assert pool.deques_used() == 100_000
        assert 0 < grown < 16 << 20  # directory, deques and active set: ~9 MiB, not 200
        reader = SharedPool.open(pool_name)
        try:
            entries = reader.directory.partitions("t9999")
            assert entries is not None and len(entries) == 10
            assert reader.directory.owner(entries[3].deque_id) == ("t9999", 3)
            assert len(reader.directory.snapshot().topics) == 10_000
        finally:
            reader.detach()
        pool.destroy()


def _allocated(pool: SharedPool) -> int:
    return os.fstat(pool.segment.fd).st_blocks * 512


def test_left_out_topics_and_partitions_are_carried_forward(pool: SharedPool) -> None:
    publish(pool, {"a": 3, "b": 1})
    a = pool.directory.partitions("a")
    publish(pool, {"b": 2})
    assert pool.directory.partitions("a") == a
    b = pool.directory.partitions("b")
    assert b is not None and len(b) == 2
    publish(pool, {"a": 1})
    assert pool.directory.partitions("a") == a  # partitions never shrink


def _flip(name: str, stop: Any) -> None:
    pool = SharedPool.open(name)
    try:
        i = 2
        while not stop.is_set() and i < 1_000_000:
            leaders = {f"topic{t}": [PartitionLeader(i, i)] * (t + 2) for t in range(3)}
            with pool.locks.held(DIRECTORY_LOCK):
                pool.directory.publish(leaders)
            i += 1
    finally:
        pool.detach()


def test_readers_never_see_a_torn_entry(pool: SharedPool) -> None:
    with pool.locks.held(DIRECTORY_LOCK):
        pool.directory.publish({f"topic{t}": [PartitionLeader(1, 1)] * (t + 2) for t in range(3)})
    deques = {t: [e.deque_id for e in pool.directory.partitions(t) or ()] for t in ("topic0",)}
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    writer = ctx.Process(target=_flip, args=(pool.name, stop))
    writer.start()
    seen = set()
    deadline = time.monotonic() + 60
    try:
        while len(seen) <= 50 and time.monotonic() < deadline and writer.is_alive():
            snapshot = pool.directory.snapshot()
            # Each leader word is one store: leader == epoch, whatever round it is from; and
            # the deque ids never move.
            for entries in snapshot.topics.values():
                assert all(e.leader == e.leader_epoch for e in entries), entries
            assert [e.deque_id for e in snapshot.topics["topic0"]] == deques["topic0"]
            seen.add(snapshot.version)
    finally:
        stop.set()
        writer.join(30)
    assert writer.exitcode == 0
    assert len(seen) > 50  # the reader really overlapped many versions


def test_a_topic_that_grows_past_a_limit_keeps_its_leaders_current(pool_name: str) -> None:
    config = dataclasses.replace(SMALL, max_partitions=8)
    with SharedPool.open(pool_name, config) as pool:
        with pool.locks.held(DIRECTORY_LOCK):
            assert not pool.directory.publish({"t": [PartitionLeader(1, 0)] * 4})
            refused = pool.directory.publish({"t": [PartitionLeader(2, 1)] * 12})
        assert [r.limit for r in refused.values()] == [REFUSED_PARTITIONS]
        entries = pool.directory.partitions("t") or ()
        assert [(e.leader, e.leader_epoch) for e in entries] == [(2, 1)] * 4  # still moved
        pool.destroy()
