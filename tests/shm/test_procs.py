"""Process facts read from /proc (shm/procs.py), and the kernel lock query
(``KernelLock.held_by_another``) the PID-namespace checks rely on, compared with what the
kernel and the clock say."""

from __future__ import annotations

import multiprocessing as mp
import subprocess
import sys
import time

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.locks import KernelLock
from shmkafka.shm.procs import age_seconds, cpu_seconds


def test_age_and_cpu_of_a_process() -> None:
    before = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.process_time()\n"
                              "while time.process_time() - t < 0.3: pass\nprint(1, flush=True)\n"
                              "input()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == b"1\n"  # 0.3 s of CPU used
        age, cpu = age_seconds(child.pid), cpu_seconds(child.pid)
        # (/proc/uptime and the CPU ticks both count in 10 ms steps: one step each way;
        # the age is their difference in floats: 0.2999999999992724 on one CI run)
        assert age is not None and 0.29 <= age <= time.monotonic() - before + 0.05
        assert cpu is not None and 0.29 <= cpu <= age + 0.02
    finally:
        child.communicate(b"\n", timeout=10)
    assert age_seconds(child.pid) is None and cpu_seconds(child.pid) is None


def _hold(pool: str, held: object, release: object) -> None:
    handle = SharedPool.open(pool)
    lock = KernelLock.for_segment(handle.segment, 2)
    assert lock.try_acquire()
    held.set()  # type: ignore[attr-defined]
    release.wait(30)  # type: ignore[attr-defined]
    lock.release()
    handle.detach()


def test_held_by_another_sees_other_processes_only(pool: SharedPool) -> None:
    lock = KernelLock.for_segment(pool.segment, 2)
    assert not lock.held_by_another()
    assert lock.try_acquire()
    assert not lock.held_by_another()  # our own lock is not another's
    lock.release()
    ctx = mp.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold, args=(pool.name, held, release))
    child.start()
    try:
        assert held.wait(30)
        assert lock.held_by_another()
    finally:
        release.set()
        child.join(30)
    assert child.exitcode == 0 and not lock.held_by_another()
