"""The apps of a host whose power is cut: each sends numbered records through one API of a
durable pool and writes, after each send returned, the record's number to a log on the
test's own disk (which no cut touches). A record is acknowledged (``sync``) once its number
is in the log; the checker reads the logs after every cut."""

from __future__ import annotations

import asyncio
import os
import time
import zlib
from typing import Any

API_NAMES = ("kafka", "confluent", "aiokafka")
# One Sender serves the pool: the Sender settings every API's producer gives must agree
SAME: dict[str, Any] = {"linger_ms": 2, "client_id": "powercut", "request_timeout_ms": 30_000}


def value_of(proc: int, seq: int) -> bytes:
    """A record that tells whether it was delivered whole: its process, number and CRC32."""
    body = f"{proc}:{seq}:" + "x" * (seq % 97)
    return f"{body}:{zlib.crc32(body.encode())}".encode()


def parse(value: bytes) -> tuple[int, int]:
    """(process, number) of a record written by ``value_of``; AssertionError if torn."""
    body, _, crc = value.decode().rpartition(":")
    assert zlib.crc32(body.encode()) == int(crc), f"a torn record was delivered: {value!r}"
    proc, seq, _ = body.split(":", 2)
    return int(proc), int(seq)


def produce(api: str, pool: str, settings: dict[str, Any], topic: str, proc: int,
            count: int, log_path: str) -> None:  # fmt: skip
    """Send records 0..count-1 of process ``proc`` (keyed by number, over the partitions),
    logging each once its send returned; runs until done or killed by the cut."""
    with open(log_path, "a", buffering=1) as log:
        if api == "aiokafka":
            asyncio.run(_produce_aiokafka(pool, settings, topic, proc, count, log))
            return
        if api == "confluent":
            _produce_confluent(pool, settings, topic, proc, count, log)
            return
        from shmkafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=settings["bootstrap"], pool=pool, pool_dir=settings["dir"],
            pool_durability=settings["mode"], pool_flush_ms=settings["flush_ms"], **SAME,
        )  # fmt: skip
        for seq in range(count):
            producer.send(topic, value_of(proc, seq), key=b"%d" % (seq % 5))
            log.write(f"{seq} {time.time():.6f}\n")
        producer.flush(60)
        producer.close(10)


def _produce_confluent(pool: str, settings: dict[str, Any], topic: str, proc: int, count: int,
                       log: Any) -> None:  # fmt: skip
    from shmkafka import Producer

    producer = Producer({
        "bootstrap.servers": settings["bootstrap"], "shmkafka.pool": pool,
        "shmkafka.pool.dir": settings["dir"], "shmkafka.pool.durability": settings["mode"],
        "shmkafka.pool.flush.ms": settings["flush_ms"], "enable.idempotence": True,
        "linger.ms": SAME["linger_ms"], "client.id": SAME["client_id"],
        "request.timeout.ms": SAME["request_timeout_ms"],
    })  # fmt: skip
    for seq in range(count):
        producer.produce(topic, value_of(proc, seq), key=b"%d" % (seq % 5))
        log.write(f"{seq} {time.time():.6f}\n")
        producer.poll(0)
    producer.flush(60)


async def _produce_aiokafka(pool: str, settings: dict[str, Any], topic: str, proc: int,
                            count: int, log: Any) -> None:  # fmt: skip
    from shmkafka.aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=settings["bootstrap"], pool=pool, pool_dir=settings["dir"],
        pool_durability=settings["mode"], pool_flush_ms=settings["flush_ms"],
        enable_idempotence=True, **SAME,
    )  # fmt: skip
    await producer.start()
    try:
        for seq in range(count):
            await producer.send(topic, value_of(proc, seq), key=b"%d" % (seq % 5))
            log.write(f"{seq} {time.time():.6f}\n")
        await producer.flush()
    finally:
        await producer.stop()


def main() -> None:  # (spawned by the test with its arguments in the environment)
    import json

    args = json.loads(os.environ["POWERCUT_WORKER"])
    produce(**args)


if __name__ == "__main__":
    main()
