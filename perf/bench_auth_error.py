"""How long a wrong password takes to reach the app, shmkafka beside its peers, one run.

    make bench-auth-error    # or: .venv/bin/python perf/bench_auth_error.py [--repeat N]

broker_stub listens with SASL PLAIN on 127.0.0.1; each client is given a wrong password and
timed, through its public API, from its constructor to the first thing the app sees of it:

- confluent-kafka and ``shmkafka.Producer``: the first ``error_cb`` with ``_AUTHENTICATION``
  (``poll`` in a loop), and the first delivery report of a record produced at once (both
  keep the record through refused logins until ``message.timeout.ms``, 5 s here);
- kafka-python and ``shmkafka.KafkaProducer``: the exception out of the constructor or
  ``send`` (kafka-python waits ``bootstrap_timeout_ms``, 30 s by default, then raises
  ``KafkaTimeoutError``; shmkafka raises ``SaslAuthenticationFailedError``).

Each shmkafka run uses a new pool, so its Sender's start is counted too.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import confluent_kafka
import kafka

from shmkafka.broker_stub.auth import SaslConfig
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.confluent_kafka import Producer
from shmkafka.kafka import KafkaProducer

RIGHT, WRONG = "right-password", "wrong-password"


def confluent_like(make: Any, bootstrap: str) -> tuple[float, float]:
    """(seconds to error_cb, seconds to the delivery report) for a Producer class."""
    started = time.monotonic()
    seen: dict[str, float] = {}
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": "alice", "sasl.password": WRONG,
            "message.timeout.ms": 5_000,
            "error_cb": lambda e: seen.setdefault("error", time.monotonic() - started)}  # fmt: skip
    if make is Producer:
        conf["shmkafka.pool"] = "bench" + uuid.uuid4().hex[:10]
    else:
        conf["log_level"] = 0
    producer = make(conf)
    producer.produce("t", b"x", on_delivery=lambda e, m: seen.setdefault(
        "report", time.monotonic() - started))  # fmt: skip
    while len(seen) < 2 and time.monotonic() - started < 15:
        producer.poll(0.01)
    if hasattr(producer, "purge"):
        producer.purge()
    producer.flush(0)
    return seen.get("error", float("nan")), seen.get("report", float("nan"))


def kafka_python_like(make: Any, bootstrap: str) -> float:
    started = time.monotonic()
    conf: dict[str, Any] = {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT",
                            "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
                            "sasl_plain_password": WRONG}  # fmt: skip
    if make is KafkaProducer:
        conf["pool"] = "bench" + uuid.uuid4().hex[:10]
    producer = None
    try:
        producer = make(**conf)
        producer.send("t", b"x").get(70)
    except Exception:  # noqa: BLE001  (the first error the app sees, whatever its type)
        pass
    finally:
        if producer is not None:
            producer.close(0)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sasl = SaslConfig.make(["PLAIN"], {"alice": RIGHT})
    rows: dict[str, list[float]] = {}
    with BrokerStub(nodes=1, partitions=1, sasl=sasl) as stub:
        for _ in range(args.repeat):
            for name, make in (("confluent-kafka", confluent_kafka.Producer),
                               ("shmkafka.Producer", Producer)):  # fmt: skip
                error, report = confluent_like(make, stub.bootstrap)
                rows.setdefault(f"{name}: error_cb", []).append(error)
                rows.setdefault(f"{name}: delivery report", []).append(report)
            rows.setdefault("shmkafka.KafkaProducer: exception", []).append(
                kafka_python_like(KafkaProducer, stub.bootstrap))  # fmt: skip
        rows.setdefault("kafka-python: exception", []).append(
            kafka_python_like(kafka.KafkaProducer, stub.bootstrap))  # fmt: skip
    print(f"wrong password to what the app sees (median of {args.repeat} runs; kafka-python 1)")
    for name, values in rows.items():
        print(f"  {name:40s} {statistics.median(values):8.3f} s")


if __name__ == "__main__":
    main()
