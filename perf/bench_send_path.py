"""Instructions per call of the send path, counted by callgrind (stable where times are not).

    .venv/bin/python perf/bench_send_path.py [--records N] [--case common|new-batch]

One process sends N records with 16-byte keys through each public API's common call
(``KafkaProducer.send``, ``Producer.produce``) to broker_stub (its own process, not
counted), under ``valgrind --tool=callgrind``; the inclusive instructions of the C entry
(``SendEntry_send``, ``ProduceEntry_produce``) and of the append beneath it
(``fast_append``), each per call (the difference of a run of N and one of 2N calls, so the
first calls' cost cancels out), and how many times per call the C append
tried a lock (its calls of ``sem_trywait``: one a take while nobody holds it). Needs
valgrind (Debian's package).

- ``common``: 100-byte records, the producer's defaults: the C entry appends them.
- ``new-batch``: the record that falls off the C path. ``batch_size`` 1024 (one slab of
  1 KiB), one record a batch and 1,500-byte records, each a new batch of two slabs, under a
  size limit (``max_request_size``, ``message.max.bytes``) of ``SMALL_LIMIT``: each record
  is within the C append's slack of the limit, so C leaves it to Python, whose exact size
  check decides (``_append_write.c``'s ``slabs_needed``); what Python does with it, and
  how many C attempts it makes first, is what is counted.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

VALUES = {"common": b"v" * 100, "new-batch": b"v" * 1500}
KEYS = [b"k%015d" % i for i in range(10007)]
WARM = 2000
SMALL_LIMIT = 1_650  # (a 1,500-byte record's batch is within 96 bytes of it, and fits)
FUNCTIONS = {"kafka": "SendEntry_send", "confluent": "ProduceEntry_produce"}


def send(api: str, records: int, bootstrap: str, case: str) -> None:
    """The counted part: WARM records, a flush, then ``records`` more and a flush."""
    value = VALUES[case]
    small = case == "new-batch"
    if api == "kafka":
        from shmkafka.kafka import KafkaProducer

        sizes = {"batch_size": 1024, "batch_max_records": 1, "max_request_size": SMALL_LIMIT}
        sizes = sizes if small else {}
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **sizes)
        for i in range(WARM + records):
            producer.send("calls", value, key=KEYS[i % len(KEYS)])
            if i == WARM:
                producer.flush()
        producer.flush()
        producer.close()
        return
    from shmkafka.confluent_kafka import Producer

    conf = {"batch.size": 1024, "batch.num.messages": 1, "message.max.bytes": SMALL_LIMIT}
    conf = conf if small else {}
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for i in range(WARM + records):
        p.produce("calls", value, KEYS[i % len(KEYS)])
        if i % 1_000 == 0:
            p.poll(0)
    p.flush(60)


def inclusive(annotated: str, function: str) -> int:
    """The inclusive instruction count callgrind_annotate gives a function (0: not in the
    profile, as ``fast_append`` where the compiler inlined every call made)."""
    for line in annotated.splitlines():
        if re.search(rf"[:\s]{function} \[", line):
            return int(line.split()[0].replace(",", ""))
    if function in FUNCTIONS.values():
        raise LookupError(f"{function} is not in the profile (is the C extension built?)")
    return 0


def calls_of(tree: str, function: str, caller_in: str = "") -> int:
    """How many times ``function`` was called (by code of the object file ``caller_in``,
    when given): the sum of its callers' counts, the ``<`` lines above its ``*`` line in
    ``callgrind_annotate --tree=caller`` (0: never called, or inlined everywhere)."""
    lines = tree.splitlines()
    for at, line in enumerate(lines):
        if re.search(rf"\*\s+\S*[:\s]{function}(@@\S+)? ", line):
            total = 0
            for above in reversed(lines[:at]):
                found = re.search(r"<\s.*\((\d[\d,]*)x\)", above)
                if found is None:
                    break
                if caller_in in above:
                    total += int(found.group(1).replace(",", ""))
            return total
    return 0


def measure(api: str, records: int, bootstrap: str, case: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "callgrind.out")
        command = [
            "valgrind", "--tool=callgrind", "--trace-children=no", f"--callgrind-out-file={out}",
            sys.executable, __file__, "--send", api, "--records", str(records),
            "--bootstrap", bootstrap, "--case", case,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if not line.startswith("==")]
            raise RuntimeError(f"{api}: the counted run failed: {errors[-5:]}")
        annotated = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", out],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        tree = subprocess.run(
            ["callgrind_annotate", "--tree=caller", out], check=True, capture_output=True,
            text=True,
        ).stdout  # fmt: skip
    counts: dict[str, float] = {
        name: inclusive(annotated, name) for name in (FUNCTIONS[api], "fast_append")
    }
    # the C append's lock tries: libc's sem_trywait called from the C append's object, so
    # counted even where the compiler inlined take_lock (uncontended, a take is one try)
    counts["C lock tries"] = calls_of(tree, "sem_trywait", "_append.cpython")
    return counts


def per_call(api: str, records: int, bootstrap: str, case: str) -> dict[str, float]:
    """Each count per call, from two runs of ``records`` and ``2 * records`` calls after the
    warm-up: the difference, so what the first calls cost (the Sender's start, the wait for
    metadata, imports) cancels out."""
    once = measure(api, records, bootstrap, case)
    twice = measure(api, 2 * records, bootstrap, case)
    return {name: (twice[name] - once[name]) / records for name in once}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--case", choices=sorted(VALUES), default="common")
    parser.add_argument("--send", choices=sorted(FUNCTIONS), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.send:
        send(args.send, args.records, args.bootstrap, args.case)
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench_send_path needs valgrind: apt-get install valgrind")
    from shmkafka.perf.brokers import run_broker_stub

    with run_broker_stub() as broker:
        for api in ("kafka", "confluent"):
            counts = per_call(api, args.records, broker.bootstrap, args.case)
            print(
                f"{api:<10} {args.case:<9} "
                + "  ".join(f"{name} {n:,.1f}/call" for name, n in counts.items())
            )


if __name__ == "__main__":
    main()
