"""The SPIN model of the pool's locks (pool/lock_order.pml): the code's paths keep the one
lock order and never wait on each other until a timeout; the old drain and reclaim break
the order, and without lockdep's check they deadlock until the 60 s timeout."""

from __future__ import annotations

from pathlib import Path

from tests.pool.test_batch_lifecycle import _check

MODEL = Path(__file__).parents[2] / "pool/shmkafka/pool/lock_order.pml"


def test_the_code_keeps_the_order_and_never_times_out(tmp_path: Path) -> None:
    report = _check(tmp_path, source=MODEL)
    assert "errors: 0" in report, report
    assert "depth too small" not in report, report


def test_without_the_order_check_the_code_still_never_times_out(tmp_path: Path) -> None:
    report = _check(tmp_path, "-DNO_ORDER", source=MODEL)
    assert "errors: 0" in report, report


def test_the_old_reclaim_takes_a_stripe_under_the_pool_lock(tmp_path: Path) -> None:
    report = _check(tmp_path, "-DOLD_DRAIN", "-DOLD_RECLAIM", source=MODEL)
    assert "pan:1: assertion violated ((mine[me]>>2)==0)" in report, report


def test_the_old_drain_and_reclaim_wait_on_each_other_until_the_timeout(tmp_path: Path) -> None:
    report = _check(tmp_path, "-DOLD_DRAIN", "-DOLD_RECLAIM", "-DNO_ORDER", source=MODEL)
    assert "pan:1: assertion violated (timeouts==0)" in report, report
