"""The Sender process: election, heartbeat, the loop, and its exit.

Rules:
- Exactly one Sender per pool: it holds the pool's Sender lock (pool/sender_link.py) for its
  whole life (released by the kernel if it dies). A Sender that cannot take it exits at
  once, so any number of producers may start one at the same moment.
- It writes its pid, start time and a heartbeat (monotonic ms) into the pool header every
  round; producers start a new Sender when that pid is dead.
- App processes wake it by posting the pool's Sender semaphore when a batch became full or
  a new one was created; a waker thread turns the semaphore into a readable socket for the
  selector loop.
- Every second it reclaims the slots of dead producers (their pending slabs, their locks).
- It exits once no producer has been attached for ``idle_exit_ms`` and every batch is done.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from types import FrameType

import posix_ipc

from shmkafka.pool.cleanup import remove_orphans
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.durability import Flusher
from shmkafka.pool.sender_link import sender_lock, sender_semaphore
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.clock import monotonic_ms, wall_ms
from shmkafka.protocol.errors import KafkaError
from shmkafka.sender.sender import Sender
from shmkafka.shm import faultpoints, waits
from shmkafka.shm.events import LOG

log = logging.getLogger("shmkafka.sender")

IDLE_EXIT_MS = 5000
HOUSEKEEPING_MS = 100
RECLAIM_MS = 1000
ORPHAN_SWEEP_MS = 300_000  # other pools every process left: looked for at start, then this often


class _Waker:
    """Turns posts of the Sender semaphore into a readable socket for the selector."""

    def __init__(self, sem: posix_ipc.Semaphore) -> None:
        self.sem = sem
        self.read, self.write = socket.socketpair()
        self.read.setblocking(False)
        self.stop = False
        self.thread = threading.Thread(target=self._run, name="shmkafka-sender-waker", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop:
            if not waits.acquire(self.sem, 0.2):
                continue
            try:
                self.write.send(b"\0")
            except OSError:
                return

    def drain(self) -> None:
        try:
            while self.read.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def close(self) -> None:
        self.stop = True
        self.thread.join(1)
        self.read.close()
        self.write.close()


class PoolLogHandler(logging.Handler):
    """The Sender's log lines, into the pool's event ring: every producer process logs them
    to its own ``shmkafka.sender`` logger (a Sender started by an app has no terminal)."""

    def __init__(self, pool: SharedPool, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.pool = pool

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                text += f": {record.exc_info[1]!r}"
            self.pool.events.publish(0, text, kind=LOG, level=record.levelno, wall_ms=wall_ms())
        except Exception:  # noqa: BLE001  (a log line must never stop the Sender)
            self.handleError(record)


def run_sender(
    pool_name: str, config: SenderConfig, idle_exit_ms: int | None = IDLE_EXIT_MS,
    *, quiet_stderr: bool = False,
) -> int:  # fmt: skip
    """Run the Sender of ``pool_name`` until it is idle (``idle_exit_ms``; None: until a
    signal stops it); returns the exit status.
    ``quiet_stderr``: once up, send stderr to /dev/null (a Sender an app started)."""
    pool = SharedPool.open(pool_name)
    try:
        lock = sender_lock(pool)
        if not lock.try_acquire():  # held while we serve (the kernel drops it if we die)
            log.info("another Sender already runs for pool %s", pool_name)
            return 0
        faultpoints.reached("sender.starting")
        handler = PoolLogHandler(pool)
        logging.getLogger("shmkafka").addHandler(handler)
        # A sidecar (cli/sidecar.py) imports the facades for their settings, and the
        # kafka-python one makes every KafkaError a twin of its peer's class: the Sender's
        # errors are its own, and it imports no peer library to raise one.
        twin_class, KafkaError.twin_class = KafkaError.twin_class, None
        try:
            return _serve(pool, config, idle_exit_ms, quiet_stderr)
        except BaseException:
            log.exception("the Sender of pool %s failed", pool_name)
            raise
        finally:
            KafkaError.twin_class = twin_class  # (a test may run a Sender in its process)
            logging.getLogger("shmkafka").removeHandler(handler)
            lock.release()
    finally:
        pool.detach()


def _serve(
    pool: SharedPool, config: SenderConfig, idle_exit_ms: int | None, quiet_stderr: bool
) -> int:
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del signum, frame  # (no logging here: the handler may interrupt a log line's lock)
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    pool.set_sender(pool.pid, pool.started, monotonic_ms())
    log.info("Sender of pool %s started (pid %d)", pool.name, pool.pid)
    if quiet_stderr:
        # Started by an app: our stderr was a file it reads only if we die at start; from
        # now on our lines reach the apps through the pool's event ring instead.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
    sender = Sender(pool, config)
    flusher = None
    if pool.committer is not None and pool.config.pool_durability == "flush":
        flusher = Flusher(pool.committer, pool.config.pool_flush_ms)
        flusher.start()
    waker = _Waker(sender_semaphore(pool.name))
    sender.network.add_wakeup(waker.read, waker.drain)
    idle_since: int | None = None
    announced = False
    next_housekeeping = next_reclaim = next_orphan_sweep = 0
    try:
        while True:
            now = monotonic_ms()
            sender.run_once(now)
            if now < next_housekeeping and not stopping.is_set():
                continue
            next_housekeeping = now + HOUSEKEEPING_MS  # heartbeat and exit checks
            pool.set_sender(pool.pid, pool.started, now)
            if now >= next_reclaim:  # what dead producers held (slots, pending slabs) comes back
                next_reclaim = now + RECLAIM_MS
                pool.reclaim_dead()
            if now >= next_orphan_sweep:
                next_orphan_sweep = now + ORPHAN_SWEEP_MS
                _remove_orphans(pool.name)
            busy = sender.busy()
            if stopping.is_set() and not announced:
                announced = True
                log.info("stopping on a signal: finishing what is queued")
            if stopping.is_set() and not busy:
                pool.unlink_if_unused()
                log.info("stopped by signal after sending everything")
                return 0
            if _has_producers(pool) or busy:
                idle_since = None
                continue
            idle_since = idle_since or now
            if idle_exit_ms is None:
                continue  # (a sidecar: it serves until stopped)
            if now - idle_since >= idle_exit_ms and pool.unlink_if_unused():
                log.info("no producer attached and nothing left to send: pool removed, exiting")
                return 0
    finally:
        if flusher is not None:
            flusher.stop()
        waker.close()
        sender.close()
        pool.set_sender(0, 0, monotonic_ms())


def _remove_orphans(keep: str) -> None:
    """Pools of this user that every process left, holding no record (a whole container
    stopped, an OOM kill): removed, at start and every ``ORPHAN_SWEEP_MS``."""
    try:
        for name in remove_orphans(keep):
            log.info("removed pool %s: no live process and no record left in it", name)
    except Exception:
        log.debug("looking for orphaned pools failed", exc_info=True)


def _has_producers(pool: SharedPool) -> bool:
    return any(slot != pool.slot for slot in pool.slots.live())
