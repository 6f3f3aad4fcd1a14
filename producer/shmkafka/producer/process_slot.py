"""One process's slot in a pool, shared by every producer object of the process.

Rules:
- A process holds one slot of a pool, however many producers it makes: ``ProcessSlot.join``
  returns the process's process slot (made on first use), ``release`` gives it up, and the last
  producer to leave detaches the pool, freeing the slot. So 64 workers with 16 producers
  each take 64 slots, and a producer made per request costs no slot.
- The process slot's one completion thread reads the slot's ring and hands each completion
  to every producer of the process (each resolves the futures it registered; see
  client.py, results.py), then lets each do its periodic work (events, tokens, the Sender check).
  A round that raises (a ``sys.exit()`` in a callback too) is logged, at most once every
  ``LOG_EVERY_S``, and the thread goes on: every result of the process comes through it,
  and a flush without a timeout waits for them.
- The slot's flushing flag is up while any producer of the process flushes, and its
  awaiting flag while any thread of the process waits for a result (``awaiting_results``):
  the Sender then wakes the process at once, where it may hold a wake up to linger.ms
  (at most 50 ms, pool/result_wakes.py); a wait that begins with results in the ring wakes
  the thread itself, since their wake may be held.
- After ``fork`` the child's process slot is its own (keyed by pid): the parent's is never
  used in the child, and the child's producers attach anew.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Protocol

from shmkafka.pool.fastpath import FastAppend, fast_path_for, full_fence
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.errors import LayoutMismatchError
from shmkafka.shm.forksafe import ProcessLock
from shmkafka.shm.rings import Completion, SenderView


class Member(Protocol):
    """What the process slot asks of each producer it serves (client.py's)."""

    def on_completion(self, completion: Completion) -> None:
        """Resolve this producer's records of the completion's batch."""

    def housekeeping(self) -> None:
        """Periodic work: the Sender's events, tokens, the Sender check, liveness."""


RING_WAIT_S = 0.05
LOG_EVERY_S = 10.0  # a completion thread whose rounds keep failing logs at most this often

log = logging.getLogger("shmkafka.producer")

_slots: dict[tuple[str, int], ProcessSlot] = {}
# Re-entrant: a producer dropped without close() is released by a finalizer, which the
# garbage collector may run in a thread that holds these locks already. One per process
# (forksafe.py): a child forked while a thread of the parent held it, by a server that runs
# no at-fork hooks, gets its own.
_registry = ProcessLock(threading.RLock)


def _after_fork_in_child() -> None:
    """The child starts with no process slot (the parent's are the parent's; a child forked
    without this hook never finds them either: they are keyed by pid)."""
    _slots.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def completion_slot() -> ProcessSlot | None:
    """The process slot whose completion thread is running this (a future's callback), or
    None: a wait for a result there must read the ring itself, as nobody else will."""
    pid = os.getpid()
    for (_, owner), slot in list(_slots.items()):  # (no lock: see awaiting_results)
        if owner == pid and slot.on_thread():
            return slot
    return None


def joined_pools() -> list[SharedPool]:
    """The pools this process's producers use now (one each, however many producers)."""
    with _registry:
        return [slot.pool for (_, pid), slot in _slots.items() if pid == os.getpid()]


@contextmanager
def awaiting_results(wait_s: float | None = None) -> Iterator[None]:
    """Around a wait for a result (``get()``, ``poll(timeout)``, ``send_and_wait``): the
    slots of the process say so, and the Sender wakes it at once. A wait of ``wait_s``
    shorter than a slot's hold (a pacing loop's ``poll(0.002)``) leaves that slot's flag
    alone: a held wake comes within linger.ms, which the app accepted for its records, and
    a flag would cost it a wake for every result instead."""
    pid = os.getpid()
    slots = [slot for (_, owner), slot in list(_slots.items()) if owner == pid]  # (no lock)
    with ExitStack() as ends:  # (every slot's end of the wait, even if one raises)
        for slot in slots:
            if slot.awaiting(True, wait_s):
                ends.callback(slot.awaiting, False)
        yield


class RoundFailures:
    """The completion thread's failed rounds, logged with the traceback at most once every
    ``LOG_EVERY_S`` (a round that keeps failing would log twenty lines a second), each line
    with how many failed unlogged since the one before."""

    def __init__(self) -> None:
        self.next_log_at = 0.0
        self.unlogged = 0

    def failed(self) -> None:
        """Called in the ``except`` of a failed round."""
        now = time.monotonic()
        if now < self.next_log_at:
            self.unlogged += 1
            return
        log.exception(
            "the completion thread's round failed; the thread goes on "
            "(%d more failed since the last report)", self.unlogged,
        )  # fmt: skip
        self.next_log_at, self.unlogged = now + LOG_EVERY_S, 0

    def succeeded(self) -> None:
        """Called after a round that did not fail: failures left unlogged are told now."""
        if self.unlogged:
            log.error("the completion thread's rounds failed %d more times, then recovered",
                      self.unlogged)  # fmt: skip
            self.unlogged = 0


class ProcessSlot:
    def __init__(self, pool: SharedPool, reader: FastAppend | None = None) -> None:
        self.pool = pool
        self.users = 0  # producers that joined and have not left
        self._handles: list[Member] = []  # producers the thread serves
        self._lock = threading.RLock()  # (re-entrant: see _registry)
        self._thread: threading.Thread | None = None
        self._detach_at_end = False  # the last producer left while the thread ran
        self._flushers = 0
        self._awaiting = 0  # threads of the process waiting for a result
        self._detached = False
        # completions polled and not yet handed over (only the completion thread uses it)
        self._queue: deque[tuple[Member, Completion]] = deque()
        # the ring read in C (FastAppend.take_results), else rings.poll (its Python twin)
        self._reader = reader

    @classmethod
    def join(cls, name: str, config: PoolConfig | None) -> ProcessSlot:
        """This process's process slot to pool ``name`` (``config``: create it so, or check
        that it is so, as SharedPool.open does; None: attach as it is)."""
        key = (name, os.getpid())
        with _registry:
            found = _slots.get(key)
            if found is not None and not found.pool.segment.is_current():
                found = None  # the pool was removed (and maybe made anew) meanwhile
            if found is None:
                if config is None and not SharedPool.exists(name):
                    config = PoolConfig()
                pool = SharedPool.open(name, config)
                try:
                    reader = fast_path_for(pool, for_sends=False)
                except BaseException:
                    pool.detach()  # (the slot it claimed: nobody else would free it)
                    raise
                found = _slots[key] = cls(pool, reader)
            elif config is not None and config != found.pool.config:
                raise LayoutMismatchError(
                    f"pool {name!r} was created with other settings",
                    config.differences(found.pool.config),
                )
            found.users += 1
            return found

    def release(self, handle: Member, wait_s: float | None) -> None:
        """``handle`` leaves. The last producer out detaches the pool: at once if the thread
        is not running, else the thread does when it ends (within one ring wait), which
        this waits for up to ``wait_s`` seconds (None: no limit) unless called on it."""
        with _registry:
            self.users -= 1
            last = self.users <= 0
            key = (self.pool.name, os.getpid())
            if last and _slots.get(key) is self:
                del _slots[key]
        with self._lock:
            if handle in self._handles:
                self._handles.remove(handle)
            thread = self._thread
            if last and thread is not None:
                self._detach_at_end = True
        if last and thread is None:
            self._detach()
        elif last and thread is not None and threading.current_thread() is not thread:
            thread.join(wait_s)

    # ------------------------------------------------------------------ the thread

    def serve(self, handle: Member) -> None:
        """Hand ``handle`` the slot's completions from now on (starting the thread)."""
        with self._lock:
            if handle not in self._handles:
                self._handles.append(handle)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="shmkafka-completions", daemon=True
                )
                self._thread.start()

    def on_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def pump(self, timeout: float) -> None:
        """Read the ring here, on the completion thread: a callback running on it waits for
        results (a flush or close from a future's callback) that nobody else would read."""
        # (completions an outer delivery took and has not handed over yet are due now)
        self.pool.rings.wait(self.pool.slot, 0.0 if self._queue else timeout)
        self.deliver()

    def pump_here(self, timeout: float) -> None:
        """One round of the completion thread's loop, from a wait on that thread (a callback
        waiting for another record's result): housekeeping (the Sender check, which starts
        a new Sender for one that died; the liveness check), then the ring."""
        with self._lock:
            handles = list(self._handles)
        for handle in handles:
            try:
                handle.housekeeping()
            except Exception:  # (another producer's, maybe: not the waiting callback's)
                log.exception("in the completion thread's round (housekeeping), from a wait")
        self.pump(timeout)

    def deliver(self) -> None:
        """Hand the ring's completions to the producers listed now, not as of before the
        wait: one that began to send meanwhile is served before its record is appended, so
        it is listed by the time its record's completion can have been posted. Polled
        completions wait in one queue, an entry per (producer, completion), handed over in
        order; a nested call (a callback's flush, on this thread) goes on with the same
        queue, so a result the outer call polled is never held back from it, nor from the
        liveness check, which drains through here."""
        completions = self._take_results()
        if completions:
            with self._lock:
                handles = list(self._handles)
            self._queue.extend([(h, c) for c in completions for h in handles])
        queue = self._queue
        while queue:
            handle, completion = queue.popleft()
            handle.on_completion(completion)

    def _loop(self) -> None:
        failures = RoundFailures()
        while True:
            with self._lock:
                handles = list(self._handles)
                if not handles:  # (the check and the exit under one lock: see release)
                    self._thread = None
                    detach = self._detach_at_end
                    break
            try:
                for handle in handles:
                    handle.housekeeping()
                self.pump(RING_WAIT_S)
            except BaseException:  # noqa: BLE001  (every result comes through here: go on)
                failures.failed()
                time.sleep(RING_WAIT_S)  # (a round that fails again does not spin)
            else:
                failures.succeeded()
        if detach:
            self._detach()

    def _take_results(self) -> list[Completion]:
        reader, slot = self._reader, self.pool.slot
        taken = None if reader is None else reader.take_results(slot, Completion, SenderView)
        return self.pool.rings.poll(slot) if taken is None else taken  # (None: damaged)

    def _detach(self) -> None:
        """The reader first: it holds a view of the segment, which cannot close under it."""
        with self._lock:
            self._detached = True  # (a wait for a result may end after: see awaiting)
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self.pool.detach()

    # ------------------------------------------------------------------ flushing

    def flushing(self, on: bool) -> None:
        """A producer of the process starts (True) or ends a flush: the slot's flag is up
        while any does."""
        with self._lock:
            self._flushers += 1 if on else -1
            self.pool.slots.set_flushing(self.pool.slot, self._flushers > 0)

    def awaiting(self, on: bool, wait_s: float | None = None) -> bool:
        """A thread of the process starts (True) or ends a wait for a result: the slot's
        flag is up while any does (not written once the pool is detached). A wait that
        begins with results in the ring wakes our own thread: the Sender reads the flag
        only when it wakes, and may hold the wake of those (pool/result_wakes.py). A start
        whose ``wait_s`` is shorter than the Sender's hold counts for nothing: False."""
        with self._lock:
            if on and self._detached:
                return False  # (the segment may be gone: nothing of it is read)
            if on and wait_s is not None and wait_s < self.pool.wake_hold_s():
                return False
            self._awaiting += 1 if on else -1
            if self._detached:
                return True
            pool = self.pool
            try:
                pool.slots.set_awaiting(pool.slot, self._awaiting > 0)
                if on:
                    full_fence()  # (the flag's store before the ring's read)
                    if pool.rings.pending(pool.slot):
                        pool.rings.wake(pool.slot)
            except BaseException:
                if on:  # (a start that raised did not count: its caller never ends it)
                    self._awaiting -= 1
                raise
            return True
