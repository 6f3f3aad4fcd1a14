"""The lock order, written down once, and its validator (as the kernel's lockdep).

Every lock of a pool has a class, and the classes one order. A thread may take a lock only
when every lock it already holds comes before it in this order (outermost first):

    sender       kernel lock, SENDER_BYTE: held by the running Sender for its whole life
    spawn        kernel lock, SPAWN_BYTE: a producer checking for a Sender and starting one
    txn_board    kernel lock, TXN_BYTE: a producer posting on the transaction board
    token_board  kernel lock, TOKEN_BYTE: a producer answering the OAUTHBEARER board
    credentials  kernel lock, CREDENTIALS_BYTE: a producer writing the SASL credentials
    commit       kernel lock, COMMIT_BYTE: a committer of a durable pool writing commit
                 records and syncing (an app's group commit, the flusher, the Sender
                 before it sends or frees)
    slot_table   kernel lock, SLOT_TABLE_BYTE: claiming and freeing process slots
    directory    pool lock 1: the topic directory's writer
    stripe       pool locks 2..: the partition deques' stripes; several are taken in
                 ascending index only (retiring a topic takes its stripes)
    pool         pool lock 0: BufferPool, the wait queue, pending allocations; taken under
                 a stripe when an appender opens a batch (C) and when a dead process's
                 allocation is reclaimed
    recovery     kernel lock, RECOVERY_BYTE: a waiter taking over a dead holder's lock; a
                 leaf, nothing is taken under it

The completion rings, the BufferPool's waiter semaphores and the Sender's wake semaphore are
not locks: one side posts, the other waits, and nobody holds them. A thread lock that only
serialises the threads of one process (LockSet's, KernelLock's, BufferPool's) is taken with
its pool lock and needs no class of its own.

Rules:
- Off unless ``SHMKAFKA_LOCKDEP=1``; then each thread keeps the stack of the locks it holds,
  Python's and C's (the C append reports its takes and drops here, naming its call site).
- A take against the order raises ``LockOrderError`` at once, before it waits, naming both
  locks and where each was taken. A try-lock is checked like any other take: it would not
  deadlock, but the order is one order, for every path. The report is also appended to the
  file named by ``SHMKAFKA_LOCKDEP_REPORT``, so a violation in a Sender or a worker process,
  whose exception nobody reads, still fails the test run.
- A forked child holds nothing: its stack starts empty.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from dataclasses import dataclass
from types import FrameType

from shmkafka.shm.errors import LockOrderError
from shmkafka.shm.layout import (
    COMMIT_BYTE,
    CREDENTIALS_BYTE,
    DIRECTORY_LOCK,
    POOL_LOCK,
    RECOVERY_BYTE,
    SENDER_BYTE,
    SLOT_TABLE_BYTE,
    SPAWN_BYTE,
    TOKEN_BYTE,
    TXN_BYTE,
)

ENABLED = os.environ.get("SHMKAFKA_LOCKDEP") == "1"
REPORT = os.environ.get("SHMKAFKA_LOCKDEP_REPORT", "")

ORDER = (
    "sender",
    "spawn",
    "txn_board",
    "token_board",
    "credentials",
    "commit",
    "slot_table",
    "directory",
    "stripe",
    "pool",
    "recovery",
)
RANK = {name: rank for rank, name in enumerate(ORDER)}
NESTABLE = frozenset({"stripe"})  # several at once, in ascending index

KERNEL_CLASSES = {
    SENDER_BYTE: "sender",
    SPAWN_BYTE: "spawn",
    TXN_BYTE: "txn_board",
    TOKEN_BYTE: "token_board",
    CREDENTIALS_BYTE: "credentials",
    COMMIT_BYTE: "commit",
    SLOT_TABLE_BYTE: "slot_table",
    RECOVERY_BYTE: "recovery",
}


def pool_lock_class(index: int) -> str:
    """The class of pool lock ``index`` (layout.py's Region 3)."""
    if index == POOL_LOCK:
        return "pool"
    if index == DIRECTORY_LOCK:
        return "directory"
    return "stripe"


@dataclass
class Held:
    name: str
    instance: int
    frame: FrameType | None  # the Python frame that took it (formatted only on a report)
    line: int  # the frame's line at the take (the frame runs on meanwhile)
    site: str  # a C call site, or ""

    def where(self) -> str:
        c_site = f"  C: {self.site}\n" if self.site else ""
        if self.frame is None:
            return c_site + "  (no Python frame)\n"
        code = self.frame.f_code
        return (
            c_site
            + "".join(traceback.format_stack(self.frame.f_back, limit=10))
            + f'  File "{code.co_filename}", line {self.line}, in {code.co_name}\n'
        )


_local = threading.local()


def _held() -> list[Held]:
    held: list[Held] | None = getattr(_local, "held", None)
    if held is None:
        held = _local.held = []
    return held


def _forget_in_child() -> None:
    _local.held = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


_PLUMBING = ("shm/locks.py", "shm/lockdep.py", "contextlib.py")


def _taker(frame: FrameType | None) -> FrameType | None:
    """The first frame outside the lock code itself: the one that asked for the lock."""
    while frame is not None and frame.f_code.co_filename.endswith(_PLUMBING):
        frame = frame.f_back
    return frame


def _against(held: Held, name: str, instance: int) -> bool:
    if held.name == name:
        return name not in NESTABLE or instance <= held.instance
    return RANK[held.name] > RANK[name]


def acquiring(name: str, instance: int, site: str = "") -> None:
    """Record a take of lock ``(name, instance)`` by this thread, before it waits; raise
    ``LockOrderError`` if a lock it holds comes after it in the order."""
    stack = _held()
    frame = _taker(sys._getframe(1))
    taking = Held(name, instance, frame, frame.f_lineno if frame is not None else 0, site)
    for held in stack:
        if _against(held, name, instance):
            _violation(held, taking)
    stack.append(taking)


def released(name: str, instance: int) -> None:
    """Forget this thread's most recent take of ``(name, instance)`` (a failed take too)."""
    stack = _held()
    for i in range(len(stack) - 1, -1, -1):
        if stack[i].name == name and stack[i].instance == instance:
            del stack[i]
            return


def holding() -> list[tuple[str, int]]:
    """The locks this thread holds, oldest first."""
    return [(h.name, h.instance) for h in _held()]


def _violation(held: Held, taking: Held) -> None:
    message = (
        f"lock order violated: taking {taking.name} lock {taking.instance} while holding "
        f"{held.name} lock {held.instance} (the order: {' -> '.join(ORDER)}; "
        f"shm/lockdep.py)\n{held.name} lock {held.instance} was taken at:\n{held.where()}"
        f"{taking.name} lock {taking.instance} is being taken at:\n{taking.where()}"
    )
    if REPORT:
        with open(REPORT, "a", encoding="utf-8") as report:
            report.write(f"pid {os.getpid()}: {message}\n")
    raise LockOrderError(
        message, held=(held.name, held.instance), taking=(taking.name, taking.instance)
    )


class PoolLockHook:
    """What the C append calls when lockdep is on (``FastAppend(..., lockdep=)``): it names
    the pool lock by index and its call site in C."""

    def acquiring(self, index: int, site: str) -> None:
        acquiring(pool_lock_class(index), index, site)

    def released(self, index: int) -> None:
        released(pool_lock_class(index), index)
