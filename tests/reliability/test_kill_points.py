"""Catalogue cases 7–9, 13 and 14: a process SIGKILLed at a named point (faultpoints.py)
inside an append (slabs allocated but unowned; holding a partition's lock; record written,
not published) or inside the Sender (batches drained, nothing sent; request sent; answer
received, nothing completed). Everything accepted is delivered exactly once, nothing
deadlocks, and the pool gives every slab back."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import random
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.pool.cleanup import cleanup_pool
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.pool.stat import pool_stat
from shmkafka.producer.client import Client
from shmkafka.shm.config import PoolConfig
from tests import ledger
from tests.integration import e2e_workers
from tests.integration.kafka_io import consume_all

pytestmark = pytest.mark.usefixtures("pool_removed")
APP_POINTS = ["append.after_allocate", "append.holding_stripe", "append.before_publish"]
SENDER_POINTS = [
    "drain.after_shrink",
    "sender.after_drain",
    "sender.after_send",
    "sender.before_complete",
]


def _arm(monkeypatch: pytest.MonkeyPatch, point: str, marker: Path) -> None:
    monkeypatch.setenv("SHMKAFKA_FAULT_AT", point)
    monkeypatch.setenv("SHMKAFKA_FAULT_FILE", str(marker))


def _settle(pool: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        stat = pool_stat(pool)
        queued = sum(p["queued_batches"] for p in stat["partitions"])
        if not (queued or stat["in_flight_batches"] or stat["buffer"]["used_slabs"]):
            return
        assert time.monotonic() < deadline, stat
        time.sleep(0.1)


@contextmanager
def _detaching(pool: SharedPool) -> Iterator[SharedPool]:
    try:
        yield pool
    finally:
        pool.detach()


def _values(stub: BrokerStub, topic: str, count: int) -> list[bytes]:
    got = consume_all(SimpleNamespace(bootstrap=stub.bootstrap), topic, [0, 1], count)
    return [m.value() for m in got]


@pytest.mark.catalogue(7, 8, 9)
@pytest.mark.parametrize("point", APP_POINTS)
def test_an_app_killed_inside_an_append(
    pool_name: str, point: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "fired"
    with BrokerStub(nodes=1, partitions=2) as stub:
        stub.create_topic("kp", 2)
        config = {"bootstrap_servers": [stub.bootstrap], "linger_ms": 5}
        observer = Client(pool_name, config, sender_idle_exit_ms=500)
        ctx = mp.get_context("spawn")
        last: Any = ctx.Value("q", -1, lock=False)
        with monkeypatch.context() as armed:
            _arm(armed, point, marker)
            armed.setenv("SHMKAFKA_PURE_PYTHON", "1")  # the points live on the Python path
            victim = ctx.Process(target=e2e_workers.send_until_killed,
                                 args=(pool_name, config, "kp", 1, last))  # fmt: skip
            victim.start()
        victim.join(60)
        assert victim.exitcode == -signal.SIGKILL and marker.read_text() == point
        try:  # another process appends to the same partitions: no deadlock, all delivered
            futures = [
                observer.send("kp", b"0:%d:w" % i, b"w", partition=i % 2) for i in range(300)
            ]
            observer.flush(60)
            assert all(f.succeeded() for f in futures)
            _settle(pool_name)
            observer.pool.reclaim_dead()
            assert observer.pool.check_invariants() == []
        finally:
            observer.close(10)
        returned = last.value
        values = _values(stub, "kp", 300 + returned + 1)
    assert len(values) == len(set(values))
    mine = {v for v in values if v.startswith(b"1:")}
    assert {e2e_workers.record(1, s)[1] for s in range(returned + 1)} <= mine
    ledger.note(f"app killed at {point}", app_kills=1, records=len(values))


@pytest.mark.catalogue(13, 14)
@pytest.mark.parametrize("point", SENDER_POINTS)
def test_a_sender_killed_mid_round(
    pool_name: str, point: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "fired"
    # batches that grow (the public APIs' default), so that drained ones have tails to trim
    pool = SharedPool.open(pool_name, PoolConfig(batch_size=1_000_000))
    with BrokerStub(nodes=1, partitions=2) as stub, _detaching(pool):
        stub.create_topic("ks", 2)
        config = {"bootstrap_servers": [stub.bootstrap], "linger_ms": 5}
        ctx = mp.get_context("spawn")
        out: Any = ctx.Queue()
        with monkeypatch.context() as armed:
            _arm(armed, point, marker)  # inherited by the app, then by the Senders it starts
            # values of 6 KB fill a slab within the linger: batches grow, then are trimmed
            pad = 6000 if point == "drain.after_shrink" else 0
            app = ctx.Process(target=e2e_workers.produce,
                              args=(pool_name, config, "ks", 0, 3000, out, 2.0, pad))  # fmt: skip
            app.start()
        result = out.get(timeout=120)
        app.join(60)
        assert app.exitcode == 0 and result["errors"] == []
        assert marker.read_text() == point  # the first Sender died there; the next took over
        values = _values(stub, "ks", 3000)
        _settle(pool_name)  # every slab back: a tail a killed Sender left was reclaimed
    assert len(values) == 3000 == len(set(values))  # idempotence: resent, not duplicated
    ledger.note(f"Sender killed at {point}", sender_kills=1, records=len(values))


@pytest.mark.catalogue(37)
def test_a_sender_killed_at_start_is_started_again(
    pool_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first Sender dies before it is up (SIGKILL at ``sender.starting``): the app's
    producer does not give up (it used to fail its construction with "the Sender exited
    at start (status -9)"); it starts another, and every record is delivered once."""
    marker = tmp_path / "fired"
    with BrokerStub(nodes=1, partitions=2) as stub:
        stub.create_topic("kst", 2)
        config = {"bootstrap_servers": [stub.bootstrap], "linger_ms": 5}
        ctx = mp.get_context("spawn")
        out: Any = ctx.Queue()
        with monkeypatch.context() as armed:
            _arm(armed, "sender.starting", marker)
            app = ctx.Process(target=e2e_workers.produce,
                              args=(pool_name, config, "kst", 0, 2000, out))  # fmt: skip
            app.start()
        result = out.get(timeout=120)
        app.join(60)
        assert app.exitcode == 0 and result["errors"] == []
        assert marker.read_text() == "sender.starting"
        values = _values(stub, "kst", 2000)
    assert len(values) == 2000 == len(set(values))
    ledger.note("Sender killed at start", sender_kills=1, records=len(values))


@pytest.mark.catalogue(37)
def test_producers_keep_going_while_each_new_sender_is_killed(pool_name: str) -> None:
    """Ten SIGKILLs, each of the newest Sender 0.2-0.8 s after it appears (at start or
    mid-run), while two app processes send 20,000 idempotent records each: no app gives
    up, and every record is delivered once, in order per process per partition."""
    rng = random.Random(37)
    with BrokerStub(nodes=1, partitions=2) as stub:
        stub.create_topic("kl", 2)
        config = {"bootstrap_servers": [stub.bootstrap], "linger_ms": 5,
                  "enable_idempotence": True, "acks": -1}  # fmt: skip
        ctx = mp.get_context("spawn")
        out: Any = ctx.Queue()
        apps = [ctx.Process(target=e2e_workers.produce,
                            args=(pool_name, config, "kl", proc, 20_000, out, 6.0))
                for proc in range(2)]  # fmt: skip
        for app in apps:
            app.start()
        kills, killed = 0, set()
        deadline = time.monotonic() + 120
        while kills < 10 and time.monotonic() < deadline and any(a.is_alive() for a in apps):
            pid = _newest_sender(pool_name)
            if pid is None or pid in killed:
                time.sleep(0.01)
                continue
            time.sleep(rng.uniform(0.2, 0.8))
            if not any(a.is_alive() for a in apps):
                break  # (a Sender killed after the apps left: no one would start another)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                kills += 1
            killed.add(pid)
        results = [out.get(timeout=240) for _ in apps]
        for app in apps:
            app.join(60)
        assert [a.exitcode for a in apps] == [0, 0]
        assert [r["errors"] for r in results] == [[], []]
        values = _values(stub, "kl", 40_000)
    # The apps may have left between the last check and the kill: then no Sender is left to
    # remove the pool, and it is what `shmkafka cleanup` removes (only a pool whose every
    # process is dead; a live, idle Sender removes its own).
    cleanup_pool(pool_name)
    assert kills >= 5  # (the apps may finish before all ten)
    assert len(values) == 40_000 == len(set(values))
    ledger.note("each new Sender killed", sender_kills=kills, records=len(values))


def _newest_sender(pool: str) -> int | None:
    """The pid of a live Sender process of ``pool`` (its command line names the pool)."""
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "shmkafka.sender" in cmdline and pool in cmdline:
            return int(proc.info["pid"])
    return None
