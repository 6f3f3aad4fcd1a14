from __future__ import annotations

import os
import threading

import pytest

from shmkafka.producer import forks
from tests.forking import ChildHung, held_by_another_thread, in_child, libc_fork


def test_the_hooks_are_known_to_have_run_here_and_in_an_os_fork_child() -> None:
    assert not forks.hooks_skipped()
    assert not forks.run_skipped_hooks()
    assert in_child(os.fork, lambda: 0 if not forks.hooks_skipped() else 1, 20) == 0


def test_a_libc_fork_child_runs_them_once() -> None:
    def child() -> int:
        if not forks.hooks_skipped():
            return 1
        ran = forks.run_skipped_hooks()
        return 0 if ran and not forks.hooks_skipped() and not forks.run_skipped_hooks() else 2

    assert in_child(libc_fork, child, 20) == 0


@pytest.mark.parametrize("run_hooks", [True, False])
def test_a_thread_starts_in_a_child_forked_while_another_held_threadings_lock(
    run_hooks: bool,
) -> None:
    """A thread of the parent holds threading's own lock (``_active_limbo_lock``, taken as a
    thread starts or ends) at the fork: the child's ``Thread.start`` waits for it for good,
    unless the hooks renew it. Without them the child hangs (the case this module is for)."""

    def child() -> int:
        if run_hooks and not (forks.run_skipped_hooks() and threading.active_count() == 1):
            return 3  # (the hooks forget the parent's threads)
        started = threading.Event()
        threading.Thread(target=started.set, daemon=True).start()
        return 0 if started.wait(5) else 2

    with held_by_another_thread(threading._active_limbo_lock):  # type: ignore[attr-defined]
        if run_hooks:
            assert in_child(libc_fork, child, 20) == 0
        else:
            with pytest.raises(ChildHung, match=r"Thread\.start"):
                in_child(libc_fork, child, 5)
