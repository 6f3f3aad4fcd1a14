"""End to end: app processes → shared pool → Sender → Tansu / librdkafka's mock cluster,
read back with confluent-kafka's consumer, every record checked."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
from typing import Any

import pytest

from shmkafka.protocol.compression import CompressionType
from shmkafka.protocol.hashing import murmur2_partition
from shmkafka.shm.procs import start_time
from tests.integration import e2e_workers
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.integration

PROCS = 4
RECORDS = 25_000


def _collect(out: Any, procs: list[Any], timeout: float) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=0.5))
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not failed, f"app processes failed: {failed}"
            assert time.monotonic() < deadline, "app processes did not finish"
    return results


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_every_record_exactly_once_in_order(
    peer: Peer, codec: CompressionType, pool_name: str
) -> None:
    topic = unique_topic(f"e2e-{codec.name.lower()}")
    with cluster(peer) as c:
        partitions = c.ensure_topic(topic, 12)
    assert partitions == (12 if peer.can_create_topics else peer.auto_partitions)
    pool = pool_name
    config = {
        "bootstrap_servers": [f"{h}:{p}" for h, p in peer.brokers],
        "compression_type": codec.name.lower(),
        "acks": -1,
        "enable_idempotence": True,
        "linger_ms": 5,
    }
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=e2e_workers.produce, args=(pool, config, topic, i, RECORDS, out))
        for i in range(PROCS)
    ]
    sender_pid = 0
    try:
        for p in procs:
            p.start()
        results = _collect(out, procs, 300)
        sender_pid = results[0]["sender"]
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
    finally:
        for p in procs:
            p.kill()
    assert [r["errors"] for r in results] == [[]] * PROCS
    assert {r["sender"] for r in results} == {sender_pid}  # one Sender served all of them
    messages = consume_all(peer, topic, list(range(partitions)), PROCS * RECORDS, timeout=60)
    consumed: dict[tuple[int, int], tuple[int, int]] = {}
    for msg in messages:
        proc, seq = map(int, msg.value().split(b":")[:2])
        assert (proc, seq) not in consumed, f"duplicate {(proc, seq)}"
        consumed[(proc, seq)] = (msg.partition(), msg.offset())
        key, value, headers = e2e_workers.record(proc, seq)
        assert msg.key() == key and msg.value() == value and msg.headers() == headers
        if key is not None:
            assert msg.partition() == murmur2_partition(key, partitions)
    assert len(consumed) == PROCS * RECORDS
    for r in results:
        last: dict[int, int] = {}
        for seq, partition, offset in r["results"]:
            assert consumed[(r["proc"], seq)] == (partition, offset)  # the future was right
            assert offset > last.get(partition, -1)  # order per process per partition
            last[partition] = offset
    _wait_for_sender_exit(sender_pid, pool)


def _wait_for_sender_exit(pid: int, pool: str) -> None:
    deadline = time.monotonic() + 15
    while start_time(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    if start_time(pid) is not None:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the Sender did not exit once its producers were gone")
    assert not os.path.exists(f"/dev/shm/shmkafka.{pool}"), "the idle Sender removes the pool"
