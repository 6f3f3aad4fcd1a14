"""End-to-end benchmark on Tansu: shmkafka beside kafka-python and confluent-kafka, one run.

    make bench-e2e    # or: .venv/bin/python perf/bench_e2e.py [--records N] [--procs P]

P processes each send N records (100-byte values, 16-byte keys) to a 16-partition topic with
acks=1, lz4, linger.ms=5, batch.size=16384 — one producer per process for kafka-python and
confluent-kafka, one shared pool and Sender for shmkafka; every client through its public API
(``shmkafka.KafkaProducer.send``, ``kafka.KafkaProducer.send``,
``confluent_kafka.Producer.produce``). Each client is timed from a start
barrier until every record is acknowledged (flush returned). CPU seconds of the app processes,
of shmkafka's Sender and of the broker are measured apart (from /proc).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
import uuid
from typing import Any

from shmkafka.perf.brokers import run_tansu
from shmkafka.perf.clients import cpu_seconds, produce_retrying
from shmkafka.sender import admin

VALUE = os.urandom(100)
PARTITIONS = 16


def _keys(proc: int, count: int) -> list[bytes]:
    return [((proc << 40) + i).to_bytes(16, "big") for i in range(count)]


def _report(out: Any, start: float, ok: int, extra: dict[str, Any] | None = None) -> None:
    end = time.monotonic()
    out.put({"start": start, "end": end, "ok": ok, "cpu": cpu_seconds(), **(extra or {})})


def shmkafka_worker(
    bootstrap: str, pool: str, topic: str, proc: int, count: int, barrier: Any, out: Any
) -> None:
    os.environ["SHMKAFKA_SENDER_IDLE_EXIT_MS"] = "1000"  # the pool goes soon after the run
    from shmkafka.facades.kafka_python.producer import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=5, compression_type="lz4",
        batch_size=16384, enable_idempotence=False, pool=pool,
    )  # fmt: skip
    producer.partitions_for(topic)
    keys = _keys(proc, count)
    barrier.wait()
    start = time.monotonic()
    futures = [producer.send(topic, VALUE, key) for key in keys]
    producer.flush(600)
    ok = sum(1 for f in futures if f.succeeded())
    sender = producer._handle.pool.sender()[0]  # (for its CPU time only)
    _report(out, start, ok, {"sender_cpu": cpu_seconds(sender)})  # the last to finish sees it all
    producer.close(30)


def kafka_python_worker(
    bootstrap: str, topic: str, proc: int, count: int, barrier: Any, out: Any
) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=5, compression_type="lz4",
        batch_size=16384, enable_idempotence=False,
    )  # fmt: skip
    producer.partitions_for(topic)
    keys = _keys(proc, count)
    barrier.wait()
    start = time.monotonic()
    futures = [producer.send(topic, VALUE, key) for key in keys]
    producer.flush(600)
    ok = sum(1 for f in futures if f.succeeded())
    _report(out, start, ok)
    producer.close(10)


def confluent_worker(
    bootstrap: str, topic: str, proc: int, count: int, barrier: Any, out: Any
) -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "compression.type": "lz4",
            "batch.size": 16384, "enable.idempotence": False, "partitioner": "murmur2_random",
        }
    )  # fmt: skip
    producer.list_topics(topic, timeout=10)
    keys = _keys(proc, count)
    delivered = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered[0] += 1

    barrier.wait()
    start = time.monotonic()
    for key in keys:
        produce_retrying(producer, topic, VALUE, key, on_delivery)
    producer.flush(600)
    _report(out, start, delivered[0])


def _run(target: Any, args_for: Any, procs: int) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs)
    out = ctx.Queue()
    workers = [ctx.Process(target=target, args=(*args_for(i), barrier, out)) for i in range(procs)]
    for w in workers:
        w.start()
    results = [out.get(timeout=900) for _ in workers]
    for w in workers:
        w.join(60)
    return results


def _run_client(
    client: str, bootstrap: str, topic: str, records: int, procs: int
) -> list[dict[str, Any]]:
    if client == "shmkafka":
        pool = f"bench-e2e-{uuid.uuid4().hex[:8]}"
        return _run(shmkafka_worker, lambda i: (bootstrap, pool, topic, i, records), procs)
    if client == "kafka-python":
        return _run(kafka_python_worker, lambda i: (bootstrap, topic, i, records), procs)
    return _run(confluent_worker, lambda i: (bootstrap, topic, i, records), procs)


def _create_topic(bootstrap: str, topic: str) -> None:
    admin.raise_errors(
        admin.create_topics(bootstrap, [admin.NewTopic(topic, PARTITIONS, 1)], timeout_ms=30_000)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=250_000, help="records per process")
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--clients", default="shmkafka,kafka-python,confluent-kafka")
    args = parser.parse_args()
    clients = args.clients.split(",")
    total = args.records * args.procs
    print(
        f"{args.procs} processes x {args.records} records, 100-byte values, 16-byte keys, "
        f"lz4, acks=1, linger 5 ms, {PARTITIONS} partitions, Tansu on loopback"
    )
    print(f"{'client':<16} {'records/s':>12} {'MB/s':>7} {'seconds':>8} {'app CPU s':>10} "
          f"{'sender CPU s':>12} {'broker CPU s':>12} {'acked':>9}")  # fmt: skip
    with run_tansu() as broker:
        rates: dict[str, float] = {}
        for client in clients:
            topic = f"bench-{client}-{uuid.uuid4().hex[:6]}"
            _create_topic(broker.bootstrap, topic)
            broker_cpu = cpu_seconds(broker.pid)
            results = _run_client(client, broker.bootstrap, topic, args.records, args.procs)
            broker_cpu = cpu_seconds(broker.pid) - broker_cpu
            seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
            sender_cpu = max(r.get("sender_cpu", 0.0) for r in results)
            acked = sum(r["ok"] for r in results)
            rates[client] = total / seconds
            print(
                f"{client:<16} {total / seconds:>12,.0f} {total * 116 / seconds / 1e6:>7.1f} "
                f"{seconds:>8.2f} {sum(r['cpu'] for r in results):>10.2f} {sender_cpu:>12.2f} "
                f"{broker_cpu:>12.2f} {acked:>9}"
            )
        if "shmkafka" in rates:
            ratios = ", ".join(
                f"{rates['shmkafka'] / v:.2f}x {k}" for k, v in rates.items() if k != "shmkafka"
            )
            print(f"summary: shmkafka aggregate throughput = {ratios}")


if __name__ == "__main__":
    main()
