"""Client.send: the one-call C route (FastAppend.send_kv) and the Python route put a
record in the same place with the same facts, and futures resolve per batch — including a
completion that arrives before the future was registered, a split batch completed in parts,
and a completion posted twice. No Sender: completions are posted by the test."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from shmkafka.producer.client import Client
from shmkafka.protocol.errors import KafkaError
from shmkafka.protocol.hashing import murmur2_partition
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import ALL_DELTAS, DIRECTORY_LOCK
from shmkafka.shm.rings import Completion
from tests.conftest import discard

CONFIG = PoolConfig(batch_size=4096, buffer_memory=1 << 20, max_partitions=64, max_processes=4)


def _publish(handle: Client, topics: dict[str, int]) -> None:
    with handle.pool.locks.held(DIRECTORY_LOCK):
        handle.pool.directory.publish({t: [PartitionLeader(1, 0)] * n for t, n in topics.items()})


@contextmanager
def _handle(pool_name: str, *, fast_path: bool) -> Iterator[Client]:
    h = Client(pool_name, {}, pool_config=CONFIG, start_sender=False, fast_path=fast_path)
    _publish(h, {"t": 7})
    try:
        yield h
    finally:
        pool = h.pool
        h._closed = True  # no flush: nothing will complete the records
        h._detach(None)
        pool.destroy()


@pytest.fixture(params=["c", "python"])
def handle(request: pytest.FixtureRequest, pool_name: str) -> Iterator[Client]:
    with _handle(pool_name, fast_path=request.param == "c") as h:
        yield h


def _batch_of(handle: Client, partition: int) -> tuple[int, int, int]:
    """(batch id, generation, record count) of the open batch of partition ``partition``."""
    entries = handle.pool.directory.partitions("t")
    assert entries is not None
    (batch_id,) = handle.pool.deques.batch_ids(entries[partition].deque_id)
    info = handle.pool.batches.read(batch_id)
    return batch_id, info.generation, info.record_count


def _post(handle: Client, completion: Completion) -> None:
    assert handle.pool.rings.post(handle.pool.slot, completion)
    handle.pool.rings.semaphore(handle.pool.slot).release()


def _wait_done(futures: list, timeout: float = 5.0) -> None:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while not all(f.is_done for f in futures):
        assert time.monotonic() < deadline, "futures not resolved"
        time.sleep(0.002)


def test_the_c_route_is_taken_when_built(handle: Client) -> None:
    handle.send("t", b"v", b"k")
    assert (handle.accumulator.fast_path is not None) == (handle._fast is not None)


def test_keyed_records_land_on_the_java_murmur2_partition(handle: Client) -> None:
    keys = [os.urandom(n) for n in range(21) for _ in range(20)]
    for key in keys:
        future = handle.send("t", b"value", key)
        assert future.partition == murmur2_partition(key, 7)
        assert (future.key_size, future.value_size) == (len(key), 5)
    counts = [_batch_of(handle, p)[2] for p in range(7)]
    expected = [sum(1 for k in keys if murmur2_partition(k, 7) == p) for p in range(7)]
    assert counts == expected


def test_timestamps_default_to_the_wall_clock_and_explicit_ones_are_kept(
    handle: Client,
) -> None:
    before = int(time.time() * 1000)
    implicit = handle.send("t", b"v", b"k")
    after = int(time.time() * 1000)
    explicit = handle.send("t", b"v", b"k", timestamp_ms=1234)
    assert before <= implicit.timestamp <= after
    assert explicit.timestamp == 1234


def test_keyless_records_stick_to_one_partition_until_a_new_batch(handle: Client) -> None:
    futures = [handle.send("t", b"x" * 100) for _ in range(30)]  # fits in one 4 KiB batch
    assert len({f.partition for f in futures}) == 1
    assert [f.offset_delta for f in futures] == list(range(30))


def test_explicit_partitions_and_bad_ones(handle: Client) -> None:
    assert handle.send("t", b"v", b"k", partition=6).partition == 6
    assert handle.send("t", b"v", None, partition=0).partition == 0
    for bad in (7, -1):
        with pytest.raises(KafkaError, match="does not exist"):
            handle.send("t", b"v", b"k", partition=bad)


def test_a_moved_directory_sends_through_the_new_one(handle: Client) -> None:
    handle.send("t", b"v", b"key")
    _publish(handle, {"t": 13})  # partitions added: the cached route is stale
    future = handle.send("t", b"v", b"key")
    assert future.partition == murmur2_partition(b"key", 13)


def test_a_batch_completion_resolves_every_future_of_the_batch(handle: Client) -> None:
    futures = [handle.send("t", b"v%d" % i, b"k", partition=2) for i in range(5)]
    batch_id, generation, _ = _batch_of(handle, 2)
    assert not any(f.is_done for f in futures)
    _post(handle, Completion(batch_id, generation, 100, -1, 0, 0))
    _wait_done(futures)
    assert [f.get(1).offset for f in futures] == [100, 101, 102, 103, 104]
    assert all(f.succeeded() and not f.failed() for f in futures)
    assert handle.outstanding == 0
    late = handle.send("t", b"v", b"k", partition=2)  # a new record in the same open batch
    assert late.offset_delta == 5 and late.is_done  # the completion covers it already
    assert late.get(1).offset == 105
    assert handle.outstanding == 0


def test_split_completions_resolve_their_own_parts_once(handle: Client) -> None:
    futures = [handle.send("t", b"v", b"k", partition=1) for _ in range(6)]
    batch_id, generation, _ = _batch_of(handle, 1)
    _post(handle, Completion(batch_id, generation, 50, -1, 0, 0, 0, 2))
    _wait_done(futures[:3])
    assert not any(f.is_done for f in futures[3:])
    assert handle.outstanding == 3
    _post(handle, Completion(batch_id, generation, 50, -1, 0, 0, 0, 2))  # posted again
    _post(handle, Completion(batch_id, generation, -1, -1, 0, 10, 3, ALL_DELTAS))
    _wait_done(futures)
    assert [f.get(1).offset for f in futures[:3]] == [50, 51, 52]
    assert all(f.failed() for f in futures[3:])
    with pytest.raises(KafkaError):
        futures[4].get(1)
    assert handle.outstanding == 0


def test_callbacks_run_once_with_the_future(handle: Client) -> None:
    calls: list[int] = []
    future = handle.send("t", b"v", b"k", partition=3)
    future.add_done_callback(lambda f: calls.append(f.get(0).offset))
    future.add_done_callback(lambda f: 1 / 0)  # logged, never breaks delivery
    batch_id, generation, _ = _batch_of(handle, 3)
    _post(handle, Completion(batch_id, generation, 7, -1, 0, 0))
    _wait_done([future])
    deadline = time.monotonic() + 5
    while not calls and time.monotonic() < deadline:
        time.sleep(0.002)
    assert calls == [7]
    future.add_done_callback(lambda f: calls.append(-1))  # already done: runs at once
    assert calls == [7, -1]


def test_batches_opened_in_c_equal_those_opened_in_python(pool_name: str) -> None:
    """The same sends through both routes give the same descriptors (but timestamps) and the
    same record bytes; pools stay consistent and every batch decodes."""
    from shmkafka.sender.integrity import verify_batches

    small = PoolConfig(batch_size=512, buffer_memory=256 * 1024, max_partitions=16)
    seen = {}
    for route in ("c", "python"):
        h = Client(
            f"{pool_name}{route[0]}", {}, pool_config=small, start_sender=False,
            fast_path=route == "c",
        )  # fmt: skip
        try:
            _publish(h, {"t": 3})
            facts = [
                h.send("t", b"v" * (i % 50), b"key-%d" % i, timestamp_ms=None) for i in range(600)
            ]
            assert h.pool.check_invariants() == []
            assert verify_batches(h.pool) == []
            batches = []
            for entry in h.pool.directory.partitions("t") or ():
                for batch_id in h.pool.deques.batch_ids(entry.deque_id):
                    info = h.pool.batches.read(batch_id)
                    data = bytes(h.pool.batches.data(info))
                    batches.append((entry.deque_id, info.record_count, info.write_pos, len(data)))
            seen[route] = ([(f.partition, f.offset_delta) for f in facts], batches)
            if route == "c" and h._fast is not None:
                assert any(f.flags & 2 for f in facts), "no batch was opened in C"
        finally:
            discard(h)
    assert seen["c"] == seen["python"]


def test_a_new_batch_wakes_the_sender_only_if_it_would_look_too_late(pool_name: str) -> None:
    """Flag 4 (wake) on a batch opened in C: not while the Sender is looking (wake_at 0) or
    will look within linger.ms by itself; yes when it sleeps past that. Each opened batch
    bumps new_batches, which the Sender checks before it sleeps. (The Python route wakes
    on every new batch.)"""
    with _handle(pool_name, fast_path=True) as handle:
        assert handle._fast is not None, "the C append path is not built"
        _check_wakes(handle)


def _check_wakes(handle: Client) -> None:
    pool = handle.pool
    handle.send("t", b"v", b"k", partition=0)  # the first send of a topic takes the Python route
    pool.set_sender_linger(5)
    opened = []
    for partition, wake_in_ms in ((1, 0), (2, 3), (3, 60_000)):
        pool.set_sender_wake_at(0 if wake_in_ms == 0 else int(time.monotonic() * 1000) + wake_in_ms)
        before = pool.new_batches()
        flags = handle.send("t", b"v", b"k", partition=partition).flags
        assert flags & 2, "the batch was opened in C"
        assert pool.new_batches() == before + 1
        opened.append(bool(flags & 4))
    assert opened == [False, False, True]


def test_keyless_records_of_all_producers_share_the_sticky_partition(pool_name: str) -> None:
    """Two producers of one pool put keyless records on the same partition, and both move on
    when its batch fills (the choice lives in the pool)."""
    with _handle(pool_name, fast_path=True) as first:
        second = Client(pool_name, {}, pool_config=CONFIG, start_sender=False)
        try:
            a = first.send("t", b"x" * 100).partition
            b = second.send("t", b"x" * 100).partition
            assert a == b
            moved = None
            for _ in range(200):  # fill the 4 KiB batch until the sticky partition moves
                moved = first.send("t", b"x" * 100).partition
                if moved != a:
                    break
            followers = {second.send("t", b"y").partition for _ in range(3)}
            sticky = first.pool.deques.sticky(first._routes["t"][1][0])
            assert followers == {sticky}
            assert first.send("t", b"z").partition == sticky
        finally:
            second._closed = True
            second._detach(None)


class _TrackerCompletedRightAfter:
    """The client's tracker, whose ``track`` posts the record's batch completion as soon as
    the record is registered and gives the completion thread time to handle it."""

    def __init__(self, handle: Client) -> None:
        self.real = handle._tracker
        self.handle = handle

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def track(self, topic: str, facts: tuple[int, ...], report: object, want: bool) -> object:
        future = self.real.track(topic, facts, report, want)
        _post(self.handle, Completion(facts[0] >> 32, facts[0] & 0xFFFFFFFF, 100, -1, 0, 0))
        deadline = time.monotonic() + 0.3  # (it is taken now, unless the lock is held)
        while not future.is_done and time.monotonic() < deadline:
            time.sleep(0.002)
        return future


def test_a_completion_right_after_the_registration_reports_the_record_once(
    pool_name: str,
) -> None:
    """The completion thread resolving a record between its registration and the sending
    thread's look at it: one report, not two (the sending thread queued it too when it found
    it done: the perf tool saw one record of a million reported twice, at P=16)."""
    with _handle(pool_name, fast_path=False) as handle:
        reports: list[object] = []
        handle.on_done = reports.extend
        handle._tracker = _TrackerCompletedRightAfter(handle)  # type: ignore[assignment]
        handle.send("t", b"v", None, (), 0, None, ("report",), False)
        deadline = time.monotonic() + 5
        while not reports:
            assert time.monotonic() < deadline, "the record was never reported"
            time.sleep(0.002)
        time.sleep(0.1)  # (a second report would come now)
        assert len(reports) == 1
