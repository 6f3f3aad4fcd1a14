"""broker_stub's durable log: produce throughput with ``--flush sync`` and group commit,
beside one fsync per request, in the same run.

    make bench-durable-log    # or: .venv/bin/python perf/bench_durable_log.py [--records N]

T confluent-kafka producers (threads, one producer each) send N records each (100-byte
values, acks=all, linger 0, small batches: many small produce requests, the case group
commit is for) to an 8-partition topic on a one-node broker_stub that keeps its log in a
temporary directory and acknowledges only after fsync. Best of R rounds per mode, modes
alternating; the ratio is group commit's rate over the per-request fsync rate.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid

import confluent_kafka

from shmkafka.perf.brokers import run_broker_stub

VALUE = bytes(100)
MODES = {"group commit": (), "fsync per request": ("--no-group-commit",)}


def _round(bootstrap: str, producers: int, records: int, batch_size: int) -> float:
    topic = f"durable-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
            "batch.size": batch_size, "log_level": 3}  # fmt: skip
    warm = confluent_kafka.Producer(conf)
    warm.produce(topic, b"warm")
    assert warm.flush(30) == 0
    clients = [confluent_kafka.Producer(conf) for _ in range(producers)]

    def send(producer: confluent_kafka.Producer, index: int) -> None:
        for i in range(records):
            while True:
                try:
                    producer.produce(topic, VALUE, partition=(index + i) % 8)
                    break
                except BufferError:
                    producer.poll(0.01)
        assert producer.flush(300) == 0

    start = time.monotonic()
    threads = [threading.Thread(target=send, args=(p, i)) for i, p in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return producers * records / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1500, help="per producer")
    parser.add_argument("--producers", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=200, help="bytes: ~1 record")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    best = dict.fromkeys(MODES, 0.0)
    print(
        f"{args.producers} confluent-kafka producers x {args.records} records, 100 B, acks=all,"
        f" batch.size {args.batch_size}, --flush sync, best of {args.rounds}"
    )
    for _ in range(args.rounds):
        for mode, extra in MODES.items():
            with tempfile.TemporaryDirectory() as directory:
                flags = ("--storage", directory, "--flush", "sync", *extra)
                with run_broker_stub(nodes=1, partitions=8, extra=flags) as broker:
                    rate = _round(broker.bootstrap, args.producers, args.records, args.batch_size)
                    best[mode] = max(best[mode], rate)
    for mode, rate in best.items():
        print(f"{mode:<20} {rate:>12,.0f} records/s")
    ratio = best["group commit"] / best["fsync per request"]
    print(f"summary: group commit = {ratio:.2f}x one fsync per request")


if __name__ == "__main__":
    main()
