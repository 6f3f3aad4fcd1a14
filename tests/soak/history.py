"""What a soak worker logs, and the record values it sends.

Rules:
- A worker writes the range of sequence numbers it is about to send (INTENT) with one
  ``os.write`` before the first of them is sent, so the line survives a SIGKILL that comes
  right after: a record read back outside every intent is a phantom.
- Outcomes (ACKED, FAILED, REFUSED) are buffered and written every 100 ms: a SIGKILL loses
  the last few, and those records count as unknown (the process died), never as lost.
- Every entry is one fixed-size struct, so a reader needs no parsing and a torn last entry
  (a kill mid-write) is dropped by its length.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

# the value of every soak record starts with this: who sent it and which one it is
VALUE_HEADER = struct.Struct("<HHIIq")  # worker, incarnation, seq, txn (0: none), sent µs

# one history entry: kind, seq, partition, offset (or a range end, or a txn number),
# time (ms since the run's epoch), latency µs
ENTRY = struct.Struct("<BIHqII")

INTENT = 1  # seq..offset (exclusive) are about to be sent
ACKED = 2  # seq at (partition, offset), after latency µs
FAILED = 3  # seq failed; offset holds the error's index in ERRORS
REFUSED = 4  # seq was refused at the call (never accepted)
TXN_BEGIN = 5  # offset holds the transaction number
TXN_COMMITTING = 6
TXN_COMMITTED = 7
TXN_ABORTED = 8
UNRESOLVED = 9  # at a clean stop: seq's outcome never came (a hung future)
FULL = 10  # a send found the pool full (and waited, or retried after polling)
CLEAN_END = 11  # the worker stopped cleanly: everything still pending is listed UNRESOLVED

KINDS = {
    INTENT: "intent", ACKED: "acked", FAILED: "failed", REFUSED: "refused",
    TXN_BEGIN: "txn-begin", TXN_COMMITTING: "txn-committing", TXN_COMMITTED: "txn-committed",
    TXN_ABORTED: "txn-aborted", UNRESOLVED: "unresolved", FULL: "full", CLEAN_END: "clean-end",
}  # fmt: skip


@dataclass(frozen=True)
class Entry:
    kind: int
    seq: int
    partition: int
    offset: int
    t_ms: int
    latency_us: int


def history_path(directory: str, worker: int, incarnation: int) -> str:
    return os.path.join(directory, f"w{worker:03d}-i{incarnation:04d}.hist")


def value(worker: int, incarnation: int, seq: int, txn: int, padding: bytes) -> bytes:
    return VALUE_HEADER.pack(worker, incarnation, seq, txn, int(time.time() * 1e6)) + padding


class HistoryWriter:
    """One worker incarnation's history file. ``intent`` writes at once; ``note`` buffers
    (callbacks may call it from another thread) until ``flush``, which a thread runs every
    100 ms."""

    def __init__(self, path: str, epoch_s: float) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._epoch = epoch_s
        self._buffer: list[bytes] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._flush_often, daemon=True)
        self._thread.start()

    def now_ms(self) -> int:
        return int((time.time() - self._epoch) * 1000)

    def intent(self, start: int, end: int) -> None:
        self.flush()  # (outcomes first: the file stays in time order)
        os.write(self._fd, ENTRY.pack(INTENT, start, 0, end, self.now_ms(), 0))

    def note(self, kind: int, seq: int, partition: int = 0, offset: int = 0,
             latency_us: int = 0) -> None:  # fmt: skip
        entry = ENTRY.pack(kind, seq, partition, offset, self.now_ms(), latency_us)
        with self._lock:
            self._buffer.append(entry)

    def flush(self) -> None:
        with self._lock:
            data, self._buffer = b"".join(self._buffer), []
        if data:
            os.write(self._fd, data)

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        self.flush()
        os.close(self._fd)

    def _flush_often(self) -> None:
        while not self._closed.wait(0.1):
            self.flush()


def read_history(path: str) -> Iterator[Entry]:
    with open(path, "rb") as f:
        data = f.read()
    whole = len(data) - len(data) % ENTRY.size  # (a torn last entry: killed mid-write)
    for fields in ENTRY.iter_unpack(data[:whole]):
        yield Entry(*fields)
