"""broker_stub's produce throughput beside Tansu's, one run: confluent-kafka producing into each.

    make bench-broker-stub    # or: .venv/bin/python perf/bench_broker_stub.py [--records N]

One confluent-kafka producer sends N records (100-byte values, 16-byte keys, acks=1, lz4,
linger 5 ms) to a 16-partition topic, timed from the first produce until flush returns, into
broker_stub (one node, in its own process) and into Tansu, alternately, best of R rounds.
Broker CPU seconds are measured apart (from /proc). The ratio is stub rate / Tansu rate.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import confluent_kafka

from shmkafka.perf.brokers import RunningBroker, run_broker_stub, run_tansu
from shmkafka.perf.clients import cpu_seconds, produce_retrying
from shmkafka.sender import admin

VALUE = os.urandom(100)
PARTITIONS = 16


def _round(broker: RunningBroker, records: int) -> tuple[float, float]:
    """(records/s, broker CPU seconds) of one round."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin.raise_errors(admin.create_topics(
        broker.bootstrap, [admin.NewTopic(topic, PARTITIONS, 1)], timeout_ms=30_000
    ))  # fmt: skip
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 5,
        "compression.type": "lz4", "partitioner": "murmur2_random", "log_level": 3,
    })  # fmt: skip
    producer.list_topics(topic, timeout=10)
    keys = [i.to_bytes(16, "big") for i in range(records)]
    failed = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed[0] += 1

    cpu = cpu_seconds(broker.pid)
    start = time.monotonic()
    for key in keys:
        produce_retrying(producer, topic, VALUE, key, on_delivery)
    assert producer.flush(120) == 0 and failed[0] == 0, "records were not delivered"
    seconds = time.monotonic() - start
    return records / seconds, cpu_seconds(broker.pid) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    brokers: dict[str, Callable[[], AbstractContextManager[RunningBroker]]] = {
        "broker_stub": lambda: run_broker_stub(nodes=1, partitions=PARTITIONS),
        "tansu": run_tansu,
    }
    best: dict[str, tuple[float, float]] = {}
    print(f"confluent-kafka, {args.records} records x 100 B, acks=1, lz4, linger 5 ms, "
          f"{PARTITIONS} partitions, best of {args.rounds}")  # fmt: skip
    with brokers["broker_stub"]() as stub, brokers["tansu"]() as tansu:
        running = {"broker_stub": stub, "tansu": tansu}
        for _ in range(args.rounds):
            for name, broker in running.items():
                rate, cpu = _round(broker, args.records)
                if rate > best.get(name, (0.0, 0.0))[0]:
                    best[name] = (rate, cpu)
    print(f"{'broker':<12} {'records/s':>12} {'broker CPU s':>13} {'CPU µs/record':>14}")
    for name, (rate, cpu) in best.items():
        print(f"{name:<12} {rate:>12,.0f} {cpu:>13.2f} {cpu / args.records * 1e6:>14.2f}")
    ratio = best["broker_stub"][0] / best["tansu"][0]
    print(f"summary: broker_stub produce rate = {ratio:.2f}x Tansu's (target >= 0.5x)")


if __name__ == "__main__":
    main()
