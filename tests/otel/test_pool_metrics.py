from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator

import pytest

from shmkafka.otel import pool_metrics
from shmkafka.otel.pool_metrics import reporting_pools
from shmkafka.producer.process_slot import ProcessSlot
from tests.conftest import SMALL


@pytest.fixture
def joined(pool_name: str) -> Iterator[ProcessSlot]:
    slot = ProcessSlot.join(pool_name, SMALL)

    class Nobody:
        def on_completions(self, *args: object) -> None: ...

    try:
        yield slot
    finally:
        slot.release(Nobody(), 5)  # type: ignore[arg-type]
        slot.pool.destroy()


def _child_reports(name: str, out: mp.Queue) -> None:  # type: ignore[type-arg]
    pool_metrics.active = True
    slot = ProcessSlot.join(name, None)
    out.put([p.name for p in reporting_pools()])
    slot.pool.detach()


def test_one_process_per_pool_reports_its_figures(
    joined: ProcessSlot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool_metrics, "active", True)
    assert [p.name for p in reporting_pools()] == [joined.pool.name]  # the lowest slot: ours
    context = mp.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=_child_reports, args=(joined.pool.name, out))
    child.start()
    try:
        assert out.get(timeout=60) == []  # a second process of the pool reports nothing
    finally:
        child.join(30)
    assert child.exitcode == 0
