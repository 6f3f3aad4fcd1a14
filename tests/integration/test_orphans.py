"""Pools every process left (an OOM kill, a container stop): one holding no record is
removed by the next Sender of this user that starts (any producer's), whatever its pool;
one still holding records stays, and the next producer of that pool adopts it (its Sender
delivers them)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from typing import Any

import pytest

from shmkafka.kafka import KafkaProducer
from shmkafka.pool.cleanup import STALE_HEADER_S, remove_orphans
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.pool.stat import pool_stat
from tests.conftest import wait_removed
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")


def _leave(pool: str, bootstrap: str, topic: str, records: int, ready: Any) -> None:
    """Make the pool, append ``records`` the Sender will not send for 3 s, then the
    Sender and this process die (SIGKILL) as in an OOM kill."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, pool=pool, linger_ms=3000)
    for i in range(records):
        producer.send(topic, b"%d" % i, key=b"k")
    if records:
        os.kill(pool_stat(pool)["sender"]["pid"], signal.SIGKILL)
    else:
        producer.flush(30)
        os.kill(pool_stat(pool)["sender"]["pid"], signal.SIGKILL)
    ready.set()
    os.kill(os.getpid(), signal.SIGKILL)


def _orphan(pool: str, tansu: Peer, topic: str, records: int) -> None:
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=_leave, args=(pool, tansu.bootstrap, topic, records, ready))
    child.start()
    child.join(60)
    assert ready.is_set() and child.exitcode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while pool_stat(pool)["sender"]["alive"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_an_empty_orphan_is_removed_and_a_full_one_adopted(tansu: Peer, pool_name: str) -> None:
    topic = unique_topic("orphan")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    empty, full = pool_name + "e", pool_name + "f"
    _orphan(full, tansu, topic, 25)
    _orphan(empty, tansu, topic, 0)  # (its producer kept the full one, holding records)
    assert SharedPool.exists(empty) and SharedPool.exists(full)
    # a pool made moments ago is spared: its maker may not have attached yet (a sidecar)
    assert empty not in remove_orphans() and SharedPool.exists(empty)
    aged = time.time() - 2 * STALE_HEADER_S  # (as an orphan left a minute ago)
    os.utime(f"/dev/shm/shmkafka.{empty}", (aged, aged))
    other = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)  # any pool:
    deadline = time.monotonic() + 20  # its Sender looks for orphans as it starts
    while SharedPool.exists(empty):  # nobody left and nothing in it: removed
        assert time.monotonic() < deadline, "the empty orphan was not removed"
        time.sleep(0.05)
    other.close()
    assert SharedPool.exists(full)  # records in it: kept for its producers
    adopter = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=full, linger_ms=3000)
    try:
        values = sorted(int(m.value()) for m in consume_all(tansu, topic, [0], 25))
        assert values == list(range(25))  # the dead process's records, delivered once
    finally:
        adopter.close()
        wait_removed(full)
