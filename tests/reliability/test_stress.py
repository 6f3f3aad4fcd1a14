"""Many pools at once: each test is one pool (its own broker_stub, Sender and producer
processes) sending for a while; pytest-xdist runs them in parallel workers. ``make test``
runs a short version (2 pools x 2 s); ``make stress`` runs 8 pools for
``SHMKAFKA_STRESS_SECONDS`` (default 30 s). Every record is checked: exactly once, in
order per process per partition."""

from __future__ import annotations

import multiprocessing as mp
import os
from types import SimpleNamespace
from typing import Any

import pytest

from shmkafka.broker_stub.server import BrokerStub
from tests import ledger
from tests.integration import e2e_workers
from tests.integration.kafka_io import consume_all

pytestmark = pytest.mark.usefixtures("pool_removed")
PROCESSES = 3
PARTITIONS = 4


def _seconds() -> float:
    return float(os.environ.get("SHMKAFKA_STRESS_SECONDS", "30"))


@pytest.mark.parametrize(
    ("pool_index", "seconds"),
    [(i, 2.0) for i in range(2)]
    + [pytest.param(i, None, marks=pytest.mark.stress, id=f"stress-{i}") for i in range(8)],
)
def test_pools_in_parallel(pool_name: str, pool_index: int, seconds: float | None) -> None:
    duration = seconds if seconds is not None else _seconds()
    count = int(4000 * duration)  # per process, spread over the duration
    topic = f"stress-{pool_index}"
    with BrokerStub(nodes=2, partitions=PARTITIONS, replication_factor=2) as stub:
        stub.create_topic(topic, PARTITIONS)
        config = {"bootstrap_servers": stub.bootstrap.split(","), "linger_ms": 5}
        ctx = mp.get_context("spawn")
        out: Any = ctx.Queue()
        procs = [
            ctx.Process(
                target=e2e_workers.produce, args=(pool_name, config, topic, p, count, out, duration)
            )
            for p in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        results = [out.get(timeout=duration + 180) for _ in procs]
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        assert [r["errors"] for r in results] == [[]] * PROCESSES
        got = consume_all(SimpleNamespace(bootstrap=stub.bootstrap), topic,
                          list(range(PARTITIONS)), PROCESSES * count, timeout=120)  # fmt: skip
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    for msg in got:
        proc, seq = map(int, msg.value().split(b":")[:2])
        assert (proc, seq) not in seen, f"duplicate {(proc, seq)}"
        seen[(proc, seq)] = (msg.partition(), msg.offset())
    assert len(seen) == PROCESSES * count
    for proc in range(PROCESSES):
        last: dict[int, int] = {}
        for seq in range(count):
            partition, offset = seen[(proc, seq)]
            assert offset > last.get(partition, -1)
            last[partition] = offset
    ledger.note(f"pool {pool_index} for {duration} s", records=len(seen))
