"""Forks in tests: a child's outcome is its exit status, waited for within a bound; a child
that hangs is killed, and where it hung is told (py-spy, a test dependency)."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager


class ChildHung(AssertionError):
    """The child did not end within its bound: killed. The message holds its stacks."""


def libc_fork() -> int:
    """libc's fork() called directly, holding the GIL (as an embedding server does): none of
    Python's at-fork hooks run."""
    return int(ctypes.PyDLL(None).fork())


def in_child(fork: Callable[[], int], child: Callable[[], int], bound_s: float) -> int:
    """The exit status of ``child()`` run in a child that ``fork`` makes (an exception: 99)."""
    pid = fork()
    if pid == 0:
        status = 99
        try:
            status = child()
        finally:
            os._exit(status)
    return wait_child(pid, bound_s)


def wait_child(pid: int, bound_s: float) -> int:
    """The child's exit status, waited for up to ``bound_s``; then ChildHung."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    where = stacks(pid)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise ChildHung(f"the forked child did not end within {bound_s} s: killed. Where it was:\n"
                    f"{where}\nand its parent:\n{stacks(os.getpid())}")  # fmt: skip


def stacks(pid: int) -> str:
    """Every thread's Python stack in process ``pid``."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    try:
        done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(py-spy: {exc})"
    return done.stdout + done.stderr


@contextmanager
def held_by_another_thread(lock: AbstractContextManager[object]) -> Iterator[threading.Event]:
    """Another thread holds ``lock`` (as the completion thread may, queuing reports or
    claiming a slot) until the caller sets the event it is given, or leaves."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(10)
        yield release
    finally:
        release.set()
        thread.join(10)


def releasing(fork: Callable[[], int], release: threading.Event) -> Callable[[], int]:
    """``fork``, after which the parent lets go of the held lock (the child must not wait
    on the parent's hold, only on a copy of it)."""

    def forked() -> int:
        pid = fork()
        if pid:
            release.set()
        return pid

    return forked
