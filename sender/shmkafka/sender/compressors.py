"""Compression on as many cores as the host gives the Sender.

The Sender compresses every batch of every process of the pool. With values that compress
poorly (lz4 at about 300 MB/s on JSON-like events) that is most of its work, and one core
would cap the pool while other cores idle: confluent-kafka's N instances compress on N
threads. Every codec's output is made of independent pieces (``compression.pieces``: an
lz4 frame's 64 KiB blocks, xerial snappy's 32 KiB blocks, a gzip or zstd stream whole),
and the codecs release the GIL while they compress one, so the pieces of all the batches
of a request are compressed side by side: on the Sender's thread and ``workers`` others.

Rules:
- Only pure work runs on a worker: compressing a piece, which reads the batch's records
  and writes nothing shared. Every write to shared memory stays on the Sender's thread, in
  the order it had, so no crash window moves.
- ``map`` is ``map``'s contract: the results in the items' order. Items go out in as many
  runs as there are threads, of about equal bytes. Fewer than ``PARALLEL_MIN_PIECES``
  pieces are compressed on the Sender's thread alone (a hand-over costs tens of
  microseconds; a 64 KiB lz4 block about 200).
- Workers: one fewer than the cores this process may run on (``os.sched_getaffinity``:
  taskset and cpusets count), from ``MIN_CORES`` cores on, with no cap; none below (on 2
  cores the apps, the Sender and a local broker already use both, and a worker there cost
  more in hand-offs than it saved: docs/performance.md). Made on first use: a thread that
  has nothing to compress sleeps.
- A worker's exception is raised on the Sender's thread, as if compressed there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import TypeVar

from shmkafka.protocol.compression import Buffer, CompressionType, Pieces, pieces

T = TypeVar("T")
R = TypeVar("R")

PARALLEL_MIN_PIECES = 2
MIN_CORES = 4


def usable_cores() -> int | None:
    """The cores this process may run on (its affinity), or the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (not every platform has affinity)
        return os.cpu_count()


def workers_for(cpus: int | None) -> int:
    """How many compression threads beside the Sender's a host of ``cpus`` cores gets."""
    if cpus is None or cpus < MIN_CORES:
        return 0
    return cpus - 1


class Compressors:
    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers_for(usable_cores()) if workers is None else workers
        self._pool: ThreadPoolExecutor | None = None
        self.parallel_batches = 0  # maps whose items were compressed side by side

    def compress_all(
        self, codec: CompressionType, level: int | None, payloads: Sequence[memoryview]
    ) -> list[tuple[Buffer, ...]]:
        """Each payload compressed (``compress_parts``' output), the pieces of all of them
        side by side."""
        plans = [pieces(codec, payload, level) for payload in payloads]
        work = [(plan.work, piece) for plan in plans for piece in plan.inputs]
        outputs = iter(self.map(_run, work, [len(piece) for _, piece in work]))
        return [_parts(plan, outputs) for plan in plans]

    def map(
        self, fn: Callable[[T], R], items: Iterable[T], sizes: Sequence[int] | None = None
    ) -> list[R]:
        """``fn`` of each item, in order: in as many runs of items as there are threads
        (this one and the workers), of about equal ``sizes`` (equal counts without), when
        there are enough items for it to pay."""
        todo = list(items)
        if self.workers == 0 or len(todo) < PARALLEL_MIN_PIECES:
            return [fn(item) for item in todo]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="shmkafka-compress")
        self.parallel_batches += 1
        runs = _runs(todo, sizes or [1] * len(todo), self.workers + 1)
        futures = [self._pool.submit(_each, fn, run) for run in runs[1:]]
        out = _each(fn, runs[0])
        for future in futures:
            out += future.result()
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _runs(items: list[T], sizes: Sequence[int], count: int) -> list[list[T]]:
    """``items`` cut, in order, into at most ``count`` runs of about equal total size."""
    total = max(1, sum(sizes))
    runs: list[list[T]] = [[]]
    done = 0
    for item, size in zip(items, sizes, strict=True):
        # (a new run once this one holds its share: the k-th run ends near k/count of total)
        if runs[-1] and len(runs) < count and done >= total * len(runs) / count:
            runs.append([])
        runs[-1].append(item)
        done += size
    return runs


def _parts(plan: Pieces, outputs: Iterable[Buffer]) -> tuple[Buffer, ...]:
    return plan.parts(islice(outputs, len(plan.inputs)))


def _run(job: tuple[Callable[[memoryview], Buffer], memoryview]) -> Buffer:
    work, piece = job
    return work(piece)


def _each(fn: Callable[[T], R], items: list[T]) -> list[R]:
    return [fn(item) for item in items]
