"""Process bodies for the multi-process tests (module level, so spawn can import them)."""

from __future__ import annotations

import struct
import time
from typing import Any

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.records import decode_batch
from tests.appending import append

VALUE_SIZE = 100
TOPIC = "t"


def make_value(proc: int, seq: int) -> bytes:
    head = struct.pack(">II", proc, seq)
    return head + bytes(VALUE_SIZE - len(head))


def appender(
    name: str, proc: int, count: int, partitions: int, start: Any, fast_path: bool = True
) -> None:
    pool = SharedPool.open(name)
    try:
        acc = RecordAccumulator(pool, max_block_ms=60_000, fast_path=fast_path)
        start.wait(60)
        key = proc.to_bytes(2, "big") * 8
        now = int(time.time() * 1000)
        for seq in range(count):
            append(acc, TOPIC, seq % partitions, now, key, make_value(proc, seq), now_ms=now)
    finally:
        pool.detach()


def drainer(name: str, procs: int, count: int, partitions: int, results: Any) -> None:
    """Drains everything, decodes each finalized batch (CRC checked) and checks that every
    record arrives exactly once and in order per process per partition."""
    pool = SharedPool.open(name)
    errors: list[str] = []
    next_seq = {(p, part): part for p in range(procs) for part in range(partitions)}
    total = 0
    batches = 0
    deadline = time.monotonic() + 300
    try:
        acc = RecordAccumulator(pool)
        while total < procs * count and time.monotonic() < deadline:
            states = acc.partition_states()
            drained = acc.drain([s.deque_id for s in states], 1 << 40)
            if not drained:
                time.sleep(0.001)
                continue
            for batch in drained:
                decoded = decode_batch(b"".join(acc.finalize(batch)))
                batches += 1
                for record in decoded.records:
                    proc, seq = struct.unpack_from(">II", record.value or b"")
                    want = next_seq.get((proc, batch.partition))
                    if seq != want and len(errors) < 20:
                        errors.append(f"partition {batch.partition} proc {proc}: {seq} != {want}")
                    next_seq[(proc, batch.partition)] = seq + partitions
                    total += 1
                acc.complete(batch)
        for (proc, part), seq in next_seq.items():
            expected_end = part + partitions * len(range(part, count, partitions))
            if seq != expected_end and len(errors) < 40:
                errors.append(f"proc {proc} partition {part} ended at {seq}, not {expected_end}")
        results.put({"total": total, "batches": batches, "errors": errors})
    finally:
        pool.detach()
