"""Run inside a fresh virtual environment that has only a built shmkafka distribution (and
what it depends on), from a directory outside the tree (tests/dist/check.py copies this
file there): every API, the console producer, ``stat``, ``doctor`` and ``perf`` against
broker_stub. Argument: "built" (the C parts must load) or "pure" (they must not, and the
first producer must say so in one log line). Prints "smoke ok" at the end."""

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
import uuid

import shmkafka
from shmkafka.aiokafka import AIOKafkaProducer
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.confluent_kafka import Producer
from shmkafka.kafka import KafkaProducer

COUNT = 200
EXPECTED = sys.argv[1]
TAG = f"w{uuid.uuid4().hex[:10]}x"  # (a run's own pools: no other run's name contains it)
BIN = os.path.dirname(sys.executable)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"smoke FAILED: {what}")


def delivered(stub: BrokerStub, topic: str) -> int:
    return sum(stub.high_watermark(topic, p) for p in range(stub.partition_count(topic)))


def kafka_python(bootstrap: str) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, pool=TAG + "k", linger_ms=5)
    futures = [p.send("kafka-python", b"%d" % i) for i in range(COUNT)]
    offsets = [f.get(timeout=30).offset for f in futures]
    stat = json.loads(run("stat", "--json", "--pool", TAG + "k"))  # (while the pool is used)
    check(stat["pool"] == TAG + "k" and stat["sender"]["alive"], f"stat: {stat}")
    p.close(timeout=30)
    check(len(offsets) == COUNT and min(offsets) >= 0, "kafka-python: a record had no offset")


def confluent(bootstrap: str) -> None:
    reports: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "shmkafka.pool": TAG + "c", "linger.ms": 5})
    for i in range(COUNT):
        p.produce("confluent", b"%d" % i, on_delivery=lambda err, msg: reports.append(err))
    check(p.flush(30) == 0, "confluent: flush left records")
    check(reports == [None] * COUNT, f"confluent: reports {set(map(str, reports))}")


async def aiokafka(bootstrap: str) -> None:
    async with AIOKafkaProducer(bootstrap_servers=bootstrap, pool=TAG + "a") as p:
        results = await asyncio.gather(
            *(p.send_and_wait("aiokafka", b"%d" % i) for i in range(COUNT))
        )
    check(len(results) == COUNT, "aiokafka: results missing")


def run(*args: str, stdin: str = "") -> str:
    out = subprocess.run(
        [os.path.join(BIN, "shmkafka"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    check(out.returncode == 0, f"shmkafka {' '.join(args)}: {out.returncode}\n{out.stderr}")
    return out.stdout


def main() -> None:
    root = shmkafka.__path__[0]
    check("site-packages" in root, f"shmkafka imported from {root}, not the installation")
    lines = Lines()
    logging.getLogger("shmkafka").addHandler(lines)
    version = run("version")
    c_line = "C extension: built" if EXPECTED == "built" else "C extension: NOT built"
    check(c_line in version, f"expected {c_line!r}: {version}")
    with BrokerStub(nodes=1, partitions=3) as stub:
        for topic in ("kafka-python", "confluent", "aiokafka", "console"):
            stub.create_topic(topic, 3)
        kafka_python(stub.bootstrap)
        confluent(stub.bootstrap)
        asyncio.run(aiokafka(stub.bootstrap))
        run(
            "produce",
            "--bootstrap-server",
            stub.bootstrap,
            "--topic",
            "console",
            "--producer-property",
            f"shmkafka.pool={TAG}p",
            stdin="".join(f"line {i}\n" for i in range(50)),
        )
        for topic, count in (
            ("kafka-python", COUNT),
            ("confluent", COUNT),
            ("aiokafka", COUNT),
            ("console", 50),
        ):
            check(delivered(stub, topic) == count, f"{topic}: {delivered(stub, topic)} of {count}")
    run("doctor")
    before = set(os.listdir("/dev/shm"))
    run("perf", "--processes", "2", "--duration", "2", "--record-size", "100", "--quiet")
    warned = [line for line in lines.lines if "C extension was not built" in line]
    check(len(warned) == (EXPECTED == "pure"), f"the pure-Python log line: {warned}")
    deadline = time.monotonic() + 30  # (the idle Senders remove their pools)

    def ours() -> list[str]:  # (the APIs' pools by their tag, perf's as new perf- pools)
        return [n for n in os.listdir("/dev/shm")
                if TAG in n or ("shmkafka.perf-" in n and n not in before)]  # fmt: skip

    while ours() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = ours()
    check(not left, f"pools and semaphores left in /dev/shm 30 s after the last producer: {left}")
    print("smoke ok" + (f": {warned[0]}" if warned else ""))


main()
