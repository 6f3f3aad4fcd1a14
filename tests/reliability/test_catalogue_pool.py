"""Catalogue cases 6, 32, 33 and 36 (docs/reliability.md):
a topic that never appears, the pool's segment unlinked or left behind by a crashed run,
and many processes racing on the same partitions."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
from typing import Any

import psutil
import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.errors import KafkaTimeoutError
from shmkafka.facades.kafka_python.producer import KafkaProducer
from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.errors import LayoutMismatchError
from shmkafka.shm.segment import segment_name
from tests.appending import append
from tests.conftest import publish
from tests.reliability.conftest import producer, read_back

pytestmark = pytest.mark.usefixtures("pool_removed")


def test_case_06_a_missing_topic_times_out_after_max_block_ms(pool_name: str) -> None:
    with (
        BrokerStub(nodes=1, auto_create_topics=False) as stub,
        producer(stub, pool_name, max_block_ms=500) as p,
    ):
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="not present in metadata"):
            p.send("absent", b"v")
        assert 0.5 <= time.monotonic() - started < 1.5


def test_case_32_an_unlinked_segment_keeps_working_and_is_not_reused(
    stub: BrokerStub, pool_name: str
) -> None:
    """`rm /dev/shm/<pool>` while producers run: their mapping keeps working; a producer
    that starts afterwards gets a new pool under the name; the old pool's last process
    leaving does not remove the new one."""
    old = producer(stub, pool_name)
    try:
        old.send("unlinked", b"before").get(30)
        os.unlink(f"/dev/shm/{segment_name(pool_name).lstrip('/')}")
        assert old.send("unlinked", b"after-rm").get(30).offset == 1
        with producer(stub, pool_name) as new:
            assert new._handle.pool.segment.is_current()
            assert not old._handle.pool.segment.is_current()
            new.send("unlinked", b"new-pool").get(30)
            old_sender = psutil.Process(old._handle.pool.sender()[0])
            old.close(30)  # its Sender exits idle, and must not unlink the new pool
            old_sender.wait(15)
            assert new._handle.pool.segment.is_current()
            new.send("unlinked", b"new-pool-again").get(30)
    finally:
        old.close(0)
    got = sorted(m.value() for m in read_back(stub, "unlinked", 4))
    assert got == [b"after-rm", b"before", b"new-pool", b"new-pool-again"]


CONFIG = PoolConfig(batch_size=4096, buffer_memory=1 << 20, max_partitions=8, max_processes=8)


def _crash_while_attached(name: str, ready: Any) -> None:
    pool = SharedPool.open(name, CONFIG)
    publish(pool, {"t": 2})
    acc = RecordAccumulator(pool)
    for i in range(30):
        append(acc, "t", i % 2, i, None, b"kept-%d" % i, now_ms=i)
    ready.set()
    os.kill(os.getpid(), signal.SIGKILL)


def test_case_33_a_stale_segment_from_a_crashed_run(pool_name: str) -> None:
    """The only process of a pool dies with records queued: the next run attaches (magic,
    layout version and config checked), reclaims the dead slot and finds every record."""
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    crashed = ctx.Process(target=_crash_while_attached, args=(pool_name, ready))
    crashed.start()
    crashed.join(30)
    assert ready.is_set() and crashed.exitcode == -signal.SIGKILL
    with pytest.raises(LayoutMismatchError, match="other settings"):
        SharedPool.open(pool_name, PoolConfig(batch_size=8192, buffer_memory=1 << 20))
    pool = SharedPool.open(pool_name, CONFIG)  # reclaims the dead slot on attach
    try:
        assert pool.check_invariants() == []
        acc = RecordAccumulator(pool)
        drained = acc.drain([s.deque_id for s in acc.partition_states()], 1 << 30)
        assert sum(b.info.record_count for b in drained) == 30
    finally:
        pool.destroy()


def test_case_33_a_segment_that_is_not_a_pool_is_refused(pool_name: str) -> None:
    """A file under the pool's name without the magic (a half-created or foreign segment)
    is never read as a pool: a clear error after the attach wait."""
    path = f"/dev/shm/{segment_name(pool_name).lstrip('/')}"
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 16))
    os.chmod(path, 0o600)
    try:
        started = time.monotonic()
        with pytest.raises(LayoutMismatchError, match="not initialised"):
            SharedPool.open(pool_name, CONFIG)
        assert time.monotonic() - started < 10
    finally:
        os.unlink(path)


PROCS, PER_PROC = 5, 10_000


def _race(bootstrap: str, pool: str, proc: int, partitions: tuple[int, ...], out: Any) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, pool=pool, linger_ms=5) as p:
        futures = [
            p.send("race", b"%d:%d" % (proc, seq), partition=partitions[seq % len(partitions)])
            for seq in range(PER_PROC)
        ]
        p.flush(120)
        out.put((proc, sum(f.succeeded() for f in futures)))


@pytest.mark.parametrize("partitions", [(0, 1), (0,)], ids=["two-partitions", "one-partition"])
def test_case_36_processes_racing_keep_order_and_lose_nothing(
    stub: BrokerStub, pool_name: str, partitions: tuple[int, ...]
) -> None:
    """5 processes x 10,000 records over two partitions, or all 50,000 into one: every
    record once, and each process's records in send order within each partition."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_race, args=(stub.bootstrap, pool_name, i, partitions, out))
        for i in range(PROCS)
    ]
    for proc in procs:
        proc.start()
    done: dict[int, int] = {}
    deadline = time.monotonic() + 180
    while len(done) < PROCS:
        try:
            proc_id, succeeded = out.get(timeout=1)
            done[proc_id] = succeeded
        except queue.Empty:
            assert time.monotonic() < deadline, [p.exitcode for p in procs]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert done == dict.fromkeys(range(PROCS), PER_PROC)
    messages = read_back(stub, "race", PROCS * PER_PROC)
    assert len({m.value() for m in messages}) == len(messages) == PROCS * PER_PROC
    seen: dict[tuple[int, int], int] = {}
    for m in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        proc_id, seq = map(int, m.value().split(b":"))
        assert m.partition() == partitions[seq % len(partitions)]
        assert seq > seen.get((proc_id, m.partition()), -1)  # order per process, partition
        seen[(proc_id, m.partition())] = seq
