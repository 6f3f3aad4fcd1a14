"""The Sender is killed with SIGKILL again and again during an idempotent run (10 times on
Tansu and on broker_stub in ``make test``; 20 times during 200,000 records on each in
``make stress``): each time a new Sender starts by itself and re-sends what was in flight;
the broker de-duplicates, so every record is read back exactly once, in order, and every
future succeeds."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from types import SimpleNamespace
from typing import Any

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.pool.cleanup import cleanup_pool
from shmkafka.shm.errors import ShmError
from shmkafka.shm.layout import H_SENDER_PID, H_SENDER_START, I32, I64
from shmkafka.shm.procs import is_alive
from shmkafka.shm.segment import Segment
from tests import ledger
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


CASES = [
    pytest.param("tansu", 10, 50_000, id="tansu-10-kills"),
    pytest.param("stub", 10, 50_000, id="broker_stub-10-kills"),
    pytest.param("tansu", 20, 100_000, id="tansu-20-kills-200k", marks=pytest.mark.stress),
    pytest.param("stub", 20, 100_000, id="broker_stub-20-kills-200k", marks=pytest.mark.stress),
]


@pytest.mark.parametrize(("broker", "kills", "count"), CASES)
@pytest.mark.catalogue(16)
def test_sender_killed_again_and_again_loses_and_duplicates_nothing(
    request: pytest.FixtureRequest, pool_name: str, broker: str, kills: int, count: int
) -> None:
    """``count`` records from each of 2 processes (``kills`` Sender SIGKILLs meanwhile)."""
    topic = unique_topic("sender-crash")
    if broker == "tansu":
        tansu: Peer = request.getfixturevalue("tansu")
        with cluster(tansu) as c:
            partitions = c.ensure_topic(topic, 6)
        _crash_loop(tansu.bootstrap, tansu, topic, partitions, pool_name, kills, count)
        return
    with BrokerStub(nodes=3, partitions=6, replication_factor=3) as stub:
        stub.create_topic(topic, 6)
        peer = SimpleNamespace(bootstrap=stub.bootstrap)
        _crash_loop(stub.bootstrap, peer, topic, 6, pool_name, kills, count)


def _crash_loop(
    bootstrap: str, peer: Any, topic: str, partitions: int, pool: str, kills: int, count: int
) -> None:
    config = {"bootstrap_servers": bootstrap.split(","), "linger_ms": 5}
    procs_n = 2
    ctx = mp.get_context("spawn")
    out: Any = ctx.Queue()
    # the records are spread over the kills (however long a restart takes under load), and
    # the producers stay attached until the last kill: each kill finds a Sender at work
    killed_count, done = ctx.Value("i", 0), ctx.Event()
    procs = [
        ctx.Process(
            target=e2e_workers.produce,
            args=(pool, config, topic, i, count, out, 0.0, 0, (killed_count, kills, done)),
        )
        for i in range(procs_n)
    ]
    killed: list[int] = []
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + 30 + 12 * kills  # a restart takes seconds under load
        while len(killed) < kills and time.monotonic() < deadline:
            pid = _live_sender(pool)
            if pid and pid not in killed:
                time.sleep(0.25)  # let it work a little
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                killed_count.value = len(killed)
            time.sleep(0.05)
        while not _live_sender(pool) and time.monotonic() < deadline:
            time.sleep(0.05)  # (the last one killed comes back before the producers leave)
        done.set()
        assert len(killed) == kills, f"only {len(killed)} Senders to kill"
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
    messages = consume_all(peer, topic, list(range(partitions)), procs_n * count, timeout=120)
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    for msg in messages:
        proc, seq = map(int, msg.value().split(b":")[:2])
        assert (proc, seq) not in seen, f"duplicate {(proc, seq)}"
        seen[(proc, seq)] = (msg.partition(), msg.offset())
    assert len(seen) == procs_n * count
    for proc in range(procs_n):
        last_offsets: dict[int, int] = {}
        for seq in range(count):
            partition, offset = seen[(proc, seq)]
            assert offset > last_offsets.get(partition, -1), "order per process per partition"
            last_offsets[partition] = offset
    for r in results:  # futures agree with the log wherever the broker told the offset
        for seq, partition, offset in r["results"]:
            if offset >= 0:
                assert seen[(r["proc"], seq)] == (partition, offset)
    ledger.note(f"{kills} Sender kills, {topic}", sender_kills=kills, records=len(seen))
