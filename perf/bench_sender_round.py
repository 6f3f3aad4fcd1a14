"""The Sender's per-round read of the pool: ``partition_states`` (every partition with
queued batches, with what ``ready()`` needs), on a pool with ``--partitions`` partitions
holding a batch each, as a paced fleet leaves it between rounds.

    .venv/bin/python perf/bench_sender_round.py [--partitions 16] [--calls 20000] [--python]

The heads are read as the Sender reads them, in C (``FastAppend.queued_heads``), or with
``--python`` by their Python twin. Prints µs per call (best of 5 runs of ``--calls``). Its
instructions are stable where its time is not: callgrind's count of this script with
``--calls 0`` and with ``--calls N`` gives the instructions per call by difference (5N).
"""

from __future__ import annotations

import argparse
import os
import time

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.clock import monotonic_ms
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import DIRECTORY_LOCK


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--python", action="store_true", help="the heads read in Python")
    args = parser.parse_args()
    pool = SharedPool.open(f"benchround{os.getpid()}", PoolConfig(max_partitions=256))
    try:
        with pool.locks.held(DIRECTORY_LOCK):
            pool.directory.publish({"fleet": [PartitionLeader(1, 0)] * args.partitions})
        acc = RecordAccumulator(pool)
        entries = pool.directory.snapshot().topics["fleet"]
        for entry in entries:
            acc.append_to(entry.deque_id, 0, b"k", b"v" * 200, now_ms=monotonic_ms())
        # (the Sender's: sender.py makes its accumulator so)
        states = RecordAccumulator(pool, fast_path=False, c_drain=not args.python)
        assert len(states.partition_states()) == args.partitions
        if args.calls:
            best = min(_timed(states, args.calls) for _ in range(5))
            print(f"partition_states, {args.partitions} partitions queued: "
                  f"{best / args.calls * 1e6:.2f} µs per call")  # fmt: skip
    finally:
        pool.destroy()


def _timed(acc: RecordAccumulator, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        acc.partition_states()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
