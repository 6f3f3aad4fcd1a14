from __future__ import annotations

import os
import threading

import pytest

from shmkafka.shm.forksafe import ProcessLock
from tests.forking import held_by_another_thread, in_child, libc_fork


def test_one_process_gets_one_lock_whatever_thread_asks() -> None:
    lock = ProcessLock(threading.Lock)
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(lock.get())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(seen) == 8 and all(s is lock.get() for s in seen)
    with lock:
        assert not lock.get().acquire(blocking=False)
    assert lock.get().acquire(blocking=False)


@pytest.mark.parametrize("hooks", ["os.fork", "libc fork"])
def test_a_child_forked_while_another_thread_holds_it_gets_a_free_lock(hooks: str) -> None:
    lock = ProcessLock(threading.RLock)
    fork = os.fork if hooks == "os.fork" else libc_fork
    with held_by_another_thread(lock):
        assert in_child(fork, lambda: 0 if lock.get().acquire(timeout=5) else 2, 10) == 0
        assert not lock.get().acquire(blocking=False)  # the parent's is still the thread's
