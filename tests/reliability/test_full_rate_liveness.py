"""Every record gets its result at full rate, through every public API: app processes send
as fast as they can for a moment on broker_stub, flush within a bound, and every record's
result is checked. Each record acknowledged exactly once (no two records share an offset,
and the partitions hold exactly the acknowledged records and the warm-ups), in order per
process per partition, none failed, none left without a result.

The matrix covers each API with 2, 4 and 8 processes and 100 B, 1 KB and 10 KB values
(each API meets each count and each size once); make stress runs every combination for
longer. This is the test that saw the `make demo` hang of the old tracker."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
from array import array
from typing import Any

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.perf.tool import main as perf_main
from tests.reliability import liveness_workers
from tests.reliability.liveness_workers import FLUSH_BOUND_S, MODES

PARTITIONS = 16
COUNTS, SIZES = (2, 4, 8), (100, 1_000, 10_000)
SECONDS = 1.5
STRESS_SECONDS = float(os.environ.get("SHMKAFKA_STRESS_SECONDS", "30")) / 4


def _matrix() -> list[Any]:
    """Each API with each process count and each size once (a Latin square)."""
    cells = [(mode, COUNTS[j], SIZES[(i + j) % 3]) for i, mode in enumerate(MODES)
             for j in range(3)]  # fmt: skip
    return [pytest.param(m, p, s, id=f"{m}-P{p}-{s}B") for m, p, s in cells]


def _full() -> list[Any]:
    return [pytest.param(m, p, s, id=f"{m}-P{p}-{s}B", marks=pytest.mark.stress)
            for m in MODES for p in COUNTS for s in SIZES]  # fmt: skip


def _run(mode: str, processes: int, size: int, seconds: float, pool: str) -> None:
    topic = f"live-{pool}"
    with BrokerStub(nodes=1) as stub:
        stub.run(lambda: stub.cluster.create_topic(topic, PARTITIONS))
        ctx = mp.get_context("spawn")
        barrier, out = ctx.Barrier(processes), ctx.Queue()
        workers = [
            ctx.Process(target=liveness_workers.run,
                        args=(mode, stub.bootstrap, topic, pool, i, size, seconds, barrier, out))
            for i in range(processes)
        ]  # fmt: skip
        for w in workers:
            w.start()
        try:
            reports = [out.get(timeout=60 + seconds + FLUSH_BOUND_S) for _ in workers]
        finally:
            for w in workers:
                w.join(30)
                if w.is_alive():
                    w.kill()
        watermarks = stub.run(lambda: [p.leader_log.hw for p in stub.cluster.topics[topic]])
    _check(mode, processes, reports, watermarks)


def _check(mode: str, processes: int, reports: list[dict[str, Any]],
           watermarks: list[int]) -> None:  # fmt: skip
    errors = [r["error"] for r in reports if "error" in r]
    assert errors == []
    unresolved = [(r["unresolved"], round(r["flush_s"], 1)) for r in reports if r["unresolved"]]
    assert unresolved == [], "records left without a result (count, flush seconds)"
    assert sum(r["failed"] for r in reports) == 0
    sent = sum(r["sent"] for r in reports)
    assert sent > 0
    assert sum(watermarks) == sent + processes  # every record and warm-up, once
    if mode == MODES[1]:  # fire and forget: no per-record result to look at
        return
    offsets: dict[int, list[int]] = {}
    for r in reports:
        for partition, raw in r["offsets"].items():
            mine = array("q")
            mine.frombytes(raw)
            assert all(a < b for a, b in itertools.pairwise(mine)), "out of order"
            offsets.setdefault(partition, []).extend(mine)
    assert sum(len(o) for o in offsets.values()) == sent
    for partition, acked in offsets.items():
        assert len(set(acked)) == len(acked), f"partition {partition}: an offset acked twice"
        assert max(acked) < watermarks[partition]


@pytest.mark.catalogue(38)
@pytest.mark.parametrize(("mode", "processes", "size"), _matrix())
@pytest.mark.usefixtures("pool_removed")
def test_every_record_gets_its_result_at_full_rate(
    mode: str, processes: int, size: int, pool_name: str
) -> None:
    _run(mode, processes, size, SECONDS, pool_name)


@pytest.mark.parametrize(("mode", "processes", "size"), _full())
@pytest.mark.usefixtures("pool_removed")
def test_every_record_gets_its_result_at_full_rate_for_longer(
    mode: str, processes: int, size: int, pool_name: str
) -> None:
    _run(mode, processes, size, STRESS_SECONDS, pool_name)


@pytest.mark.catalogue(38)
def test_the_demos_perf_run_leaves_no_record_without_a_result() -> None:
    """The full-rate reproduction of the `make demo` hang: `shmkafka perf` with 4 processes
    for 4 s at 100 B (about 6 million records through KafkaProducer futures). The perf tool
    bounds its flushes and exits 1 when a record is left without a result."""
    argv = ["--processes", "4", "--duration", "4", "--record-size", "100", "--quiet"]
    assert perf_main(argv) == 0
