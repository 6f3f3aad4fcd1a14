"""A minimal producer over the shared pool: attach, send, futures — what the Sender's end-to-end
tests need. The drop-in ``KafkaProducer``/``Producer`` APIs build on it (next issue).

Rules:
- ``send`` appends into the pool and returns a future; the completion thread resolves it
  from this process's completion ring. A completion may arrive before ``send`` registered
  its future (the Sender is fast): the last completion of each batch id is kept in
  ``_done``, and a registration that finds its (batch id, generation) there resolves at once.
- The producer makes sure a live Sender serves the pool: if the one recorded in the header
  is dead, it starts one (``python -m shmkafka.sender --pool NAME``) in its own session,
  under a kernel lock so concurrent producers start at most one between them.
- Keyed records go to ``(murmur2(key) & 0x7fffffff) % partitions`` as in the Java client;
  keyless ones stick to a partition until a new batch is created there (KIP-480 style).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from shmkafka.producer.accumulator import AppendResult, RecordAccumulator
from shmkafka.protocol.errors import KafkaError, RetriableError, error_for
from shmkafka.protocol.hashing import murmur2_partition
from shmkafka.protocol.records import HeaderInput
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.layout import ALL_DELTAS, DIRECTORY_LOCK
from shmkafka.shm.pool import SharedPool
from shmkafka.shm.rings import Completion

DELIVERY_TIMEOUT = -100  # the Sender's local completion code (see sender.py)
SPAWN_BYTE = 3
SENDER_START_WAIT_S = 10.0
SENDER_CHECK_S = 0.2
SENDER_STALL_MS = 10_000
log = logging.getLogger("shmkafka.producer")


class KafkaTimeoutError(RetriableError):
    """Metadata or delivery did not complete in time."""


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    log_start_offset: int
    serialized_key_size: int
    serialized_value_size: int


class Future:
    """A send's result: ``get(timeout)`` returns RecordMetadata or raises the error.

    Futures are made on every send, so they are light: no lock or event of their own; the
    waits go through their producer's one condition variable."""

    __slots__ = ("_callbacks", "_completion", "_cond", "_sent", "_value", "exception", "is_done")

    def __init__(self, cond: threading.Condition) -> None:
        self._cond = cond
        self.is_done = False
        self._value: RecordMetadata | None = None
        self._sent: _Sent | None = None
        self._completion: Completion | None = None
        self.exception: BaseException | None = None
        self._callbacks: list[Callable[[Future], None]] | None = None

    @property
    def value(self) -> RecordMetadata | None:
        """Built on first use: most futures are never looked at."""
        if self._value is None and self._completion is not None and self._sent is not None:
            c, item = self._completion, self._sent
            offset = c.offset_of(item.offset_delta)
            timestamp = c.log_append_time if c.log_append_time >= 0 else item.timestamp
            self._value = RecordMetadata(
                item.topic, item.partition, offset, timestamp, c.log_start_offset,
                item.key_size, item.value_size,
            )  # fmt: skip
        return self._value

    def succeeded(self) -> bool:
        return self.is_done and self.exception is None

    def failed(self) -> bool:
        return self.is_done and self.exception is not None

    def _complete(self, completion: Completion, sent: _Sent, error: BaseException | None) -> None:
        """Called by the completion thread with the condition held."""
        self._completion, self._sent, self.exception = completion, sent, error
        self.is_done = True

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            try:
                callback(self)
            except Exception:
                log.exception("a future's callback raised")

    def add_done_callback(self, callback: Callable[[Future], None]) -> None:
        with self._cond:
            if not self.is_done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        callback(self)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        with self._cond:
            if not self._cond.wait_for(lambda: self.is_done, timeout):
                raise KafkaTimeoutError(f"no result within {timeout} s")
        if self.exception is not None:
            raise self.exception
        value = self.value
        assert value is not None
        return value


class _Sent(NamedTuple):
    future: Future
    topic: str
    partition: int
    offset_delta: int
    timestamp: int
    key_size: int
    value_size: int


def _spawn_detached(command: list[str]) -> int:
    """Start a process in its own session with stdio on /dev/null; returns its pid."""
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        actions = [(os.POSIX_SPAWN_DUP2, devnull, fd) for fd in (0, 1, 2)]
        return os.posix_spawn(command[0], command, os.environ, file_actions=actions, setsid=True)
    finally:
        os.close(devnull)


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class ProducerHandle:
    def __init__(
        self,
        pool: str,
        sender_config: dict[str, Any],
        *,
        pool_config: PoolConfig | None = None,
        max_block_ms: int = 60_000,
        start_sender: bool = True,
        sender_log: str | None = None,
        sender_idle_exit_ms: int | None = None,
        sender_stall_ms: int = SENDER_STALL_MS,
        fast_path: bool = True,
    ) -> None:
        self.pool = SharedPool.open(pool, pool_config or PoolConfig())
        self.accumulator = RecordAccumulator(
            self.pool, max_block_ms=max_block_ms, fast_path=fast_path
        )
        self.max_block_ms = max_block_ms
        self.sender_config = sender_config
        self.sender_log = sender_log
        self.sender_idle_exit_ms = sender_idle_exit_ms
        self.sender_stall_ms = sender_stall_ms
        from shmkafka.sender.service import sender_semaphore  # the Sender's doorbell

        self._sender_sem = sender_semaphore(pool)
        self._spawn_lock = threading.Lock()
        self._spawned: list[int] = []
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting: dict[tuple[int, int], list[_Sent]] = {}
        # batch id → the completions of its latest generation (several if it was split)
        self._done: dict[int, list[Completion]] = {}
        self._sticky: dict[str, int] = {}
        self._closed = False
        self._outstanding = 0
        self._idle = self._cond
        self.start_sender = start_sender
        if start_sender:
            self.ensure_sender()
        self._thread = threading.Thread(
            target=self._complete_loop, name="shmkafka-completions", daemon=True
        )
        self._thread.start()

    # ------------------------------------------------------------------ the Sender

    def ensure_sender(self) -> None:
        """Start the pool's Sender unless a live one is recorded."""
        with self._spawn_lock:  # record locks do not exclude threads of one process
            self._ensure_sender()

    def _ensure_sender(self) -> None:
        from shmkafka.sender.service import sender_alive

        if sender_alive(self.pool):
            if not self._sender_stalled():
                return
            self._stop_stalled_sender()
        fcntl.lockf(self.pool.segment.fd, fcntl.LOCK_EX, 1, SPAWN_BYTE, os.SEEK_SET)
        try:
            if sender_alive(self.pool):
                return
            command = [
                sys.executable, "-m", "shmkafka.sender", "--pool", self.pool.name,
                "--config-json", json.dumps(self.sender_config),
            ]  # fmt: skip
            if self.sender_log:
                command += ["--log-file", self.sender_log]
            if self.sender_idle_exit_ms is not None:
                command += ["--idle-exit-ms", str(self.sender_idle_exit_ms)]
            self._spawned.append(_spawn_detached(command))
            deadline = time.monotonic() + SENDER_START_WAIT_S
            while not sender_alive(self.pool):
                if time.monotonic() > deadline:
                    raise KafkaTimeoutError("the Sender did not start within 10 s")
                time.sleep(0.01)
        finally:
            fcntl.lockf(self.pool.segment.fd, fcntl.LOCK_UN, 1, SPAWN_BYTE, os.SEEK_SET)

    # ------------------------------------------------------------------ send

    def partitions_for(self, topic: str) -> int:
        entries = self.pool.directory.partitions(topic)
        if entries is not None:
            return len(entries)
        with self.pool.locks.held(DIRECTORY_LOCK):
            self.pool.directory.request_topic(topic)
        self._sender_sem.release()
        deadline = time.monotonic() + self.max_block_ms / 1000
        while (entries := self.pool.directory.partitions(topic)) is None:
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(
                    f"topic {topic!r} not present in metadata after {self.max_block_ms} ms"
                )
            time.sleep(0.005)
        return len(entries)

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Sequence[HeaderInput] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Future:
        if self._closed:
            raise KafkaError("the producer is closed")
        entries = self.pool.directory.snapshot().topics.get(topic)
        if entries is None:
            self.partitions_for(topic)
            entries = self.pool.directory.snapshot().topics[topic]
        count = len(entries)
        if partition is None:
            if key is not None:
                partition = murmur2_partition(key, count)
            else:
                partition = self._sticky.setdefault(topic, random.randrange(count))
        timestamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        if not 0 <= partition < count:
            raise KafkaError(f"partition {partition} of {topic!r} does not exist ({count})")
        result = self.accumulator.append_to(
            entries[partition].deque_id, timestamp, key, value, headers, now_ms=now_ms()
        )
        if key is None and result.new_batch_created:
            self._sticky[topic] = random.randrange(count)
        future = Future(self._cond)
        sent = _Sent(
            future, topic, partition, result.offset_delta, timestamp,
            len(key) if key is not None else -1, len(value) if value is not None else -1,
        )  # fmt: skip
        self._register(result, sent)
        if result.batch_is_full or result.new_batch_created:
            self._wake_sender()
        return future

    def _wake_sender(self) -> None:
        if self._sender_sem.value < 1:
            self._sender_sem.release()

    def _sender_stalled(self) -> bool:
        heartbeat = self.pool.sender()[2]
        return now_ms() - heartbeat > self.sender_stall_ms

    def _stop_stalled_sender(self) -> None:
        """A Sender alive but without a heartbeat for ``sender_stall_ms`` (stopped, hung) is
        killed so a new one can take over; the new one re-sends what it had in flight."""
        pid, _, heartbeat = self.pool.sender()
        log.warning(
            "the Sender (pid %d) gave no heartbeat for %d ms: replacing it",
            pid,
            now_ms() - heartbeat,
        )
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        from shmkafka.sender.service import sender_alive

        deadline = time.monotonic() + 5
        while sender_alive(self.pool) and time.monotonic() < deadline:
            time.sleep(0.01)

    def _check_sender(self) -> None:
        """A dead Sender is replaced; the new one re-sends what the old one had in flight."""
        for pid in list(self._spawned):  # reap Senders we started that have exited
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    self._spawned.remove(pid)
            except ChildProcessError:
                self._spawned.remove(pid)
        try:
            self.ensure_sender()
        except KafkaError as exc:  # retried on the next check
            log.warning("could not start a Sender: %s", exc)

    def _register(self, result: AppendResult, sent: _Sent) -> None:
        key = (result.batch_id, result.generation)
        with self._lock:
            self._outstanding += 1
            done = None
            completions = self._done.get(result.batch_id)
            if completions and completions[0].generation == result.generation:
                done = next((c for c in completions if c.covers(result.offset_delta)), None)
            if done is None:
                self._waiting.setdefault(key, []).append(sent)
                return
        self._resolve(done, [sent])

    # ------------------------------------------------------------------ completion

    def _complete_loop(self) -> None:
        rings, slot = self.pool.rings, self.pool.slot
        next_check = 0.0
        while not self._closed:
            if self.start_sender and time.monotonic() >= next_check:
                next_check = time.monotonic() + SENDER_CHECK_S
                self._check_sender()
            rings.wait(slot, 0.05)
            for completion in rings.poll(slot):
                self._resolve(completion, self._take_covered(completion))

    def _take_covered(self, completion: Completion) -> list[_Sent]:
        key = (completion.batch_id, completion.generation)
        with self._lock:
            done = self._done.get(completion.batch_id)
            if done and done[0].generation == completion.generation:
                done.append(completion)
            else:
                self._done[completion.batch_id] = [completion]
            waiting = self._waiting.pop(key, [])
            if completion.first_delta == 0 and completion.last_delta == ALL_DELTAS:
                return waiting
            covered = [s for s in waiting if completion.covers(s.offset_delta)]
            rest = [s for s in waiting if not completion.covers(s.offset_delta)]
            if rest:
                self._waiting[key] = rest
            return covered

    def _resolve(self, completion: Completion, sent: list[_Sent]) -> None:
        error = self._error(completion)
        with self._cond:
            for item in sent:
                item.future._complete(completion, item, error)
            self._outstanding -= len(sent)
            self._cond.notify_all()
        for item in sent:
            if item.future._callbacks:
                item.future._run_callbacks()

    @staticmethod
    def _error(completion: Completion) -> KafkaError | None:
        if completion.error_code == 0:
            return None
        if completion.error_code == DELIVERY_TIMEOUT:
            return KafkaTimeoutError(
                "delivery.timeout.ms expired before the record was acknowledged"
            )
        return error_for(completion.error_code)

    def flush(self, timeout: float | None = None) -> None:
        self._wake_sender()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._outstanding:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise KafkaTimeoutError(f"{self._outstanding} records not done in {timeout} s")
                self._wake_sender()
                self._idle.wait(min(0.05, remaining) if remaining is not None else 0.05)

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self._thread.join()  # it stops within one ring wait; only then unmap
            self.accumulator.close()
            self.pool.detach()
