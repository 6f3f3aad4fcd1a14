"""App processes SIGKILLed at random points while they send (10 kills in ``make test``, 100
in ``make stress``), one after another on one pool: every record whose send() returned
before the kill is read back exactly once, in order per process per partition; nothing
deadlocks; and once the Sender is done, every slab of the pool is free again."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
from types import SimpleNamespace
from typing import Any

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.pool.stat import pool_stat
from shmkafka.producer.client import Client
from tests import ledger
from tests.integration import e2e_workers
from tests.integration.kafka_io import consume_all

pytestmark = pytest.mark.usefixtures("pool_removed")


@pytest.mark.parametrize("kills", [10, pytest.param(100, marks=pytest.mark.stress, id="100-kills")])
def test_app_processes_killed_at_random_lose_nothing_they_returned(
    pool_name: str, kills: int
) -> None:
    with BrokerStub(nodes=1, partitions=4) as stub:
        stub.create_topic("kills", 4)
        config = {"bootstrap_servers": [stub.bootstrap], "linger_ms": 5}
        observer = Client(pool_name, config, sender_idle_exit_ms=500)
        ctx = mp.get_context("fork")
        rng = random.Random(kills)
        returned: dict[int, int] = {}
        try:
            for proc in range(kills):
                last: Any = ctx.Value("q", -1, lock=False)
                app = ctx.Process(target=e2e_workers.send_until_killed,
                                  args=(pool_name, config, "kills", proc, last))  # fmt: skip
                app.start()
                started = time.monotonic()
                while last.value < 0:  # (a busy machine may take a while to fork and attach)
                    assert time.monotonic() - started < 30, "the app never sent"
                    time.sleep(0.005)
                time.sleep(rng.uniform(0.0, 0.35))  # anywhere: appending, opening a batch...
                os.kill(app.pid, signal.SIGKILL)  # type: ignore[arg-type]
                app.join(10)
                assert app.exitcode == -signal.SIGKILL
                returned[proc] = last.value
            deadline = time.monotonic() + 60
            while True:  # the Sender delivers everything the dead processes left behind
                stat = pool_stat(pool_name)
                queued = sum(p["queued_batches"] for p in stat["partitions"])
                busy = queued or stat["in_flight_batches"] or stat["buffer"]["used_slabs"]
                if not busy:
                    break
                assert time.monotonic() < deadline, stat
                time.sleep(0.1)
            observer.pool.reclaim_dead()  # what the next process to attach does
            assert observer.pool.check_invariants() == []
        finally:
            observer.close(10)
        expected = sum(n + 1 for n in returned.values())
        got = consume_all(SimpleNamespace(bootstrap=stub.bootstrap), "kills", [0, 1, 2, 3],
                          expected, timeout=60)  # fmt: skip
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    for msg in got:
        proc, seq = map(int, msg.value().split(b":")[:2])
        assert (proc, seq) not in seen, f"duplicate {(proc, seq)}"
        seen[(proc, seq)] = (msg.partition(), msg.offset())
    for proc, last_seq in returned.items():
        for seq in range(last_seq + 1):
            assert (proc, seq) in seen, f"record {proc}:{seq} returned by send() was lost"
        offsets: dict[int, int] = {}
        for seq in sorted(s for p, s in seen if p == proc):
            partition, offset = seen[(proc, seq)]
            assert offset > offsets.get(partition, -1), "order per process per partition"
            offsets[partition] = offset
    assert all(n >= 0 for n in returned.values())  # every kill landed mid-run
    ledger.note(f"{kills} app kills", app_kills=kills, records=len(seen))
