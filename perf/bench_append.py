"""Append benchmark: shmkafka's shared accumulator beside kafka-python's RecordAccumulator.

    make bench-append     # or: .venv/bin/python perf/bench_append.py [--records N] [--repeat R]

Each configuration runs P processes that each append N records (100-byte values, 16-byte
keys, round-robin over the partitions) after a common start barrier; every process times its
own loop. shmkafka's processes share one pool; kafka-python's each own an accumulator (it
cannot be shared between processes). The pool is sized to hold every record, and nothing
drains, so both sides measure append alone. Reported: aggregate appends/s (total records /
slowest process's time), µs per append per process, and the ratio (kafka-python time /
shmkafka time), best of R repetitions, both clients measured alternately in the same run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
import uuid
from typing import Any

from kafka.producer.record_accumulator import RecordAccumulator as KafkaPythonAccumulator
from kafka.structs import TopicPartition

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import DIRECTORY_LOCK

VALUE = os.urandom(100)
TOPIC = "bench"
TIMESTAMP = 1_700_000_000_000


def _keys(count: int, seed: int) -> list[bytes]:
    return [(seed * 1_000_003 + i).to_bytes(16, "big") for i in range(count)]


def shmkafka_worker(
    pool: str, records: int, partitions: int, seed: int, barrier: Any, out: Any
) -> None:
    handle = SharedPool.open(pool)
    try:
        acc = RecordAccumulator(handle, max_block_ms=60_000)
        keys = _keys(records, seed)
        entries = handle.directory.snapshot().topics[TOPIC]  # (resolved once, as a send does)
        deques = [entries[p].deque_id for p in range(partitions)]
        barrier.wait()
        start = time.perf_counter()
        for i, key in enumerate(keys):
            acc.append_to(deques[i % partitions], TIMESTAMP, key, VALUE, now_ms=0)
        out.put(time.perf_counter() - start)
    finally:
        handle.detach()


def kafka_python_worker(records: int, partitions: int, seed: int, barrier: Any, out: Any) -> None:
    acc = KafkaPythonAccumulator(batch_size=16384)
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    keys = _keys(records, seed)
    barrier.wait()
    start = time.perf_counter()
    for i, key in enumerate(keys):
        acc.append(tps[i % partitions], TIMESTAMP, key, VALUE, [], now=0)
    out.put(time.perf_counter() - start)


def _run(target: Any, args_for: Any, procs: int) -> float:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(procs)
    out = ctx.Queue()
    workers = [ctx.Process(target=target, args=(*args_for(i), barrier, out)) for i in range(procs)]
    for w in workers:
        w.start()
    times: list[float] = [out.get(timeout=600) for _ in workers]
    for w in workers:
        w.join(60)
        if w.exitcode != 0:
            raise RuntimeError(f"a benchmark process failed with exit code {w.exitcode}")
    return max(times)


def run_shmkafka(procs: int, partitions: int, records: int) -> float:
    need = procs * records * 140 + partitions * 16384 * 2
    buffer_memory = max(32, -(-need // (1024 * 1024))) * 1024 * 1024
    name = f"bench-{uuid.uuid4().hex[:10]}"
    config = PoolConfig(
        buffer_memory=buffer_memory,
        max_partitions=64,
        max_processes=16,
        lock_stripes=64,
    )
    pool = SharedPool.open(name, config)
    try:
        with pool.locks.held(DIRECTORY_LOCK):
            pool.directory.publish({TOPIC: [PartitionLeader(0, 0)] * partitions})
        return _run(shmkafka_worker, lambda i: (name, records, partitions, i), procs)
    finally:
        pool.destroy()


def run_kafka_python(procs: int, partitions: int, records: int) -> float:
    return _run(kafka_python_worker, lambda i: (records, partitions, i), procs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000, help="records per process")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    configs = [(1, 1), (1, 16), (2, 1), (2, 16), (4, 1), (4, 16)]
    print(f"records per process={args.records}, value=100 B, key=16 B, best of {args.repeat}")
    header = (
        f"{'procs':>5} {'parts':>5} | {'shmkafka rec/s':>14} {'µs/append':>9} | "
        f"{'kafka-python rec/s':>18} {'µs/append':>9} | {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    ratios = []
    single_process_us = []
    for procs, partitions in configs:
        ours = theirs = float("inf")
        for _ in range(args.repeat):
            ours = min(ours, run_shmkafka(procs, partitions, args.records))
            theirs = min(theirs, run_kafka_python(procs, partitions, args.records))
        total = procs * args.records
        ratio = theirs / ours
        ratios.append(ratio)
        if procs == 1:
            single_process_us.append(ours / args.records * 1e6)
        ours_us = ours / args.records * 1e6
        theirs_us = theirs / args.records * 1e6
        print(
            f"{procs:>5} {partitions:>5} | {total / ours:>14,.0f} {ours_us:>9.2f} | "
            f"{total / theirs:>18,.0f} {theirs_us:>9.2f} | {ratio:>5.2f}x"
        )
    print(
        f"summary: shmkafka append is {min(ratios):.2f}x-{max(ratios):.2f}x kafka-python's; "
        f"one process: {max(single_process_us):.2f} µs/append "
        f"({1e6 / max(single_process_us):,.0f} appends/s)"
    )


if __name__ == "__main__":
    main()
