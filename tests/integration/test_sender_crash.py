"""The Sender is killed with SIGKILL ten times during an idempotent run to Tansu: each time a
new Sender starts by itself and re-sends what was in flight; the broker de-duplicates, so
every record is read back exactly once, in order, and every future succeeds."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from typing import Any

import pytest

from shmkafka.shm.cleanup import cleanup_pool
from shmkafka.shm.errors import ShmError
from shmkafka.shm.layout import H_SENDER_PID, H_SENDER_START, I32, I64
from shmkafka.shm.procs import is_alive
from shmkafka.shm.segment import Segment
from tests.integration import e2e_workers
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.integration.test_sender_e2e import _collect, _wait_for_sender_exit
from tests.peers import Peer

pytestmark = pytest.mark.integration


def _live_sender(pool: str) -> int:
    try:
        segment = Segment.attach(pool)
    except ShmError:
        return 0
    try:
        pid = I32.unpack_from(segment.buf, H_SENDER_PID)[0]
        started = I64.unpack_from(segment.buf, H_SENDER_START)[0]
        return pid if pid > 0 and is_alive(pid, started) else 0
    finally:
        segment.close()


def test_sender_killed_ten_times_loses_and_duplicates_nothing(tansu: Peer, pool_name: str) -> None:
    topic = unique_topic("sender-crash")
    with cluster(tansu) as c:
        partitions = c.ensure_topic(topic, 6)
    pool = pool_name
    config = {"bootstrap_servers": [f"{h}:{p}" for h, p in tansu.brokers], "linger_ms": 5}
    procs_n, count = 2, 50_000
    ctx = mp.get_context("spawn")
    out: Any = ctx.Queue()
    procs = [
        ctx.Process(target=e2e_workers.produce, args=(pool, config, topic, i, count, out, 8.0))
        for i in range(procs_n)
    ]
    killed: list[int] = []
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + 60
        while len(killed) < 10 and time.monotonic() < deadline:
            pid = _live_sender(pool)
            if pid and pid not in killed:
                time.sleep(0.25)  # let it work a little
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.05)
        assert len(killed) == 10, f"only {len(killed)} Senders to kill"
        results = _collect(out, procs, 240)
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        last = _live_sender(pool)
        if last:
            _wait_for_sender_exit(last, pool)  # and it removes the pool
    finally:
        for p in procs:
            p.kill()
        if pid := _live_sender(pool):
            os.kill(pid, signal.SIGKILL)
            cleanup_pool(pool)
    assert [r["errors"] for r in results] == [[]] * procs_n
    messages = consume_all(tansu, topic, list(range(partitions)), procs_n * count, timeout=90)
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    for msg in messages:
        proc, seq = map(int, msg.value().split(b":")[:2])
        assert (proc, seq) not in seen, f"duplicate {(proc, seq)}"
        seen[(proc, seq)] = (msg.partition(), msg.offset())
    assert len(seen) == procs_n * count
    for proc in range(procs_n):
        last: dict[int, int] = {}
        for seq in range(count):
            partition, offset = seen[(proc, seq)]
            assert offset > last.get(partition, -1), "order per process per partition"
            last[partition] = offset
    for r in results:  # futures agree with the log wherever the broker told the offset
        for seq, partition, offset in r["results"]:
            if offset >= 0:
                assert seen[(r["proc"], seq)] == (partition, offset)
