"""The Sender's compression stage on 1, 2, ... threads: MB/s of record bytes, each thread
count beside one thread in the same run.

    .venv/bin/python perf/bench_compress_threads.py [--codec lz4] [--record-size 10000]
        [--batch-size 1000000] [--batches 16] [--threads 1,2] [--seconds 5]

One "request" is ``--batches`` batches of ``--batch-size`` bytes of realistic records (the
perf tool's JSON-like values, framed as the accumulator frames them), compressed as the
Sender compresses a request's batches (``Compressors.compress_all``: the pieces of all of
them side by side, sender/compressors.py). Thread counts are measured in turn, round after
round, for ``--seconds`` each in all, and each is reported as MB/s of records in and as a
ratio to one thread measured in the same rounds. On a host of C cores, up to C threads can
help; the Sender itself uses one per core this process may run on, from 4 cores on.
"""

from __future__ import annotations

import argparse
import time

from shmkafka.perf.values import values_for
from shmkafka.protocol.compression import CompressionType
from shmkafka.protocol.records import encode_record_tail, frame_record
from shmkafka.sender.compressors import Compressors, usable_cores

ROUND_S = 0.5


def request(record_size: int, batch_size: int, batches: int) -> list[memoryview]:
    """``batches`` batches' records, each about ``batch_size`` bytes, of distinct values."""
    values = values_for(7, 0, record_size)
    out, at = [], 0
    for _ in range(batches):
        body = bytearray()
        delta = 0
        while len(body) + record_size < batch_size:
            value = values[at % len(values)]
            body += frame_record(delta, 0, encode_record_tail(b"k%d" % at, value))
            delta += 1
            at += 1
        out.append(memoryview(bytes(body)))
    return out


def measure(codec: CompressionType, payloads: list[memoryview], threads: list[int],
            seconds: float) -> dict[int, float]:  # fmt: skip
    """Bytes per second of records for each thread count, in alternating rounds."""
    size = sum(len(p) for p in payloads)
    compressors = {n: Compressors(workers=n - 1) for n in threads}
    done = dict.fromkeys(threads, 0)
    spent = dict.fromkeys(threads, 0.0)
    try:
        for each in compressors.values():  # (threads made, codecs imported: not timed)
            each.compress_all(codec, None, payloads)
        while min(spent.values()) < seconds:
            for n, each in compressors.items():
                start = time.perf_counter()
                while time.perf_counter() - start < ROUND_S:
                    each.compress_all(codec, None, payloads)
                    done[n] += size
                spent[n] += time.perf_counter() - start
    finally:
        for each in compressors.values():
            each.close()
    return {n: done[n] / spent[n] for n in threads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--codec", default="lz4")
    parser.add_argument("--record-size", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    codec = CompressionType.from_name(args.codec)
    threads = sorted({int(n) for n in args.threads.split(",")} | {1})
    payloads = request(args.record_size, args.batch_size, args.batches)
    size = sum(len(p) for p in payloads)
    print(f"{args.codec}, {args.batches} batches of {args.batch_size:,} bytes of "
          f"{args.record_size:,}-byte realistic records ({size / 1e6:.1f} MB a request), "
          f"{usable_cores()} cores usable, {args.seconds:g} s per thread count")  # fmt: skip
    rates = measure(codec, payloads, threads, args.seconds)
    print(f"{'threads':>8} {'MB/s':>9} {'x 1 thread':>11}")
    for n in threads:
        print(f"{n:>8} {rates[n] / 1e6:>9.1f} {rates[n] / rates[1]:>10.2f}x")


if __name__ == "__main__":
    main()
