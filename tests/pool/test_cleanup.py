from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys

import pytest

from shmkafka.pool.cleanup import cleanup
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.errors import PoolNotFoundError
from shmkafka.shm.segment import Segment, list_semaphores
from tests.conftest import SMALL


def _attach_and_die(name: str) -> None:
    pool = SharedPool.open(name, SMALL)
    # A slab held keeps the pool from every Sender's unasked ``remove_orphans`` (another
    # test's Sender may start meanwhile): only the asked-for cleanup may remove it.
    pool.buffers.allocate(100, max_block_ms=1000)
    pool.locks.acquire(0)
    os.kill(os.getpid(), signal.SIGKILL)


def test_live_pool_is_never_removed(pool: SharedPool) -> None:
    (result,) = cleanup(pool.name)
    assert not result.removed
    assert f"pid {os.getpid()}" in result.reason
    assert os.path.exists(f"/dev/shm/shmkafka.{pool.name}")


def test_pool_of_dead_processes_is_removed_with_its_semaphores(pool_name: str) -> None:
    p = mp.get_context("fork").Process(target=_attach_and_die, args=(pool_name,))
    p.start()
    p.join(10)
    assert os.path.exists(f"/dev/shm/shmkafka.{pool_name}")
    assert list_semaphores(pool_name)
    out = subprocess.run(
        [sys.executable, "-m", "shmkafka", "cleanup", "--pool", pool_name],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"removed {pool_name}: every process of it is dead" in out.stdout
    assert not os.path.exists(f"/dev/shm/shmkafka.{pool_name}")
    assert list_semaphores(pool_name) == []


def _idle_pool(name: str) -> None:
    """A pool nobody is attached to and that holds no record: what a sweep removes."""
    pool = SharedPool.open(name, SMALL)
    pool.detach()


def test_an_attach_racing_a_removal_leaves_nothing_behind(
    pool_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that got the segment just before a sweep removed the pool creates no
    semaphore for it (the claim and the semaphores come under the slot-table lock the
    removal holds, after a check that the segment is still the pool's); without a config
    its open then finds no pool, and with one it makes a new pool."""
    _idle_pool(pool_name)
    attach = Segment.attach
    sweeps: list[bool] = []

    def attach_then_swept(name: str, config: object = None) -> Segment:
        segment = attach(name, config)  # type: ignore[arg-type]
        if not sweeps:  # the pool's first attach; the sweep's own attach is the second
            sweeps.append(True)
            (result,) = cleanup(name)
            assert result.removed, result
        return segment

    monkeypatch.setattr(Segment, "attach", staticmethod(attach_then_swept))
    with pytest.raises(PoolNotFoundError):
        SharedPool.open(pool_name)
    assert not SharedPool.exists(pool_name)
    assert list_semaphores(pool_name) == []

    _idle_pool(pool_name)
    sweeps.clear()
    remade = SharedPool.open(pool_name, SMALL)  # (create_or_attach attaches: swept too)
    try:
        assert remade.segment.is_current() and remade.slots.live() == [remade.slot]
        assert len(list_semaphores(pool_name)) == remade.layout.n_locks
    finally:
        remade.destroy()
    assert list_semaphores(pool_name) == []


def test_destroy_leaves_a_pool_made_anew_under_the_name_alone(pool_name: str) -> None:
    old = SharedPool.open(pool_name, SMALL)
    (result,) = cleanup(pool_name)  # (in use: kept)
    assert not result.removed
    os.unlink(f"/dev/shm/shmkafka.{pool_name}")  # removed under it, then made anew
    new = SharedPool.open(pool_name, SMALL)
    try:
        old.destroy()
        assert new.segment.is_current()
        assert len(list_semaphores(pool_name)) == new.layout.n_locks
    finally:
        new.destroy()
    assert list_semaphores(pool_name) == [] and not SharedPool.exists(pool_name)
