from __future__ import annotations

import json
import subprocess
import sys

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.pool.stat import pool_stat
from tests.appending import append
from tests.conftest import publish


def test_stat_reads_the_pool_without_touching_it(pool: SharedPool) -> None:
    publish(pool, {"orders": 2})
    acc = RecordAccumulator(pool)
    for i in range(3):
        append(acc, "orders", 1, i, b"k", bytes(100), now_ms=0)
    before = bytes(pool.segment.buf)
    stat = pool_stat(pool.name)
    assert bytes(pool.segment.buf) == before
    assert stat["sender"]["alive"] is False
    assert [p["pid"] for p in stat["processes"]] == [pool.pid]
    assert stat["buffer"]["used_slabs"] == 1
    assert stat["batches"] == {"OPEN": 1}
    (queued,) = [p for p in stat["partitions"] if p["queued_batches"]]
    assert (queued["topic"], queued["partition"], queued["queued_batches"]) == ("orders", 1, 1)
    assert queued["queued_bytes"] > 300
    out = subprocess.run(
        [sys.executable, "-m", "shmkafka", "stat", "--pool", pool.name, "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout)["partitions"] == stat["partitions"]
    text = subprocess.run(
        [sys.executable, "-m", "shmkafka", "stat", "--pool", pool.name],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "orders-1: 1 batches" in text and "sender: pid 0 not running" in text
