"""The C append and its Python twin, driven side by side: two pools made equal, random
sequences of sends (keyed by murmur2, or to a partition), drains, completions (their results
posted to the appenders' rings, some set full or damaged), allocations that fragment the
memory, run hints and wake settings; the C append (``FastAppend.send_kv``)
on one pool and the Python reference (``RecordAccumulator.append_to`` without C) on the
other. After every step the two segments hold the same bytes, but for what is each pool's
own (its creation time) and a lock's owner record never taken (0) or released (-1): the
C functions and their twins agree (docs/internals.md, "C and Python twins").

The times the C send reads itself (its record's timestamp, the monotonic clock) are replayed
on the Python side from what it wrote."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmkafka.pool import fastpath
from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.bufferpool import SlabRun
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer.futures import FULL, NEW_BATCH, WAKE
from shmkafka.protocol.hashing import murmur2_partition
from shmkafka.protocol.records import record_size_bound
from shmkafka.shm.config import SLAB_SIZE, PoolConfig
from shmkafka.shm.errors import BufferExhaustedError, RecordTooLargeError
from shmkafka.shm.layout import (
    H_ALLOC_CURSOR,
    H_SENDER_LINGER,
    H_SENDER_WAKE_AT,
    H_SLOTS_HIGH,
    LOCK,
    S_RING_HEAD,
    S_RING_TAIL,
    U64,
)
from shmkafka.shm.rings import Completion, SenderView

PARTITIONS = 3
CONFIGS = {
    # batches that grow from one 16 KiB slab to four; 16 slabs in all
    "growing": PoolConfig(batch_size=4 * SLAB_SIZE, buffer_memory=16 * SLAB_SIZE,
                          max_request_size=4 * SLAB_SIZE, max_topics=4, max_partitions=8,
                          max_processes=4, lock_stripes=2),
    # and full by count too
    "by-count": PoolConfig(batch_size=4 * SLAB_SIZE, buffer_memory=16 * SLAB_SIZE,
                           max_request_size=4 * SLAB_SIZE, max_topics=4, max_partitions=8,
                           max_processes=4, lock_stripes=2, batch_max_records=3),
}  # fmt: skip
CREATED_MS = slice(56, 64)  # the header's created_ms: each pool's own


@dataclass
class Twins:
    c: SharedPool
    py: SharedPool
    acc_c: RecordAccumulator
    acc_py: RecordAccumulator
    fast_c: fastpath.FastAppend
    fast_py: fastpath.FastAppend  # (only its new-batch count and wake check: one policy)
    drained: list[tuple[DrainedBatch, DrainedBatch]] = field(default_factory=list)
    held: list[tuple[SlabRun, SlabRun]] = field(default_factory=list)
    clock: int = 1_000

    def route(self, pool: SharedPool) -> tuple[int, tuple[int, ...]]:
        snapshot = pool.directory.snapshot()
        return snapshot.version, tuple(e.deque_id for e in snapshot.topics["t"])


@pytest.fixture(params=sorted(CONFIGS))
def config(request: pytest.FixtureRequest) -> PoolConfig:
    return CONFIGS[request.param]


@pytest.fixture
def make_twins(config: PoolConfig) -> Iterator[object]:
    made: list[SharedPool] = []

    def make() -> Twins:
        for pool in made:
            pool.destroy()
        made.clear()
        c, py = (SharedPool.open(f"twin{uuid.uuid4().hex[:12]}", config) for _ in range(2))
        made.extend((c, py))
        for pool in (c, py):
            with pool.locks.held(1):
                from shmkafka.shm.directory_view import PartitionLeader

                pool.directory.publish({"t": [PartitionLeader(1, 0)] * PARTITIONS})
            pool.set_sender_linger(5)
        fast_c, fast_py = fastpath.fast_path_for(c), fastpath.fast_path_for(py)
        assert fast_c is not None and fast_py is not None, "the C append is not built"
        acc_c = RecordAccumulator(c, max_block_ms=0)
        acc_py = RecordAccumulator(py, max_block_ms=0, fast_path=False)
        return Twins(c, py, acc_c, acc_py, fast_c, fast_py)

    yield make
    for pool in made:
        pool.destroy()


def _normalized(pool: SharedPool) -> bytearray:
    data = bytearray(pool.segment.buf[: pool.layout.size])
    data[CREATED_MS] = bytes(8)
    for i in range(pool.layout.n_locks):
        at = pool.layout.lock_at(i)
        if LOCK.unpack_from(data, at) == (0, 0, 0):  # (never taken: as released)
            LOCK.pack_into(data, at, -1, 0, 0)
    return data


def _same(t: Twins, step: str) -> None:
    a, b = _normalized(t.c), _normalized(t.py)
    if a != b:
        at = next(i for i in range(len(a)) if a[i] != b[i])
        ours, theirs = bytes(a[at : at + 16]).hex(), bytes(b[at : at + 16]).hex()
        pytest.fail(f"after {step}: the pools differ from offset {at} (C {ours} / Python {theirs})")


# ----------------------------------------------------------------------- the steps


def _send(t: Twins, partition: int, size: int, keyed: bool, n: int) -> str:
    key = b"key-%d" % n if keyed else None
    value = bytes([n % 251]) * size
    route_c, route_py = t.route(t.c), t.route(t.py)
    t.clock += 1
    hit = t.fast_c.send_kv(route_c, -1 if keyed else partition, key, value)
    if isinstance(hit, tuple):  # written in C: replay its times on the Python side
        registration, flags, chosen, _, timestamp, _, _ = hit
        info = t.c.batches.read(registration >> 32)
        now_ms, new = info.last_append_ms, bool(flags & NEW_BATCH)
        result = t.acc_py.append_to(route_py[1][chosen], timestamp, key, value, now_ms=now_ms,
                                    version=route_py[0])  # fmt: skip
        full = result.batch_is_full
        wake = full or (result.new_batch_created and t.fast_py.note_new_batch(now_ms))
        assert (bool(flags & FULL), bool(flags & NEW_BATCH), bool(flags & WAKE)) == (
            full, result.new_batch_created, wake,
        ), "flags"  # fmt: skip
        assert new == result.new_batch_created and registration & 0xFFFFFFFF == result.generation
        if keyed:
            assert chosen == murmur2_partition(key, PARTITIONS)  # murmur2's twins
        return f"send {size} B to {chosen} in C"
    assert isinstance(hit, int), hit  # nothing written: C left it (a new batch Python opens)
    chosen = hit
    refused = []
    for pool, acc, route, c_tried in ((t.c, t.acc_c, route_c, True),
                                      (t.py, t.acc_py, route_py, False)):  # fmt: skip
        try:
            result = acc.append_to(
                route[1][chosen], t.clock, key, value, now_ms=t.clock, new_batch=c_tried,
                version=route[0], c_tried=c_tried,
            )  # fmt: skip
        except BufferExhaustedError:  # (no run holds it, in both: checked below)
            refused.append(pool)
            continue
        assert result.new_batch_created
        fast = t.fast_c if pool is t.c else t.fast_py
        if not result.batch_is_full:
            fast.note_new_batch(t.clock)  # (the client's wake check counts it)
    assert refused in ([], [t.c, t.py])
    return f"send {size} B to {chosen}, a new batch by Python" + (" (no room)" if refused else "")


def _drain(t: Twins, partition: int, many: bool, max_bytes: int) -> str:
    """One partition's deque, or every partition's from ``partition`` on, up to ``max_bytes``
    (the first batch goes whatever its size)."""
    chosen = [partition]
    if many:
        chosen = [(partition + i) % PARTITIONS for i in range(PARTITIONS)]
    got = []
    for pool, acc in ((t.c, t.acc_c), (t.py, t.acc_py)):
        deques = t.route(pool)[1]
        got.append(acc.drain([deques[p] for p in chosen], max_bytes))
    assert [b.batch_id for b in got[0]] == [b.batch_id for b in got[1]]
    t.drained.extend(zip(got[0], got[1], strict=True))
    return f"drain {chosen} up to {max_bytes} B: {[b.batch_id for b in got[0]]}"


def _complete(t: Twins, post: bool, appenders: int, high: int) -> str:
    """The oldest drained batch completed; ``post``: its result posted first to the rings
    of its appenders (as the Sender posts: in C on one pool, ``FastAppend.post_result``,
    and by ``CompletionRings.post_to`` on the other). ``appenders`` (bits) join the
    batch's own appender set and the slots' high mark is ``high``: rings no process
    reads, to fill."""
    if not t.drained:
        return "nothing to complete"
    a, b = t.drained.pop(0)
    posted = []
    if post:
        for pool, acc, drained in ((t.c, t.acc_c, a), (t.py, t.acc_py, b)):
            own = int.from_bytes(drained.info.appenders_raw, "little")
            raw = (own | appenders).to_bytes(len(drained.info.appenders_raw), "little")
            batch = replace(drained, info=drained.info._replace(appenders_raw=raw))
            pool.segment.store_u32(H_SLOTS_HIGH, high)
            acc.defer_wakes(True)
            posted.append(acc.post_completion(batch, Completion(a.batch_id, 1, 7, -1, -1, 0)))
            acc.defer_wakes(False)
        assert posted[0] == posted[1], "the twins found different rings full"
    t.acc_c.complete(a)
    t.acc_py.complete(b)
    return f"complete {a.batch_id}" + (f", posted (full: {posted[0]})" if post else "")


def _ring(t: Twins, slot: int, room: int) -> str:
    """Slot ``slot``'s ring given ``room`` free entries (its indexes set: 0 full, a
    negative room past full, more than the capacity a head past the tail)."""
    for pool in (t.c, t.py):
        at = pool.layout.slot_at(slot)
        head = U64.unpack_from(pool.segment.buf, at + S_RING_HEAD)[0] + 32
        pool.segment.store_u64(at + S_RING_HEAD, head)
        pool.segment.store_u64(at + S_RING_TAIL, head + pool.layout.ring_capacity - room)
    return f"ring of slot {slot}: room {room}"


def _poll(t: Twins, slot: int) -> str:
    """The ring read in C (take_results, as ProcessSlot.deliver calls it: a damaged ring
    is given to poll) and in Python (poll): the same results, the same head after."""
    fast = t.acc_c.fast_path
    assert fast is not None
    taken = fast.take_results(slot, Completion, SenderView)
    got = [t.c.rings.poll(slot) if taken is None else taken, t.py.rings.poll(slot)]
    assert got[0] == got[1]
    assert all(type(c) is Completion and type(c.view) in (SenderView, type(None)) for c in got[0])
    return f"poll slot {slot}: {len(got[0])} results" + (" (damaged)" if taken is None else "")


def _hold(t: Twins, slabs: int) -> str:
    runs = []
    for pool in (t.c, t.py):
        try:
            run = pool.buffers.allocate(slabs * pool.config.slab_size, 0)
        except Exception:  # noqa: BLE001 (no room: the same on both, checked below)
            runs.append(None)
            continue
        pool.buffers.commit(run)  # (owned by nobody: memory taken by "another process")
        runs.append(run)
    assert runs[0] == runs[1]
    if runs[0] is not None and runs[1] is not None:
        t.held.append((runs[0], runs[1]))
    return f"hold {slabs} slabs at {runs[0]}"


def _free(t: Twins, index: int) -> str:
    if not t.held:
        return "nothing held"
    a, b = t.held.pop(index % len(t.held))
    t.c.buffers.deallocate(a)
    t.py.buffers.deallocate(b)
    return f"free {a}"


def _settings(t: Twins, partition: int, hint: int, wake_at: int) -> str:
    for pool in (t.c, t.py):
        deque = t.route(pool)[1][partition]
        with pool.locks.held(pool.layout.stripe_lock(deque)):
            pool.deques.set_run_hint(deque, hint)
        pool.segment.store_u64(H_SENDER_WAKE_AT, wake_at)
        pool.segment.store_u64(H_SENDER_LINGER, 5)
    return f"hint {hint} for {partition}, wake_at {wake_at}"


STEPS = st.one_of(
    st.tuples(st.just("send"), st.integers(0, PARTITIONS - 1),
              st.sampled_from([10, 900, 5_000, 15_000, 16_300, 30_000]), st.booleans()),
    st.tuples(st.just("drain"), st.integers(0, PARTITIONS - 1), st.booleans(),
              st.sampled_from([1 << 20, 1, 1_000, 6_000, 20_000])),
    st.tuples(st.just("complete"), st.booleans(), st.integers(0, 15), st.integers(0, 5)),
    st.tuples(st.just("poll"), st.integers(0, 3)),
    st.tuples(st.just("ring"), st.integers(0, 3), st.sampled_from([-1, 0, 1, 20])),
    st.tuples(st.just("hold"), st.integers(1, 3)),
    st.tuples(st.just("free"), st.integers(0, 5)),
    st.tuples(st.just("settings"), st.integers(0, PARTITIONS - 1), st.integers(1, 4),
              st.sampled_from([0, 1, 10**12])),
)  # fmt: skip


def _shape(t: Twins, used: list[bool], cursor: int) -> None:
    """Both pools' memory fragmented alike: ``used`` slabs taken by nobody (as memory
    another process holds), the allocation cursor at ``cursor``."""
    for pool in (t.c, t.py):
        at = pool.layout.freemap_at
        pool.segment.buf[at : at + len(used)] = bytes(used)
        pool.segment.store_u32(H_ALLOC_CURSOR, cursor)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(STEPS, min_size=1, max_size=40),
    used=st.lists(st.booleans(), min_size=16, max_size=16),
    cursor=st.integers(0, 15),
)
def test_the_c_append_and_its_python_twin_leave_the_same_bytes(
    make_twins: object, steps: list[tuple[object, ...]], used: list[bool], cursor: int
) -> None:
    t: Twins = make_twins()  # type: ignore[operator]
    _shape(t, used, cursor)
    _same(t, "the start")
    for n, step in enumerate(steps):
        kind, *args = step
        if kind == "send":
            done = _send(t, args[0], args[1], args[2], n)  # type: ignore[arg-type]
        elif kind == "drain":
            done = _drain(t, *args)  # type: ignore[arg-type]
        elif kind == "complete":
            done = _complete(t, *args)  # type: ignore[arg-type]
        elif kind == "poll":
            done = _poll(t, args[0])  # type: ignore[arg-type]
        elif kind == "ring":
            done = _ring(t, *args)  # type: ignore[arg-type]
        elif kind == "hold":
            done = _hold(t, args[0])  # type: ignore[arg-type]
        elif kind == "free":
            done = _free(t, args[0])  # type: ignore[arg-type]
        else:
            done = _settings(t, *args)  # type: ignore[arg-type]
        _same(t, f"step {n}: {done}")


# ------------------------------------------------------- records larger than a slab


@pytest.mark.parametrize("config", ["growing"], indirect=True)
@pytest.mark.parametrize("size", [16_400, 30_000, 49_000, 60_000])
def test_a_record_larger_than_a_slab_is_appended_in_c_on_a_run_that_holds_it(
    make_twins: object, size: int
) -> None:
    """C opens the batch itself (where it left every such record to Python), on a run of
    as many slabs as the record needs, and leaves what the Python twin leaves."""
    t: Twins = make_twins()  # type: ignore[operator]
    assert _send(t, 0, 10, False, 0).endswith("in C")  # a small batch first, one slab
    assert _send(t, 0, size, False, 1).endswith("in C")
    _same(t, f"a record of {size} B")
    (batch,) = [t.c.batches.read(b) for b in t.c.deques.batch_ids(t.route(t.c)[1][0])][1:]
    needed = -(-batch.write_pos // SLAB_SIZE)
    assert batch.record_count == 1 and batch.slab_count >= needed > 1


@pytest.mark.parametrize("config", ["growing"], indirect=True)
def test_near_the_limit_c_leaves_the_record_to_python_which_refuses_it(
    make_twins: object,
) -> None:
    """A record whose size bound is above the limit (max_request_size here) is not written
    by C: Python refuses it with nothing written; one just below its slack goes Python's
    way and is appended."""
    t: Twins = make_twins()  # type: ignore[operator]
    limit = 4 * SLAB_SIZE
    before = _normalized(t.c)
    too_large = limit - 80  # (over the limit by the record's exact frame too: no path takes it)
    assert record_size_bound(None, b"x" * too_large) > limit
    hit = t.fast_c.send_kv(t.route(t.c), 0, None, b"x" * too_large)
    assert hit == 0, "C left it, nothing written"
    assert _normalized(t.c) == before
    with pytest.raises(RecordTooLargeError):
        t.acc_c.append_to(t.route(t.c)[1][0], 1, None, b"x" * too_large, now_ms=1,
                          version=t.route(t.c)[0], c_tried=True)  # fmt: skip
    assert _normalized(t.c) == before
    fits = limit - record_size_bound(None, b"")  # (bound = limit: C's slack leaves it to Python)
    assert t.fast_c.send_kv(t.route(t.c), 0, None, b"x" * fits) == 0
    result = t.acc_c.append_to(t.route(t.c)[1][0], 1, None, b"x" * fits, now_ms=1,
                               version=t.route(t.c)[0], c_tried=True)  # fmt: skip
    assert result.new_batch_created and t.c.batches.read(result.batch_id).slab_count == 4


def test_under_a_limit_below_one_slab_c_leaves_the_record_to_python() -> None:
    """buffer_memory one slab: a record that fits the slab but whose size bound is above
    the limit is not written by C, and Python refuses it."""
    from shmkafka.shm.directory_view import PartitionLeader

    config = PoolConfig(batch_size=1024, buffer_memory=1024, max_request_size=1 << 20,
                        max_topics=1, max_partitions=1, max_processes=2)  # fmt: skip
    pool = SharedPool.open(f"twin{uuid.uuid4().hex[:12]}", config)
    try:
        with pool.locks.held(1):
            pool.directory.publish({"t": [PartitionLeader(1, 0)]})
        fast = fastpath.fast_path_for(pool)
        assert fast is not None, "the C append is not built"
        snapshot = pool.directory.snapshot()
        deque = snapshot.topics["t"][0].deque_id
        value = b"x" * 940  # (61 + 9 + 940 < 1024 fits the slab; the bound, 1033, does not)
        before = _normalized(pool)
        assert fast.send_kv((snapshot.version, (deque,)), 0, None, value) == 0
        assert _normalized(pool) == before
        with pytest.raises(RecordTooLargeError):
            RecordAccumulator(pool, max_block_ms=0).append_to(
                deque, 1, None, value, now_ms=1, version=snapshot.version, c_tried=True
            )
        assert _normalized(pool) == before
    finally:
        pool.destroy()
