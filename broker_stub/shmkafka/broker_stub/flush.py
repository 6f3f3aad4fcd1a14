"""The flusher: one background thread that makes broker_stub's logs durable.

- ``async`` (default): every ``flush_interval_ms`` it fsyncs the logs written since the last
  time; acks do not wait for it.
- ``sync`` with group commit (RocketMQ's GroupCommitService): a produce that needs
  durability enqueues a commit request into the write list; the flusher swaps the write and
  read lists (double-buffered, so producers never wait on the flusher's lock for long),
  fsyncs every log named in the read list once, then completes all of its requests, whose
  acks only then leave.
- ``sync`` without group commit: one fsync per request, in order (the baseline the benchmark
  compares against).

Rules:
- Logs are written by the event loop's thread with unbuffered writes; this thread only
  fsyncs, so a completed request's bytes are on disk.
- A request's callback runs on this thread; the server hands it to its loop thread-safely.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from shmkafka.broker_stub.storage import DiskLog


@dataclass
class CommitRequest:
    logs: frozenset[DiskLog]
    done: Callable[[], None]


class Flusher:
    def __init__(
        self, mode: str = "async", interval_ms: int = 1000, group_commit: bool = True,
        every_log: Callable[[], list[DiskLog]] | None = None,
    ) -> None:  # fmt: skip
        if mode not in ("async", "sync"):
            raise ValueError("flush mode is 'async' or 'sync'")
        self.mode = mode
        self.interval_s = interval_ms / 1000
        self.group_commit = group_commit
        self.fsyncs = 0
        self.requests = 0  # commit requests completed (sync mode)
        self.rounds = 0  # fsync rounds that completed requests
        self._every_log = every_log or list
        self._cond = threading.Condition()
        self._write: list[CommitRequest] = []
        self._read: list[CommitRequest] = []
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="broker-stub-flusher", daemon=True)
        self._thread.start()

    def commit(self, logs: Iterable[DiskLog], done: Callable[[], None]) -> None:
        """sync mode: call ``done`` once ``logs`` are fsynced."""
        with self._cond:
            self._write.append(CommitRequest(frozenset(logs), done))
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(10)
        self._flush(set(self._every_log()))

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._write and not self._stop:
                    self._cond.wait(self.interval_s)
                if self._stop:
                    return
                self._read, self._write = self._write, self._read  # swap the request lists
            dirty = set(self._every_log()) if not self._read else set()
            if self.group_commit:
                self._flush(dirty | {log for r in self._read for log in r.logs})
                self.rounds += bool(self._read)
                for request in self._read:
                    request.done()
            else:
                self._flush(dirty)
                for request in self._read:
                    self._flush(set(request.logs))
                    self.rounds += 1
                    request.done()
            self.requests += len(self._read)
            self._read.clear()

    def _flush(self, logs: set[DiskLog]) -> None:
        for log in logs:
            log.fsync()
            self.fsyncs += 1
