"""Compression on more than the Sender's one core.

The Sender compresses every batch of every process of the pool. With values that compress
poorly (lz4 at about 300 MB/s on JSON-like events) that is most of its work, and one core
caps the pool while other cores idle. An lz4 frame's 64 KiB blocks are independent, and
the codec releases the GIL while it compresses one (``compression.lz4_block``), so a
batch's blocks are compressed side by side: on the Sender's thread and
``COMPRESSION_THREADS`` workers.

Rules:
- Only pure work runs on a worker: compressing a block, which reads the batch's records
  and writes nothing shared. Every write to shared memory stays on the Sender's thread, in
  the order it had, so no crash window moves.
- ``map`` is ``map``'s contract: the results in the items' order. A batch of fewer than
  ``PARALLEL_MIN_BLOCKS`` blocks is compressed on the Sender's thread alone (handing work
  over costs tens of microseconds; a block costs about 200).
- Workers: ``min(COMPRESSION_THREADS, cores - 2)`` from ``MIN_CORES`` cores on, made on
  first use; none below.
- A worker's exception is raised on the Sender's thread, as if compressed there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

PARALLEL_MIN_BLOCKS = 2
COMPRESSION_THREADS = 3
MIN_CORES = 4


def workers_for(cpus: int | None) -> int:
    """How many compression threads beside the Sender's a host of ``cpus`` cores gets: none
    below ``MIN_CORES`` (on 2 cores the apps, the Sender and a local broker already use
    both, and a worker there cost more in hand-offs than it saved: docs/performance.md)."""
    if cpus is None or cpus < MIN_CORES:
        return 0
    return min(COMPRESSION_THREADS, cpus - 2)


class Compressors:
    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers_for(os.cpu_count()) if workers is None else workers
        self._pool: ThreadPoolExecutor | None = None
        self.parallel_batches = 0  # batches whose blocks were compressed side by side

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``fn`` of each item, in order: in as many runs of items as there are threads
        (this one and the workers), when there are enough items for it to pay."""
        todo = list(items)
        if self.workers == 0 or len(todo) < PARALLEL_MIN_BLOCKS:
            return [fn(item) for item in todo]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="shmkafka-compress")
        self.parallel_batches += 1
        step = -(-len(todo) // (self.workers + 1))
        runs = [todo[at : at + step] for at in range(0, len(todo), step)]
        futures = [self._pool.submit(_each, fn, run) for run in runs[1:]]
        out = _each(fn, runs[0])
        for future in futures:
            out += future.result()
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _each(fn: Callable[[T], R], items: list[T]) -> list[R]:
    return [fn(item) for item in items]
