"""The cost of one call on each public API, side by side in one run on Tansu.

    make bench-calls    # or: .venv/bin/python perf/bench_calls.py [--calls N] [--rounds R]

One process; N calls each of confluent-kafka's ``Producer.produce`` and shmkafka's
``Producer.produce`` (without and with a delivery callback) and ``KafkaProducer.send``
(future discarded, and future kept), also through shmkafka's pure-Python path
(``SHMKAFKA_PURE_PYTHON``: what runs when the C extension is not built); 100-byte values and
16-byte keys over 10,007 names to one topic, linger 5 ms. Each is timed without its flush
(which follows, untimed, and serves the reports); the completion work done meanwhile by
shmkafka's completion thread (which holds the GIL) is in the time. R rounds, in turn;
microseconds per call, best and median, and the ratio to confluent-kafka's median.
"""

from __future__ import annotations

import argparse
import os
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
TOPIC = "calls"


def timed(calls: int, run: Callable[[int], None]) -> float:
    run(1000)  # warm: metadata, the pool's route
    started = time.perf_counter()
    run(calls)
    return (time.perf_counter() - started) / calls * 1e6


def produce_with(producer: Any, callback: Any = None) -> Callable[[int], None]:
    def run(n: int) -> None:
        produce = producer.produce
        if callback is None:
            for i in range(n):
                produce(TOPIC, VALUE, KEYS[i % 10007])
        else:
            for i in range(n):
                produce(TOPIC, VALUE, KEYS[i % 10007], on_delivery=callback)
        producer.poll(0)

    return run


def send_with(producer: KafkaProducer, keep: bool) -> Callable[[int], None]:
    def run(n: int) -> None:
        call = producer.send
        if keep:
            kept = [call(TOPIC, VALUE, key=KEYS[i % 10007]) for i in range(n)]
            del kept
        else:
            for i in range(n):
                call(TOPIC, VALUE, key=KEYS[i % 10007])

    return run


def pure_python(make: Callable[[], Any]) -> Any:
    """A producer built without the C extension's paths (as where it is not built)."""
    os.environ["SHMKAFKA_PURE_PYTHON"] = "1"
    try:
        return make()
    finally:
        del os.environ["SHMKAFKA_PURE_PYTHON"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    delivered = [0]

    def on_delivery(error: Any, message: Any) -> None:
        delivered[0] += 1

    with run_tansu() as broker:
        conf = {"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                "queue.buffering.max.messages": 2_000_000}  # fmt: skip
        theirs = confluent_kafka.Producer(conf)
        ours = Producer({**conf, "shmkafka.pool": "bench-calls-c"})
        ours_py = pure_python(lambda: Producer({**conf, "shmkafka.pool": "bench-calls-py"}))
        kp = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, pool="bench-kp-c")
        kp_py = pure_python(
            lambda: KafkaProducer(
                bootstrap_servers=broker.bootstrap, linger_ms=5, pool="bench-kp-py"
            )
        )
        runs = {
            "confluent-kafka Producer.produce": (produce_with(theirs), theirs.flush),
            "shmkafka Producer.produce": (produce_with(ours), ours.flush),
            "shmkafka KafkaProducer.send": (send_with(kp, False), kp.flush),
            "shmkafka KafkaProducer.send, kept": (send_with(kp, True), kp.flush),
            "confluent-kafka produce + callback": (produce_with(theirs, on_delivery), theirs.flush),
            "shmkafka produce + callback": (produce_with(ours, on_delivery), ours.flush),
            "pure Python: Producer.produce": (produce_with(ours_py), ours_py.flush),
            "pure Python: KafkaProducer.send": (send_with(kp_py, False), kp_py.flush),
        }
        results: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, (run, flush) in runs.items():
                results[name].append(timed(args.calls, run))
                flush(60)
        for producer in (ours, ours_py, kp, kp_py):
            producer.close()
    print(f"µs per call, {args.calls} calls, {args.rounds} rounds (best / median; "
          f"x: median / confluent-kafka's median, the same kind of call)")  # fmt: skip
    base = statistics.median(results["confluent-kafka Producer.produce"])
    with_callback = statistics.median(results["confluent-kafka produce + callback"])
    for name, values in results.items():
        median = statistics.median(values)
        ratio = median / (with_callback if "callback" in name else base)
        print(f"  {name:36s} {min(values):6.2f} / {median:6.2f}   {ratio:5.2f}x")
    print(f"  (delivery callbacks called: {delivered[0]})")


if __name__ == "__main__":
    main()
