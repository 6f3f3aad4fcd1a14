"""Instructions per call of the send path, counted by callgrind (stable where times are not).

    .venv/bin/python perf/bench_send_path.py [--records N]

One process sends N 100-byte records with 16-byte keys through each public API's common
call (``KafkaProducer.send``, ``Producer.produce``) to broker_stub (its own process, not
counted), under ``valgrind --tool=callgrind``; the inclusive instructions of the C entry
(``SendEntry_send``, ``ProduceEntry_produce``) and of the append beneath it
(``fast_append``), each divided by the calls made. Needs valgrind (Debian's package).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

VALUE = b"v" * 100
KEYS = [b"k%015d" % i for i in range(10007)]
WARM = 2000
FUNCTIONS = {"kafka": "SendEntry_send", "confluent": "ProduceEntry_produce"}


def send(api: str, records: int, bootstrap: str) -> None:
    """The counted part: WARM records, a flush, then ``records`` more and a flush."""
    if api == "kafka":
        from shmkafka.kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        for i in range(WARM + records):
            producer.send("calls", VALUE, key=KEYS[i % len(KEYS)])
            if i == WARM:
                producer.flush()
        producer.flush()
        producer.close()
        return
    from shmkafka.confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(WARM + records):
        p.produce("calls", VALUE, KEYS[i % len(KEYS)])
        if i % 10_000 == 0:
            p.poll(0)
    p.flush(60)


def inclusive(annotated: str, function: str) -> int:
    """The inclusive instruction count callgrind_annotate gives a function."""
    for line in annotated.splitlines():
        if re.search(rf"[:\s]{function} \[", line):
            return int(line.split()[0].replace(",", ""))
    raise LookupError(f"{function} is not in the profile (is the C extension built?)")


def measure(api: str, records: int, bootstrap: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "callgrind.out")
        command = [
            "valgrind", "--tool=callgrind", "--trace-children=no", f"--callgrind-out-file={out}",
            sys.executable, __file__, "--send", api, "--records", str(records),
            "--bootstrap", bootstrap,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if not line.startswith("==")]
            raise RuntimeError(f"{api}: the counted run failed: {errors[-5:]}")
        annotated = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", out],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    calls = WARM + records
    return {name: inclusive(annotated, name) / calls for name in (FUNCTIONS[api], "fast_append")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--send", choices=sorted(FUNCTIONS), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.send:
        send(args.send, args.records, args.bootstrap)
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench_send_path needs valgrind: apt-get install valgrind")
    from shmkafka.perf.brokers import run_broker_stub

    with run_broker_stub() as broker:
        for api in ("kafka", "confluent"):
            counts = measure(api, args.records, broker.bootstrap)
            print(f"{api:<10} " + "  ".join(f"{name} {n:,.0f}/call" for name, n in counts.items()))


if __name__ == "__main__":
    main()
