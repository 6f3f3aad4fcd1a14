"""The cost of one call on each public API, side by side in one run on Tansu.

    make bench-calls    # or: .venv/bin/python perf/bench_calls.py [--calls N] [--rounds R]

One process; N calls of confluent-kafka's ``Producer.produce``, shmkafka's
``Producer.produce`` and ``KafkaProducer.send`` (future discarded), 100-byte values and
16-byte keys over 10,007 names to one topic, linger 5 ms; each timed without its flush
(which follows, untimed). R rounds, in turn; microseconds per call, best and median.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka

from shmkafka.confluent_kafka import Producer
from shmkafka.kafka import KafkaProducer
from shmkafka.perf.brokers import run_tansu

VALUE = b"v" * 100
KEYS = [b"k%015d" % (i % 10007) for i in range(10007)]


def timed(calls: int, run: Callable[[int], None]) -> float:
    run(1000)  # warm: metadata, the pool's route
    started = time.perf_counter()
    run(calls)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with run_tansu() as broker:
        conf = {"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                "queue.buffering.max.messages": 2_000_000}  # fmt: skip
        theirs = confluent_kafka.Producer(conf)
        ours = Producer(conf)
        kp = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)

        def produce_with(producer: Any) -> Callable[[int], None]:
            def run(n: int) -> None:
                produce = producer.produce
                for i in range(n):
                    produce("calls", VALUE, KEYS[i % 10007])
                producer.poll(0)

            return run

        def send(n: int) -> None:
            call = kp.send
            for i in range(n):
                call("calls", VALUE, key=KEYS[i % 10007])

        runs = {"confluent-kafka Producer.produce": (produce_with(theirs), theirs.flush),
                "shmkafka Producer.produce": (produce_with(ours), ours.flush),
                "shmkafka KafkaProducer.send": (send, kp.flush)}  # fmt: skip
        results: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, (run, flush) in runs.items():
                results[name].append(timed(args.calls, run))
                flush(60)
        ours.close()
        kp.close()
    print(f"µs per call, {args.calls} calls, {args.rounds} rounds (best / median)")
    base = statistics.median(results["confluent-kafka Producer.produce"])
    for name, values in results.items():
        median = statistics.median(values)
        print(f"  {name:34s} {min(values):6.2f} / {median:6.2f}   {median / base:5.2f}x")


if __name__ == "__main__":
    main()
