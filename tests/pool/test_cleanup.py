from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys

from shmkafka.pool.cleanup import cleanup
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.segment import list_semaphores
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
