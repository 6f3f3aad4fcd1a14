"""Retiring idle topics (shm/directory.py): deques given back and reused, sequences kept,
appends that resolved a route before a retirement turned away, and a new writer's repair."""

from __future__ import annotations

import dataclasses

import pytest

from shmkafka.pool.accumulator import RecordAccumulator, StaleRouteError
from shmkafka.pool.bufferpool import SlabRun
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import DIRECTORY_LOCK
from tests.appending import append
from tests.conftest import SMALL, publish


def _retire(pool: SharedPool, topic: str, busy: frozenset[int] = frozenset()) -> bool:
    with pool.locks.held(DIRECTORY_LOCK):  # (no appender runs here: no stripe lock needed)
        return pool.directory.retire(topic, busy)


def _drain(pool: SharedPool, deque_id: int) -> None:
    """What the Sender does with a deque's batches once they are acknowledged."""
    for _ in range(pool.deques.length(deque_id)):
        batch_id = pool.deques.pop_first(deque_id)
        slabs = pool.batches.read(batch_id).slab_count
        pool.batches.clear(batch_id)
        pool.buffers.deallocate(SlabRun(batch_id, slabs))


def _deques(pool: SharedPool, topic: str) -> list[int]:
    return [e.deque_id for e in pool.directory.partitions(topic) or ()]


@pytest.mark.parametrize("fast_path", [True, False], ids=["c-fast-path", "python-path"])
def test_churn_of_topics_never_runs_out_of_partitions(pool_name: str, fast_path: bool) -> None:
    """Eight times max_partitions over the pool's life, at most max_partitions at once."""
    pool = SharedPool.open(pool_name, dataclasses.replace(SMALL, max_topics=64))
    try:
        acc = RecordAccumulator(pool, fast_path=fast_path)
        for generation in range(8):
            names = [f"g{generation}-{i}" for i in range(4)]  # 4 x 32 = 128 partitions
            publish(pool, dict.fromkeys(names, 32))
            assert all(pool.directory.partitions(t) is not None for t in names)
            assert pool.deques_used() == 128
            for topic in names:
                append(acc, topic, 31, 1, b"k", b"v", now_ms=0)
                deque_id = _deques(pool, topic)[31]
                assert not pool.deques.is_empty(deque_id)
                assert not _retire(pool, topic)  # a queued batch keeps its topic
                _drain(pool, deque_id)
                assert _retire(pool, topic)
            assert list(pool.directory.snapshot().topics) == []
        assert pool.directory.free_deques() == 128
    finally:
        pool.destroy()


def test_a_retired_topic_is_gone_for_readers_and_keeps_its_sequences(pool: SharedPool) -> None:
    publish(pool, {"a": 3, "b": 1})
    first = _deques(pool, "a")
    for p, deque_id in enumerate(first):
        pool.deques.set_next_sequence(deque_id, 100 + p)
    version = pool.directory.version()
    reader = SharedPool.open(pool.name)
    try:
        assert "a" in reader.directory.snapshot().topics
        assert _retire(pool, "a")
        assert pool.directory.version() == version + 1
        topics = reader.directory.snapshot().topics
        assert "a" not in topics and list(topics) == ["b"] and len(topics) == 1
        assert reader.directory.partitions("a") is None
        assert not _retire(pool, "a")  # (already)
        publish(pool, {"c": 2})  # takes two of a's deques
        assert set(_deques(pool, "c")) < set(first)
        publish(pool, {"a": 3})  # back, in its old range, with its sequences
        again = _deques(pool, "a")
        assert len(set(again) | set(_deques(pool, "c"))) == 5
        assert [pool.deques.next_sequence(d) for d in again] == [100, 101, 102]
        assert reader.directory.partitions("a") is not None
        assert pool.deques_used() == 6  # 3 + 1 + 2: a's third came back
    finally:
        reader.detach()


def test_a_topic_with_a_batch_or_a_busy_deque_is_not_retired(pool: SharedPool) -> None:
    publish(pool, {"a": 2})
    acc = RecordAccumulator(pool, fast_path=False)
    append(acc, "a", 1, 1, None, b"v", now_ms=0)
    assert not _retire(pool, "a")
    publish(pool, {"b": 1})
    assert not _retire(pool, "b", busy=frozenset(_deques(pool, "b")))  # a batch in flight
    assert _retire(pool, "b")


@pytest.mark.parametrize("fast_path", [True, False], ids=["c-fast-path", "python-path"])
def test_an_append_resolved_before_a_retirement_writes_nothing(
    pool: SharedPool, fast_path: bool
) -> None:
    publish(pool, {"a": 1})
    acc = RecordAccumulator(pool, fast_path=fast_path)
    version = pool.directory.version()
    (deque_id,) = _deques(pool, "a")
    acc.append_to(deque_id, 1, None, b"before", now_ms=0, version=version)  # opens a batch
    _drain(pool, deque_id)
    assert _retire(pool, "a")
    publish(pool, {"b": 1})  # a's deque is b's now
    assert _deques(pool, "b") == [deque_id]
    with pytest.raises(StaleRouteError):
        acc.append_to(deque_id, 1, None, b"stale", now_ms=0, version=version)
    with pytest.raises(StaleRouteError):  # the path that opens a batch checks too
        acc.append_to(deque_id, 1, None, b"stale", now_ms=0, version=version, new_batch=True)
    assert pool.deques.is_empty(deque_id)


def test_a_new_writer_revives_a_retired_topic_whose_deque_holds_a_batch(
    pool: SharedPool,
) -> None:
    """A writer killed between the RETIRED shape and the version: an appender at the old
    version pushed a batch after all; the next writer brings the topic back around it."""
    publish(pool, {"a": 2, "b": 1})
    (b_deque,) = _deques(pool, "b")
    a_deques = _deques(pool, "a")
    assert _retire(pool, "a") and _retire(pool, "b")
    acc = RecordAccumulator(pool, fast_path=False)
    acc.append_to(a_deques[1], 1, None, b"late", now_ms=0)  # (unchecked: the old version)
    writer = SharedPool.open(pool.name)
    try:
        with writer.locks.held(DIRECTORY_LOCK):
            assert writer.directory.recover() == ["a"]
        assert _deques(writer, "a") == a_deques
        assert writer.directory.partitions("b") is None  # empty: stays retired
        assert writer.directory.free_deques() == 1
        with writer.locks.held(DIRECTORY_LOCK):
            writer.directory.publish({"c": [PartitionLeader(1, 0)]})
        assert _deques(writer, "c") == [b_deque]
    finally:
        writer.detach()


def test_names_and_ranges_of_retired_topics_are_forgotten_when_room_runs_out(
    pool: SharedPool,
) -> None:
    """max_topics is 8: forty topics in turn, each retired before the next generation. A
    reader that cached the old names reads the entries' new names."""
    reader = SharedPool.open(pool.name)
    try:
        for generation in range(10):
            names = [f"g{generation}-{i}" for i in range(4)]
            publish(pool, dict.fromkeys(names, 8))
            assert set(reader.directory.snapshot().topics) == set(names)
            for topic in names:
                entries = reader.directory.partitions(topic)
                assert entries is not None and len(entries) == 8
                assert pool.directory.owner(entries[3].deque_id) == (topic, 3)
            for topic in names:
                assert _retire(pool, topic)
        assert pool.directory.topic_count() == 8
        assert pool.directory.forgot  # (the Sender takes a new producer id)
        # a forgotten topic comes back as a new one: its partitions start at sequence 0
        publish(pool, {"g0-0": 2})
        assert [pool.deques.next_sequence(d) for d in _deques(pool, "g0-0")] == [0, 0]
        assert reader.directory.partitions("g0-0") is not None
    finally:
        reader.detach()
