"""Scale: shmkafka's confluent API (``shmkafka.confluent_kafka.Producer``) beside
confluent-kafka's ``Producer``, each at its own defaults, in one run on one broker.

    python perf/bench_scale.py                       # every scenario
    python perf/bench_scale.py --scenario topics --topics 10,1000,10000 --seconds 5

The broker is librdkafka's 3-node mock cluster (through confluent_kafka, in this process):
written in C, it auto-creates each topic with 4 partitions and keeps up with both clients,
where Tansu's in-memory store slows down as it holds thousands of topics (``--broker
tansu`` runs there anyway: topics are then created first, with the same partition counts).

Scenarios (each client in turn, the same workload):
- ``topics``: P processes, one producer each, send 100-byte values (``--record-size``)
  round-robin over T topics of 4 partitions. A warm-up first sends one record to every
  topic and flushes (so both clients know every topic: the timed phase is the steady
  state).
- ``partitions``: 100,000 partitions in total (1,000 topics of 100 on Tansu, 25,000 of 4
  on the mock cluster) warmed up the same way, then records keyed over the 1,000
  partitions of 10 (or 250) of the topics: 1% hot.
- ``producers``: 64 processes with 16 producer objects each (1,024), each process sending
  round-robin through its producers to one topic.
- ``first-send``: one process sends one record to each of N new topics in turn and waits
  for it (produce, then flush): the time from a topic's first produce() to its delivery.

Throughput is records acknowledged per second of the timed phase: from a barrier, every
process sends for ``--seconds`` (or ``--records``, whichever ends first), then flushes; the
phase ends when the last process has every record acknowledged. PSS is summed over the app
processes (and shmkafka's Sender), taken after every process flushed, while all are alive:
shared pages (the pool's segment, libraries) count once. The broker runs in its own process
and is not counted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil

# (the workers import this module: what only the parent uses is imported there, so that
# neither client's processes carry it)

# shmkafka's kafka-python and confluent-kafka drop-ins, and confluent-kafka itself
CLIENTS = ("shmkafka", "shmkafka-confluent", "confluent-kafka")
# the value every record carries; --record-size sets it for the spawned workers too
VALUE = b"v" * int(os.environ.get("SHMKAFKA_BENCH_RECORD_SIZE", "100"))


def _producer(client: str, bootstrap: str, pool: str) -> Any:
    if client == "shmkafka":
        from shmkafka.kafka import KafkaProducer

        return KafkaProducer(bootstrap_servers=bootstrap, pool=pool)
    if client == "shmkafka-confluent":
        from shmkafka.confluent_kafka import Producer

        return Producer({"bootstrap.servers": bootstrap, "shmkafka.pool": pool})
    import confluent_kafka

    return confluent_kafka.Producer({"bootstrap.servers": bootstrap})


def _flush(producer: Any, timeout: float) -> int:
    """Records left after the flush (KafkaProducer's flush raises instead)."""
    left = producer.flush(timeout)
    return int(left or 0)


def _produce(producer: Any, topic: str, key: bytes | None = None) -> None:
    if not hasattr(producer, "produce"):  # KafkaProducer
        producer.send(topic, VALUE, key=key)
        return
    while True:
        try:
            producer.produce(topic, VALUE, key)
            return
        except BufferError:  # a full queue: serve reports, then again (as users do)
            producer.poll(0.005)


def _pss(pid: int) -> int:
    try:
        return int(psutil.Process(pid).memory_full_info().pss)
    except psutil.Error:
        return 0


def _worker(client: str, bootstrap: str, pool: str, spec: dict[str, Any], start: Any,
            done: Any, out: Any) -> None:  # fmt: skip
    producers = [_producer(client, bootstrap, pool) for _ in range(spec["producers"])]
    for topic in spec["warm"]:  # every topic once: both clients then know them all
        _produce(producers[0], topic)
    for p in producers:
        _flush(p, 300)
    hot, keys, limit = spec["hot"], spec["keys"], spec["records"]
    start.wait()
    began = time.monotonic()
    stop = began + spec["seconds"]
    records = 0
    while records < limit and (records % 1000 or time.monotonic() < stop):
        key = b"k%d" % (records % keys) if keys else None
        _produce(producers[records % len(producers)], hot[records % len(hot)], key)
        records += 1
    left = sum(_flush(p, 300) for p in producers)
    elapsed = time.monotonic() - began
    done.wait()  # every process flushed: measure the PSS of all at one moment
    out.put({"elapsed": elapsed, "records": records, "left": left, "pss": _pss(os.getpid())})
    done.wait()  # the parent measured the Sender; now exit together
    for p in producers:
        _flush(p, 10)


def _sender_pss(pool: str) -> int:
    from shmkafka.pool.stat import pool_stat

    try:
        return _pss(pool_stat(pool)["sender"]["pid"])
    except Exception:  # noqa: BLE001 (no pool: confluent-kafka's run)
        return 0


def run_clients(bootstrap: str, specs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    results = {}
    ctx = mp.get_context("spawn")
    for client in CLIENTS:
        pool = "scale" + uuid.uuid4().hex[:8]
        start, done = ctx.Barrier(len(specs) + 1), ctx.Barrier(len(specs) + 1)
        out = ctx.Queue()
        workers = [
            ctx.Process(target=_worker, args=(client, bootstrap, pool, s, start, done, out))
            for s in specs
        ]
        for w in workers:
            w.start()
        start.wait(timeout=1800)
        done.wait(timeout=1800)
        rows = [out.get(timeout=600) for _ in workers]
        sender = _sender_pss(pool) if client.startswith("shmkafka") else 0
        done.wait(timeout=60)
        for w in workers:
            w.join(120)
        records = sum(r["records"] for r in rows)
        assert all(r["left"] == 0 for r in rows), rows
        results[client] = {
            "records_per_s": records / max(r["elapsed"] for r in rows),
            "pss_mib": (sum(r["pss"] for r in rows) + sender) / 2**20,
            "sender_pss_mib": sender / 2**20,
        }
    return results


CREATE_TOPICS = True  # False on the mock cluster: it auto-creates them (4 partitions)
SETTLE_S = 20.0


def _create(bootstrap: str, names: list[str], partitions: int) -> None:
    if not CREATE_TOPICS:
        return
    from shmkafka.sender import admin

    for i in range(0, len(names), 500):
        errors = admin.create_topics(
            bootstrap, [admin.NewTopic(n, partitions, 1) for n in names[i : i + 500]],
            timeout_ms=120_000,
        )  # fmt: skip
        admin.raise_errors(errors)


def topics_scenario(bootstrap: str, count: int, processes: int, records: int,
                    seconds: float) -> dict[str, Any]:  # fmt: skip
    names = [f"sc{uuid.uuid4().hex[:6]}-{i}" for i in range(count)]
    _create(bootstrap, names, 4)
    spec = {"producers": 1, "warm": names, "hot": names, "keys": 0, "records": records,
            "seconds": seconds}  # fmt: skip
    return {"topics": count, **run_clients(bootstrap, [spec] * processes)}


def partitions_scenario(bootstrap: str, processes: int, records: int,
                        seconds: float) -> dict[str, Any]:  # fmt: skip
    # 100,000 partitions: 1,000 topics of 100 where topics are created first (Tansu), else
    # 25,000 auto-created topics of 4; the hot 1% are those of the first 10 or 250 topics
    topics, partitions = (1000, 100) if CREATE_TOPICS else (25_000, 4)
    names = [f"sp{uuid.uuid4().hex[:6]}-{i}" for i in range(topics)]
    _create(bootstrap, names, partitions)
    hot = names[: 1000 // partitions]
    if CREATE_TOPICS:
        time.sleep(SETTLE_S)  # (the broker settles after creating 100,000 partitions)
    spec = {"producers": 1, "warm": names, "hot": hot, "keys": 1000, "records": records,
            "seconds": seconds}  # fmt: skip
    return {"partitions": 100_000, "hot": 1000, **run_clients(bootstrap, [spec] * processes)}


def producers_scenario(bootstrap: str, processes: int, per_process: int, records: int,
                       seconds: float) -> dict[str, Any]:  # fmt: skip
    (name,) = names = [f"so{uuid.uuid4().hex[:6]}"]
    _create(bootstrap, names, 16)
    spec = {"producers": per_process, "warm": [name], "hot": [name], "keys": 0,
            "records": records, "seconds": seconds}  # fmt: skip
    result = run_clients(bootstrap, [spec] * processes)
    return {"producers": processes * per_process, "processes": processes, **result}


def _first_sends(client: str, bootstrap: str, names: list[str], out: Any) -> None:
    producer = _producer(client, bootstrap, "first" + uuid.uuid4().hex[:8])
    _produce(producer, names[0])  # connect and learn the cluster first
    _flush(producer, 60)
    times = []
    for topic in names[1:]:
        began = time.monotonic()
        _produce(producer, topic)
        assert _flush(producer, 60) == 0
        times.append(time.monotonic() - began)
    out.put(times)


def first_send_scenario(bootstrap: str, count: int) -> dict[str, Any]:
    result: dict[str, Any] = {"topics": count}
    ctx = mp.get_context("spawn")
    for client in CLIENTS:
        names = [f"sf{uuid.uuid4().hex[:6]}-{i}" for i in range(count + 1)]
        _create(bootstrap, names, 4)
        out = ctx.Queue()
        worker = ctx.Process(target=_first_sends, args=(client, bootstrap, names, out))
        worker.start()
        times = out.get(timeout=1800)
        worker.join(60)
        result[client] = {"median_ms": 1000 * statistics.median(times),
                          "p90_ms": 1000 * statistics.quantiles(times, n=10)[-1]}  # fmt: skip
    return result


def _run(scenario: str, bootstrap: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    if scenario == "topics":
        return [
            topics_scenario(bootstrap, int(count), args.processes, args.records, args.seconds)
            for count in args.topics.split(",")
        ]
    if scenario == "partitions":
        return [partitions_scenario(bootstrap, args.processes, args.records, args.seconds)]
    if scenario == "producers":
        return [producers_scenario(bootstrap, 64, 16, args.records, args.seconds)]
    return [first_send_scenario(bootstrap, 100)]


@contextmanager
def _broker(name: str) -> Iterator[str]:
    """The bootstrap of the chosen broker, running until the block ends."""
    global CREATE_TOPICS
    if name == "tansu":
        from shmkafka.perf.brokers import run_tansu

        with run_tansu() as broker:
            yield f"{broker.host}:{broker.port}"
        return
    import confluent_kafka

    CREATE_TOPICS = False
    holder = confluent_kafka.Producer(
        {"test.mock.num.brokers": 3, "bootstrap.servers": "unused", "log_level": 3}
    )
    brokers = holder.list_topics(timeout=10).brokers
    yield ",".join(f"{b.host}:{b.port}" for b in sorted(brokers.values(), key=lambda b: b.id))
    del holder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append",
                        choices=["topics", "partitions", "producers", "first-send"])  # fmt: skip
    parser.add_argument("--broker", choices=["mock", "tansu"], default="mock")
    parser.add_argument("--topics", default="10,1000,10000")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--records", type=int, default=1_000_000, help="at most, per process")
    parser.add_argument("--seconds", type=float, default=5.0, help="of sending, per process")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--record-size", type=int, default=100, help="bytes of each value")
    args = parser.parse_args(argv)
    os.environ["SHMKAFKA_BENCH_RECORD_SIZE"] = str(args.record_size)  # (the workers read it)
    scenarios = args.scenario or ["topics", "partitions", "producers", "first-send"]
    results = []
    with _broker(args.broker) as bootstrap:
        for scenario in scenarios:
            for row in _run(scenario, bootstrap, args):
                results.append({"scenario": scenario, **row})
                print(json.dumps(results[-1]), flush=True)
    for row in results:
        theirs = row["confluent-kafka"]
        for client in CLIENTS[:2]:
            ours = row[client]
            ratios = {k: round(ours[k] / theirs[k], 2) for k in ours if theirs.get(k)}
            print(row["scenario"], {k: v for k, v in row.items() if k not in CLIENTS},
                  f"{client} / confluent-kafka:", ratios)  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
