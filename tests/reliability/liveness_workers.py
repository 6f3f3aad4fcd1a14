"""App processes for the full-rate liveness test (importable by spawn): each sends through
one public API as fast as it can for a while, flushes within a bound, and reports every
record's result: per partition the offsets in send order, and the counts of failed and of
unresolved records (whose result never came)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array
from typing import Any

FLUSH_BOUND_S = 60.0  # well past any result: the records are acknowledged in milliseconds
MODES = ("kafka-python futures", "kafka-python fire-and-forget", "confluent on_delivery",
         "aiokafka send")  # fmt: skip


def _key(proc: int, seq: int) -> bytes:
    return b"%d:%d" % (proc, seq)


def _seq(key: bytes) -> int:
    return int(key.split(b":")[1])


class Outcome:
    """Every record's result, in send order."""

    def __init__(self, count: int) -> None:
        self.partition = array("b", [-1]) * count
        self.offset = array("q", [-1]) * count
        self.failed = 0

    def report(self, sent: int, flush_s: float, unresolved: int) -> dict[str, Any]:
        """Per partition the offsets of its records in send order (bytes of an array)."""
        by_partition: dict[int, array[int]] = {}
        for seq in range(sent):
            if self.partition[seq] >= 0:
                by_partition.setdefault(self.partition[seq], array("q")).append(self.offset[seq])
        return {"sent": sent, "failed": self.failed, "unresolved": unresolved,
                "flush_s": flush_s,
                "offsets": {p: a.tobytes() for p, a in by_partition.items()}}  # fmt: skip


def run(mode: str, bootstrap: str, topic: str, pool: str, proc: int, size: int,
        seconds: float, barrier: Any, out: Any) -> None:  # fmt: skip
    """One app process; reports through ``out`` (an error as {"error": ...})."""
    try:
        runner = {MODES[0]: _futures, MODES[1]: _fire_and_forget, MODES[2]: _confluent,
                  MODES[3]: lambda *a: asyncio.run(_aiokafka(*a))}[mode]  # fmt: skip
        out.put(runner(bootstrap, topic, pool, proc, bytes(size), seconds, barrier))
    except BaseException as exc:
        barrier.abort()
        out.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


def _timed_flush(flush: Any) -> float:
    started = time.monotonic()
    with contextlib.suppress(Exception):  # (a timeout: the unresolved are counted)
        flush(FLUSH_BOUND_S)
    return time.monotonic() - started


def _futures(bootstrap: str, topic: str, pool: str, proc: int, value: bytes, seconds: float,
             barrier: Any) -> dict[str, Any]:  # fmt: skip
    from shmkafka.kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, pool=pool, linger_ms=5)
    try:
        producer.send(topic, b"warm-up").get(30)
        barrier.wait(60)
        futures, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(100):
                futures.append(producer.send(topic, value, key=_key(proc, len(futures))))
        flush_s = _timed_flush(lambda bound: producer.flush(timeout=bound))
        outcome = Outcome(len(futures))
        unresolved = 0
        for seq, future in enumerate(futures):
            if not future.is_done:
                unresolved += 1
            elif future.failed():
                outcome.failed += 1
            else:
                outcome.partition[seq], outcome.offset[seq] = future.value[1], future.value[3]
        return outcome.report(len(futures), flush_s, unresolved)
    finally:
        producer.close(5)


def _fire_and_forget(bootstrap: str, topic: str, pool: str, proc: int, value: bytes,
                     seconds: float, barrier: Any) -> dict[str, Any]:  # fmt: skip
    from shmkafka.kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, pool=pool, linger_ms=5)
    try:
        producer.send(topic, b"warm-up").get(30)
        barrier.wait(60)
        sent, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(100):
                producer.send(topic, value, key=_key(proc, sent))
                sent += 1
        flush_s = _timed_flush(lambda bound: producer.flush(timeout=bound))
        unresolved = producer._handle.undelivered()  # (what flush waited for)
        return Outcome(0).report(0, flush_s, unresolved) | {"sent": sent}
    finally:
        producer.close(5)


def _confluent(bootstrap: str, topic: str, pool: str, proc: int, value: bytes, seconds: float,
               barrier: Any) -> dict[str, Any]:  # fmt: skip
    from shmkafka.confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "shmkafka.pool": pool,
                         "linger.ms": 5})  # fmt: skip
    reports: list[tuple[bytes, int, int] | None] = []

    def on_delivery(err: Any, msg: Any) -> None:
        reports.append(None if err is not None else (msg.key(), msg.partition(), msg.offset()))

    producer.produce(topic, b"warm-up")
    producer.flush(30)
    barrier.wait(60)
    sent, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(100):
            while True:
                try:
                    producer.produce(topic, value, _key(proc, sent), on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.005)
            sent += 1
        producer.poll(0)
    flush_s = _timed_flush(producer.flush)
    outcome = Outcome(sent)
    for report in reports:
        if report is None:
            outcome.failed += 1
        else:
            key, partition, offset = report
            outcome.partition[_seq(key)], outcome.offset[_seq(key)] = partition, offset
    return outcome.report(sent, flush_s, sent - len(reports))


async def _aiokafka(bootstrap: str, topic: str, pool: str, proc: int, value: bytes,
                    seconds: float, barrier: Any) -> dict[str, Any]:  # fmt: skip
    from shmkafka.aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, pool=pool, linger_ms=5)
    await producer.start()
    try:
        await (await producer.send(topic, b"warm-up"))
        await asyncio.get_running_loop().run_in_executor(None, barrier.wait, 60)
        futures: list[asyncio.Future[Any]] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(100):
                futures.append(await producer.send(topic, value, key=_key(proc, len(futures))))
        started = time.monotonic()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(producer.flush(), FLUSH_BOUND_S)
        flush_s = time.monotonic() - started
        outcome, unresolved = Outcome(len(futures)), 0
        for seq, future in enumerate(futures):
            if not future.done():
                unresolved += 1
            elif future.exception() is not None:
                outcome.failed += 1
            else:
                metadata = future.result()
                outcome.partition[seq], outcome.offset[seq] = metadata.partition, metadata.offset
        return outcome.report(len(futures), flush_s, unresolved)
    finally:
        await producer.stop()
