from __future__ import annotations

import multiprocessing as mp
import queue
import time
from typing import Any

import pytest

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.errors import InvalidMetadataError
from shmkafka.protocol.records import BatchMeta, decode_batch
from shmkafka.sender.integrity import verify_batches
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.errors import RecordTooLargeError, ShmError
from shmkafka.shm.layout import FREE, OPEN, SEALED
from tests.appending import append
from tests.conftest import publish
from tests.pool import workers


@pytest.fixture(params=[True, False], ids=["c-fast-path", "pure-python"])
def fast_path(request: pytest.FixtureRequest) -> bool:
    value: bool = request.param
    return value


def test_the_c_fast_path_is_built(pool: SharedPool) -> None:
    acc = RecordAccumulator(pool)
    assert acc.fast_path is not None
    assert RecordAccumulator(pool, fast_path=False).fast_path is None


def test_append_drain_finalize_decode(pool: SharedPool, fast_path: bool) -> None:
    publish(pool, {"t": 2})
    acc = RecordAccumulator(pool, max_block_ms=100, fast_path=fast_path)
    first = append(acc, "t", 1, 1000, b"k", b"v1", [("h", b"x")], now_ms=5)
    assert first.new_batch_created and first.offset_delta == 0
    second = append(acc, "t", 1, 1003, None, None, now_ms=6)
    assert not second.new_batch_created and second.offset_delta == 1
    assert second.batch_id == first.batch_id
    (state,) = acc.partition_states()
    assert (state.topic, state.partition, state.queued, state.created_ms) == ("t", 1, 1, 5)
    assert state.last_append_ms == 6 and not state.first_full
    (batch,) = acc.drain([state.deque_id], 1 << 20)
    assert pool.batches.state(batch.batch_id) == SEALED
    assert batch.info.appenders == {pool.slot}
    out = decode_batch(
        b"".join(
            acc.finalize(
                batch, BatchMeta(base_offset=40, producer_id=3, producer_epoch=1, base_sequence=7)
            )
        )
    )
    assert out.header.base_sequence == 7 and out.header.producer_id == 3
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in out.records] == [
        (40, 1000, b"k", b"v1", (("h", b"x"),)),
        (41, 1003, None, None, ()),
    ]
    acc.complete(batch)
    assert pool.batches.state(batch.batch_id) == FREE
    assert pool.buffers.free_slabs() == pool.config.num_slabs
    assert pool.check_invariants() == []


def _append_in_forked_child(acc: RecordAccumulator, out: Any) -> None:
    try:
        append(acc, "t", 0, 1, None, b"x", now_ms=0)
        out.put("appended")
    except ShmError as exc:
        out.put(str(exc))


def test_a_handle_inherited_over_fork_refuses_to_append(pool: SharedPool) -> None:
    publish(pool, {"t": 1})
    acc = RecordAccumulator(pool)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_append_in_forked_child, args=(acc, out))
    child.start()
    message = out.get(timeout=10)
    child.join(10)
    assert "after fork, open the pool again in the child" in message
    assert pool.deques.length(pool.directory.partitions("t")[0].deque_id) == 0  # type: ignore[index]
    append(acc, "t", 0, 1, None, b"x", now_ms=0)  # the parent's handle still works


def test_full_batches_start_new_ones_and_say_so(pool: SharedPool, fast_path: bool) -> None:
    publish(pool, {"t": 1})
    acc = RecordAccumulator(pool, max_block_ms=100, fast_path=fast_path)
    results = [append(acc, "t", 0, 1, b"k", bytes(200), now_ms=0) for _ in range(12)]
    created = [i for i, r in enumerate(results) if r.new_batch_created]
    assert created[0] == 0 and len(created) >= 3  # 1 KiB batches hold 4 records of ~210 B
    # "full" is said once per batch, by the record that fills it (the C append's rule, and
    # Python's since one wake policy): the next record opens a batch
    full = [i for i, r in enumerate(results) if r.batch_is_full]
    assert [i + 1 for i in full if i + 1 < len(results)] == created[1:]
    assert verify_batches(pool) == []
    assert pool.check_invariants() == []


def test_bad_input_is_rejected_before_anything_is_written(
    pool: SharedPool, fast_path: bool
) -> None:
    publish(pool, {"t": 2})
    acc = RecordAccumulator(pool, max_block_ms=100, fast_path=fast_path)
    before = bytes(pool.segment.buf)
    with pytest.raises(InvalidMetadataError, match="topic 'nope'"):
        append(acc, "nope", 0, 1, None, b"x", now_ms=0)
    with pytest.raises(InvalidMetadataError, match="partition 2 of 't'"):
        append(acc, "t", 2, 1, None, b"x", now_ms=0)
    with pytest.raises(RecordTooLargeError, match="exceeds max_request_size"):
        append(acc, "t", 0, 1, None, bytes(64 * 1024), now_ms=0)
    assert bytes(pool.segment.buf) == before


def test_record_larger_than_batch_size_gets_its_own_run(pool: SharedPool, fast_path: bool) -> None:
    publish(pool, {"t": 1})
    acc = RecordAccumulator(pool, max_block_ms=100, fast_path=fast_path)
    result = append(acc, "t", 0, 1, b"k", bytes(3000), now_ms=0)
    info = pool.batches.read(result.batch_id)
    # a run of exactly the slabs the record takes (3,071 bytes with the batch header), in C
    # and in Python alike (twins: docs/internals.md)
    assert info.slab_count == 3 == -(-info.write_pos // 1024) and info.record_count == 1
    (batch,) = acc.drain([info.deque_id], 1 << 20)
    assert decode_batch(b"".join(acc.finalize(batch))).records[0].value == bytes(3000)
    acc.complete(batch)
    assert pool.buffers.free_slabs() == pool.config.num_slabs


def test_drain_respects_max_bytes_but_always_takes_one(pool: SharedPool, fast_path: bool) -> None:
    publish(pool, {"t": 3})
    acc = RecordAccumulator(pool, max_block_ms=100, fast_path=fast_path)
    for p in range(3):
        append(acc, "t", p, 1, b"k", bytes(500), now_ms=0)
    ids = [s.deque_id for s in acc.partition_states()]
    assert len(acc.drain(ids, 10)) == 1
    assert len(acc.drain(ids, 1200)) == 2  # each batch is about 575 bytes


def test_reenqueue_keeps_sequence_order_and_stops_appends(
    pool: SharedPool, fast_path: bool
) -> None:
    publish(pool, {"t": 1})
    acc = RecordAccumulator(pool, max_block_ms=100, fast_path=fast_path)
    drained = []
    for seq in range(3):
        append(acc, "t", 0, 1, b"k", bytes(900), now_ms=0)
        (batch,) = acc.drain([s.deque_id for s in acc.partition_states()], 1 << 20)
        acc.finalize(batch, BatchMeta(producer_id=1, producer_epoch=0, base_sequence=seq))
        drained.append(pool.batches.read(batch.batch_id))
    deque_id = drained[0].deque_id
    from shmkafka.pool.accumulator import DrainedBatch

    for info in (drained[2], drained[0], drained[1]):  # responses come back in any order
        acc.reenqueue(DrainedBatch("t", 0, info))
    assert pool.deques.batch_ids(deque_id) == [d.batch_id for d in drained]
    assert all(pool.batches.state(d.batch_id) == SEALED for d in drained)
    result = append(acc, "t", 0, 1, b"k", b"new", now_ms=0)
    assert result.new_batch_created  # a re-enqueued batch takes no more records
    assert pool.batches.state(result.batch_id) == OPEN


def wait_for_result(results: Any, procs: list[Any], timeout: float) -> Any:
    """The drainer's result; fails at once if any process died with an error."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=0.5)
        except queue.Empty:
            failed = [p for p in procs if p.exitcode not in (None, 0)]
            if failed:
                for p in procs:
                    p.kill()
                pytest.fail(f"processes failed: {[(p.name, p.exitcode) for p in failed]}")
    pytest.fail(f"no result within {timeout} s")


@pytest.mark.parametrize(
    ("method", "partitions", "fast"),
    [
        ("fork", 1, True),
        ("fork", 4, True),
        ("fork", 64, True),
        ("spawn", 1, True),
        ("spawn", 4, True),
        ("spawn", 64, True),
        ("fork", 4, False),  # the pure-Python path, under the same load
    ],
)
def test_eight_processes_every_record_exactly_once_in_order(
    pool_name: str, method: str, partitions: int, fast: bool
) -> None:
    procs, count = 8, 50_000
    config = PoolConfig(
        batch_size=16384,
        buffer_memory=4 * 1024 * 1024,
        max_partitions=128,
        max_processes=16,
        lock_stripes=16,
    )
    pool = SharedPool.open(pool_name, config)
    try:
        publish(pool, {workers.TOPIC: partitions})
        ctx = mp.get_context(method)
        start = ctx.Event()
        results = ctx.Queue()
        drain = ctx.Process(
            target=workers.drainer, args=(pool_name, procs, count, partitions, results)
        )
        apps = [
            ctx.Process(
                target=workers.appender, args=(pool_name, i, count, partitions, start, fast)
            )
            for i in range(procs)
        ]
        for p in [drain, *apps]:
            p.start()
        start.set()
        outcome = wait_for_result(results, [drain, *apps], timeout=400)
        for p in [drain, *apps]:
            p.join(60)
            assert p.exitcode == 0
        assert outcome["errors"] == []
        assert outcome["total"] == procs * count
        assert outcome["batches"] > 0
        assert pool.buffers.free_slabs() == config.num_slabs
        assert pool.check_invariants() == []
    finally:
        pool.destroy()
