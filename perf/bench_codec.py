"""Codec micro-benchmark: shmkafka's protocol codec beside kafka-python's, in one run.

    make bench            # or: .venv/bin/python perf/bench_codec.py [--records N] [--repeat R]

Every figure is the best of R repetitions, each side measured alternately in the same
process, and reported with the ratio (kafka-python time / shmkafka time): this machine is
noisy, so only side-by-side ratios mean anything. Workload: 100-byte values, 16-byte keys,
16 KiB batches (Kafka's default batch.size), as in the foundation issue.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from typing import Any

from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from kafka.record.default_records import DefaultRecordBatchBuilder

from shmkafka.protocol.compression import CompressionType
from shmkafka.protocol.hashing import murmur2, murmur2_python
from shmkafka.protocol.records import (
    HEADER_SIZE,
    BatchMeta,
    encode_record_tail,
    finalize_batch,
    frame_record,
)

BATCH_SIZE = 16 * 1024
VALUE_SIZE = 100
KEY_SIZE = 16
TIMESTAMP = 1_700_000_000_000


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _values(rng: random.Random, count: int) -> list[bytes]:
    # Half random, half repetitive text, so compression has something to do.
    words = [b"order", b"user", b"amount", b"currency", b"EUR", b"status", b"paid"]
    out = []
    for _ in range(count):
        text = b" ".join(rng.choice(words) for _ in range(20))[: VALUE_SIZE // 2]
        out.append((text + rng.randbytes(VALUE_SIZE))[:VALUE_SIZE])
    return out


class _Batch:
    """One batch's memory, written as the accumulator writes it (pool/accumulator.py)."""

    def __init__(self) -> None:
        self.buf = bytearray(BATCH_SIZE)
        self.end = HEADER_SIZE
        self.count = 0

    def append(self, key: bytes, value: bytes) -> bool:
        record = frame_record(self.count, 0, encode_record_tail(key, value))
        end = self.end + len(record)
        if end > BATCH_SIZE:
            return False
        self.buf[self.end : end] = record
        self.end = end
        self.count += 1
        return True

    def build(self, meta: BatchMeta) -> tuple[bytes | memoryview, ...]:
        """The Sender's finalize: the header filled in (and the records compressed)."""
        return finalize_batch(self.buf, self.end, record_count=self.count,
                              last_offset_delta=self.count - 1, base_timestamp=TIMESTAMP,
                              max_timestamp=TIMESTAMP, meta=meta)  # fmt: skip


class Workload:
    def __init__(self, records: int, seed: int) -> None:
        rng = random.Random(seed)
        self.keys = [rng.randbytes(KEY_SIZE) for _ in range(records)]
        self.values = _values(rng, records)

    # ---------------------------------------------------------------- shmkafka

    def ours_encode(self, with_hash: bool) -> int:
        """As the accumulator appends (its Python path): the record's tail encoded, then
        framed with its deltas into the batch's memory after the reserved header."""
        batches = 0
        batch = _Batch()
        for key, value in zip(self.keys, self.values, strict=True):
            if with_hash:
                murmur2(key)
            if not batch.append(key, value):
                batch = _Batch()
                batch.append(key, value)
                batches += 1
        return batches

    def ours_full_batches(self, count: int) -> list[_Batch]:
        batches = []
        for _ in range(count):
            batch = _Batch()
            for key, value in zip(self.keys, self.values, strict=False):
                if not batch.append(key, value):
                    break
            batches.append(batch)
        return batches

    # ---------------------------------------------------------------- kafka-python

    @staticmethod
    def _their_builder(codec: int = 0) -> Any:
        return DefaultRecordBatchBuilder(
            magic=2,
            compression_type=codec,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=BATCH_SIZE,
        )

    def theirs_encode(self, with_hash: bool) -> int:
        batches = 0
        builder = self._their_builder()
        offset = 0
        for key, value in zip(self.keys, self.values, strict=True):
            if with_hash:
                kafka_python_murmur2(key)
            if builder.append(offset, TIMESTAMP, key, value, []) is None:
                builder = self._their_builder()
                offset = 0
                builder.append(offset, TIMESTAMP, key, value, [])
                batches += 1
            offset += 1
        return batches

    def their_full_builders(self, count: int, codec: int) -> list[Any]:
        builders = []
        for _ in range(count):
            builder = self._their_builder(codec)
            for offset, (key, value) in enumerate(zip(self.keys, self.values, strict=False)):
                if builder.append(offset, TIMESTAMP, key, value, []) is None:
                    break
            builders.append(builder)
        return builders


def _row(name: str, unit_count: int, unit: str, ours: float, theirs: float) -> str:
    per_ours = ours / unit_count * 1e6
    per_theirs = theirs / unit_count * 1e6
    return f"{name:<34} {per_ours:>10.3f} {per_theirs:>12.3f}  µs/{unit:<6} {theirs / ours:>6.2f}x"


def run(records: int, repeat: int, seed: int) -> list[str]:
    w = Workload(records, seed)
    lines = [
        f"records={records} key={KEY_SIZE}B value={VALUE_SIZE}B batch.size={BATCH_SIZE} "
        f"repeat={repeat} (best of) pid={os.getpid()}",
        f"{'operation':<34} {'shmkafka':>10} {'kafka-python':>12}  {'unit':<9} {'ratio':>6}",
    ]
    ours = best_of(repeat, lambda: w.ours_encode(with_hash=True))
    theirs = best_of(repeat, lambda: w.theirs_encode(with_hash=True))
    lines.append(_row("record encode + murmur2 (target 3x)", records, "record", ours, theirs))
    ours = best_of(repeat, lambda: w.ours_encode(with_hash=False))
    theirs = best_of(repeat, lambda: w.theirs_encode(with_hash=False))
    lines.append(_row("record encode into 16 KiB batches", records, "record", ours, theirs))
    ours = best_of(repeat, lambda: [murmur2(k) for k in w.keys])
    theirs = best_of(repeat, lambda: [kafka_python_murmur2(k) for k in w.keys])
    lines.append(_row("murmur2 (C, murmurhash2)", records, "key", ours, theirs))
    ours = best_of(repeat, lambda: [murmur2_python(k) for k in w.keys])
    lines.append(_row("murmur2 (pure-Python fallback)", records, "key", ours, theirs))

    batches = 40
    for codec in CompressionType:
        meta = BatchMeta(compression=codec)
        ours_total = theirs_total = float("inf")
        for _ in range(repeat):
            mine = w.ours_full_batches(batches)
            start = time.perf_counter()
            for builder in mine:
                builder.build(meta)
            ours_total = min(ours_total, time.perf_counter() - start)
            their = w.their_full_builders(batches, int(codec))
            start = time.perf_counter()
            for builder in their:
                builder.build()
            theirs_total = min(theirs_total, time.perf_counter() - start)
        label = (
            "finalize 16 KiB batch (CRC-32C)" if codec == 0 else f"compress+finalize {codec.name}"
        )
        lines.append(
            _row(label.lower() if codec else label, batches, "batch", ours_total, theirs_total)
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for line in run(args.records, args.repeat, args.seed):
        print(line)


if __name__ == "__main__":
    main()
