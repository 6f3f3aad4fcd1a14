"""Crash-safe locks: posix_ipc semaphores plus an owner record and per-process intent bytes.

A POSIX semaphore is not robust: a process killed while holding one leaves it taken. So:

Rules:
- Acquire: set my intent byte for the lock, take the semaphore (timed), record myself as
  owner (slot, pid, start time). Release: clear the owner record, post the semaphore, clear
  the intent byte. Intent stays set for the whole hold, so a process that dies anywhere
  between "took the semaphore" and "posted it" leaves a trace.
- A waiter whose timed wait expires checks the holder. If the recorded owner is dead, or no
  owner is recorded, the semaphore is still taken and a dead process has its intent byte set
  (stable for ``ORPHAN_GRACE_S``, to let a live holder finish recording itself), the waiter
  takes the lock over: under the recovery lock it re-checks, records itself as owner and
  returns ``recovered=True``. The semaphore count never changes hands, so exactly one
  process holds the lock afterwards.
- Structures guarded by a lock stay valid when a holder dies because writers follow
  publish-last (see layout.py); a recovered lock needs no repair of its own.
- Within one process, a thread lock per pool lock serialises the threads, so a process's
  intent byte for a lock has one writer at a time.
- The recovery lock is a kernel record lock (``lockf``) on a byte of the segment file: the
  kernel releases it when its holder dies, and a forked child does not inherit it.
- Every acquire is timed, the kernel record locks' too (polled): a holder that is alive but
  never releases (stopped, deadlocked) raises ``LockTimeoutError`` after ``timeout`` seconds
  instead of hanging forever.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import posix_ipc

from shmkafka.shm import lockdep, waits
from shmkafka.shm.errors import LockTimeoutError
from shmkafka.shm.forksafe import ProcessLocal
from shmkafka.shm.layout import LOCK, RECOVERY_BYTE, Layout
from shmkafka.shm.procs import is_alive
from shmkafka.shm.segment import Segment, semaphore_name

CHECK_INTERVAL_S = 0.05
ORPHAN_GRACE_S = 2.0
DEFAULT_TIMEOUT_S = 60.0

# (slot, pid, start) of every process slot, for the orphan check; given by the slot table.
SlotLister = Callable[[], list[tuple[int, int, int]]]


SPIN_TRIES = 20
# a busy kernel record lock is tried again after this pause, doubled up to the maximum
KERNEL_POLL_MIN_S = 0.0005
KERNEL_POLL_MAX_S = 0.005


def _spin(sem: posix_ipc.Semaphore) -> bool:
    """Try the semaphore a few times, yielding the CPU in between: critical sections last
    microseconds, and a blocking wait costs a context switch."""
    for _ in range(SPIN_TRIES):
        try:
            sem.acquire(0)
            return True
        except posix_ipc.BusyError:
            os.sched_yield()  # (time.sleep(0) arms a timer: a clock_nanosleep each try)
    return False


_FLOCK = struct.Struct("@hhqqi4x")  # struct flock: type, whence, start, len, pid


class KernelLock:
    """A kernel record lock on one byte of the segment file, released by the kernel when the
    holding process dies. Record locks belong to a process, so a thread lock serialises the
    threads of one process: one per process id (forksafe.py), since a forked child shares
    the parent's file but must not inherit a thread lock another thread of it held."""

    # this process's, by (device, inode, byte): a descriptor number is reused once its file
    # is closed
    _threads: ProcessLocal[dict[tuple[int, int, int], threading.Lock]] = ProcessLocal(dict)

    def __init__(self, fd: int, byte: int, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.fd = fd
        self.byte = byte
        self.timeout = timeout
        self._class = lockdep.KERNEL_CLASSES.get(byte, "recovery")
        st = os.fstat(fd)
        # (setdefault is atomic under the GIL: no lock guards the table, see forksafe.py)
        threads = KernelLock._threads.get()
        self._thread_lock = threads.setdefault((st.st_dev, st.st_ino, byte), threading.Lock())

    @classmethod
    def for_segment(cls, segment: Segment, byte: int) -> KernelLock:
        return cls(segment.fd, byte)

    def __enter__(self) -> None:
        """Take the lock within ``timeout`` seconds, or raise ``LockTimeoutError``. The kernel
        has no timed wait for a record lock, so a busy one is polled (they are held for
        microseconds to milliseconds: a slot claimed, a token written)."""
        if lockdep.ENABLED:
            lockdep.acquiring(self._class, self.byte)
        deadline = time.monotonic() + self.timeout
        if not self._thread_lock.acquire(timeout=self.timeout):
            self._forget()
            raise LockTimeoutError(self._busy("by another thread of this process"))
        try:
            pause = KERNEL_POLL_MIN_S
            while not self._try_lockf():
                if time.monotonic() + pause > deadline:
                    raise LockTimeoutError(self._busy("by another process"))
                time.sleep(pause)
                pause = min(KERNEL_POLL_MAX_S, 2 * pause)
        except BaseException:
            self._thread_lock.release()
            self._forget()
            raise

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _try_lockf(self) -> bool:
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, self.byte, os.SEEK_SET)
            return True
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise

    def _busy(self, by: str) -> str:
        return f"the {self._class} lock (byte {self.byte}) still held {by} after {self.timeout} s"

    def _forget(self) -> None:
        if lockdep.ENABLED:
            lockdep.released(self._class, self.byte)

    def try_acquire(self) -> bool:
        """Take the lock if nobody (no process, no other thread of ours) holds it."""
        if lockdep.ENABLED:
            lockdep.acquiring(self._class, self.byte)
        taken = False
        try:
            if not self._thread_lock.acquire(blocking=False):
                return False
            try:
                taken = self._try_lockf()
            finally:
                if not taken:
                    self._thread_lock.release()
            return taken
        finally:
            if not taken:
                self._forget()

    def release(self) -> None:
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, self.byte, os.SEEK_SET)
        finally:
            self._thread_lock.release()
            self._forget()

    def held_by_another(self) -> bool:
        """True if another process holds the lock, without taking it (``F_GETLK``). The
        kernel answers for every holder, whatever its PID namespace."""
        query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, self.byte, 1, 0)
        answer = fcntl.fcntl(self.fd, fcntl.F_GETLK, query)
        return bool(_FLOCK.unpack(answer)[0] != fcntl.F_UNLCK)


class LockSet:
    """The pool's locks, as seen from one attached process (identified by its slot)."""

    def __init__(
        self, segment: Segment, slot: int, identity: tuple[int, int], slots: SlotLister
    ) -> None:
        self.segment = segment
        self.layout: Layout = segment.layout
        self.slot = slot
        self.pid, self.started = identity
        self._slots = slots
        self._sems = [
            posix_ipc.Semaphore(
                semaphore_name(segment.pool, "l", i), posix_ipc.O_CREAT, 0o600, initial_value=1
            )
            for i in range(self.layout.n_locks)
        ]
        self._local = [threading.Lock() for _ in range(self.layout.n_locks)]
        self._intent_at = [self.layout.intent_at(slot, i) for i in range(self.layout.n_locks)]
        self._owner_at = [self.layout.lock_at(i) for i in range(self.layout.n_locks)]
        self.recoveries = 0

    def close(self) -> None:
        for sem in self._sems:
            sem.close()

    # ------------------------------------------------------------------ acquire / release

    def acquire(self, index: int, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
        """Take lock ``index``; True if it was recovered from a dead holder."""
        if lockdep.ENABLED:
            lockdep.acquiring(lockdep.pool_lock_class(index), index)
        local = self._local[index]
        if not local.acquire(False) and not local.acquire(timeout=timeout):
            self._forget(index)
            raise LockTimeoutError(f"lock {index} busy in this process for {timeout} s")
        buf = self.segment.buf
        intent = self._intent_at[index]
        buf[intent] = 1
        sem = self._sems[index]
        recovered = False
        if not _spin(sem):
            try:
                recovered = self._wait(index, sem, timeout)
            except BaseException:
                buf[intent] = 0
                local.release()
                self._forget(index)
                raise
        LOCK.pack_into(buf, self._owner_at[index], self.slot, self.pid, self.started)
        return recovered

    def release(self, index: int) -> None:
        buf = self.segment.buf
        LOCK.pack_into(buf, self._owner_at[index], -1, 0, 0)
        self._sems[index].release()
        buf[self._intent_at[index]] = 0
        self._local[index].release()
        self._forget(index)

    @staticmethod
    def _forget(index: int) -> None:
        if lockdep.ENABLED:
            lockdep.released(lockdep.pool_lock_class(index), index)

    @contextmanager
    def held(self, index: int, timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[bool]:
        recovered = self.acquire(index, timeout)
        try:
            yield recovered
        finally:
            self.release(index)

    def _wait(self, index: int, sem: posix_ipc.Semaphore, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        orphan_since: float | None = None
        while True:
            if waits.acquire(sem, CHECK_INTERVAL_S):
                return False
            now = time.monotonic()
            verdict = self._holder_verdict(index, sem)
            if verdict == "dead":
                if self._take_over(index, sem, verdict):
                    return True
            elif verdict == "orphan":
                orphan_since = orphan_since or now
                if now - orphan_since >= ORPHAN_GRACE_S and self._take_over(index, sem, verdict):
                    return True
            else:
                orphan_since = None
            if now > deadline:
                owner = LOCK.unpack_from(self.segment.buf, self.layout.lock_at(index))
                raise LockTimeoutError(
                    f"lock {index} of pool {self.segment.pool!r} still held after {timeout} s "
                    f"by pid {owner[1]} (alive)"
                )

    def _holder_verdict(self, index: int, sem: posix_ipc.Semaphore) -> str:
        """'dead' (recorded owner died), 'orphan' (no owner, a dead process meant to hold
        it), or 'live'."""
        _, pid, started = LOCK.unpack_from(self.segment.buf, self.layout.lock_at(index))
        if pid:
            return "live" if is_alive(pid, started) else "dead"
        if sem.value != 0:
            return "live"  # free right now: the next acquire takes it
        buf = self.segment.buf
        for slot, slot_pid, slot_start in self._slots():
            intends = slot != self.slot and buf[self.layout.intent_at(slot, index)]
            if intends and not is_alive(slot_pid, slot_start):
                return "orphan"
        return "live"

    def _take_over(self, index: int, sem: posix_ipc.Semaphore, verdict: str) -> bool:
        with self._recovery():
            if self._holder_verdict(index, sem) != verdict:
                return False
            buf = self.segment.buf
            for slot, slot_pid, slot_start in self._slots():
                if slot != self.slot and not is_alive(slot_pid, slot_start):
                    buf[self.layout.intent_at(slot, index)] = 0
            LOCK.pack_into(buf, self.layout.lock_at(index), self.slot, self.pid, self.started)
            self.recoveries += 1
            return True

    def _recovery(self) -> KernelLock:
        return KernelLock.for_segment(self.segment, RECOVERY_BYTE)

    # ------------------------------------------------------------------ inspection

    def owner(self, index: int) -> tuple[int, int, int]:
        slot, pid, started = LOCK.unpack_from(self.segment.buf, self.layout.lock_at(index))
        return slot, pid, started

    def value(self, index: int) -> int:
        value: int = self._sems[index].value
        return value
