"""Instructions per record by process (app, Sender, broker), counted by callgrind on a fixed
workload: the figures that do not move with this machine's load.

    make bench-instructions      # or: .venv/bin/python perf/bench_instructions.py
        [--sizes 100,1000,10000,100000] [--value-kind compressible|realistic] [--keep DIR]
        [--clients shmkafka,shmkafka-confluent,confluent-kafka,kafka-python] [--reports]

For each client and record size, one app process sends N records through the client's
public API (lz4, acks=1, linger 5 ms, keys over 10,007 names, 16 partitions, the rest at the
client's defaults): shmkafka's ``KafkaProducer.send`` to a sidecar Sender
(``shmkafka sender --create``; ``shmkafka-confluent``: shmkafka's ``Producer.produce`` and
``poll(0)``, as confluent-kafka's; with ``--reports`` both give every record an
``on_delivery`` callback, as confluent-kafka's docs show), confluent-kafka's
``Producer.produce`` or kafka-python's
``KafkaProducer.send`` from the app alone (their I/O threads are in it). The app, the Sender
and broker_stub each run in their own process under
``valgrind --tool=callgrind`` with instrumentation off. Once the app has warmed up (the
topic's metadata, the first batches), ``callgrind_control`` turns instrumentation on in the
three processes; it turns it off once the app's flush returned. So start-up, warm-up and
shutdown are not counted; what each process did while the N records went through is, divided
by N (the Sender's idle rounds in that time included: under valgrind the app is slower than
the Sender, so these are figures to compare two versions with, not a model of a busy host).
Needs valgrind (Debian's package); a run takes about a minute.
"""

from __future__ import annotations

import argparse
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

KEYS = [b"k%015d" % i for i in range(10007)]
TOPIC = "instructions"
WARM = 2000
RECORDS = {100: 20_000, 1000: 20_000, 10_000: 4_000, 100_000: 400}  # N for each size
PROCESSES = ("app", "sender", "broker")


def app(client: str, bootstrap: str, pool: str, size: int, records: int, kind: str,
        reports: bool) -> None:  # fmt: skip
    """The app: warms up, says ``ready``, waits for ``go``, sends ``records`` records and
    flushes, says ``done``, waits for ``exit``."""
    from shmkafka.perf.workload import Workload

    values = Workload(record_size=size, value_kind=kind).values(0)
    send = SENDERS[client](bootstrap, pool, reports)
    send(WARM, values)
    print("ready", flush=True)
    sys.stdin.readline()
    send(records, values)
    print("done", flush=True)
    sys.stdin.readline()


Send = Callable[[int, list[bytes]], None]  # send n records of these values, then flush


def _shmkafka(bootstrap: str, pool: str, reports: bool) -> Send:
    """(``reports``: the confluent API's; a kafka-style loop keeps no futures.)"""
    from shmkafka.kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, pool=pool, **KAFKA_PYTHON_SETTINGS)
    return _kafka_style(producer)


def _kafka_python(bootstrap: str, pool: str, reports: bool) -> Send:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, **KAFKA_PYTHON_SETTINGS)
    return _kafka_style(producer)


def _kafka_style(producer: Any) -> Send:
    def send(n: int, values: list[bytes]) -> None:
        for i in range(n):
            producer.send(TOPIC, values[i % len(values)], key=KEYS[i % len(KEYS)])
        producer.flush()

    return send


def _confluent(bootstrap: str, pool: str, reports: bool) -> Send:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "compression.type": "lz4", "acks": 1})  # fmt: skip
    return _confluent_style(producer, reports)


def _shmkafka_confluent(bootstrap: str, pool: str, reports: bool) -> Send:
    from shmkafka.confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "shmkafka.pool": pool,
                         "compression.type": "lz4", "acks": 1})  # fmt: skip
    return _confluent_style(producer, reports)


def _confluent_style(producer: Any, reports: bool) -> Send:
    """``reports`` (--reports): each record with an ``on_delivery`` callback."""
    reported = [0]

    def count(err: Any, msg: Any) -> None:  # (as confluent-kafka's docs show)
        reported[0] += 1

    on_delivery = count if reports else None

    def send(n: int, values: list[bytes]) -> None:
        for i in range(n):
            while True:
                try:
                    producer.produce(TOPIC, values[i % len(values)], KEYS[i % len(KEYS)],
                                     on_delivery=on_delivery)  # fmt: skip
                    break
                except BufferError:  # its queue is full: serve reports, as its docs show
                    producer.poll(0.01)
            producer.poll(0)
        producer.flush()

    return send


KAFKA_PYTHON_SETTINGS: dict[str, Any] = {"linger_ms": 5, "compression_type": "lz4", "acks": 1}
PROPERTIES = {key: str(value) for key, value in KAFKA_PYTHON_SETTINGS.items()}  # (the sidecar's)
# The sidecar of shmkafka's Producer: librdkafka's defaults where they differ from
# kafka-python's (a pool's producers must agree on its Sender's settings)
CONFLUENT_PROPERTIES = PROPERTIES | {
    "max_request_size": "1000000", "batch_max_records": "10000", "client_id": "rdkafka",
    "delivery_timeout_ms": "300000", "metadata_max_age_ms": "900000",
    "reconnect_backoff_max_ms": "10000", "reconnect_backoff_ms": "100",
}  # fmt: skip
SENDERS: dict[str, Callable[[str, str, bool], Send]] = {
    "shmkafka": _shmkafka, "shmkafka-confluent": _shmkafka_confluent,
    "confluent-kafka": _confluent, "kafka-python": _kafka_python,
}  # fmt: skip


def said(process: subprocess.Popen[str], timeout_s: float) -> str:
    """The next line the app prints, waited for at most ``timeout_s`` ("": none came)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    return process.stdout.readline().strip() if ready else ""


def callgrind(out: Path, *command: str) -> list[str]:
    return ["valgrind", "--tool=callgrind", "--trace-children=no", "--instr-atstart=no",
            f"--callgrind-out-file={out}", *command]  # fmt: skip


def instrument(on: bool, *pids: int) -> None:
    for pid in pids:
        subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)],
                       check=True, capture_output=True, timeout=60)  # fmt: skip


def total(out: Path) -> int:
    """A callgrind output's instructions (its ``totals:`` line)."""
    match = re.search(r"^totals: (\d+)", out.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"{out} has no totals (did the process exit cleanly?)")
    return int(match.group(1))


# what a function's instructions count as, by the first pattern its name or object matches
KINDS = (
    ("codec", re.compile(r"LZ4|lz4|ZSTD|zstd|snappy|deflate|inflate", re.I)),
    ("crc", re.compile(r"crc32", re.I)),
    ("copy", re.compile(r"memcpy|memmove|memset")),
    ("python", re.compile(r"libpython|/Python-3|python3\.\d+")),
    ("librdkafka", re.compile(r"librdkafka|confluent_kafka|rd_")),
    ("shmkafka C", re.compile(r"shmkafka|/work/main/")),
)
KIND_NAMES = (*(name for name, _ in KINDS), "other")
_ANNOTATED = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$")


def by_kind(out: Path) -> dict[str, int]:
    """A callgrind output's instructions by kind (KINDS), from ``callgrind_annotate``."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(out)],
        check=True, capture_output=True, text=True, timeout=300,
    ).stdout  # fmt: skip
    kinds = dict.fromkeys(KIND_NAMES, 0)
    for line in text.splitlines():
        match = _ANNOTATED.match(line)
        if match is None or "PROGRAM TOTALS" in line:
            continue
        where = match.group(2)
        kind = next((name for name, pattern in KINDS if pattern.search(where)), "other")
        kinds[kind] += int(match.group(1).replace(",", ""))
    return kinds


def wait_until(what: str, ready: object, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 180  # (under valgrind, processes start slowly)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        if callable(ready) and ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} was not up within 180 s")


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def serving(pool: str, pid: int) -> bool:
    """The sidecar serves the pool (else the app would start a Sender of its own)."""
    from shmkafka.pool.stat import pool_stat
    from shmkafka.shm.errors import ShmError

    if not Path(f"/dev/shm/shmkafka.{pool}").exists():
        return False
    try:
        sender = pool_stat(pool)["sender"]
    except ShmError:
        return False
    return bool(sender["pid"] == pid and sender["alive"])


def run(folder: Path, client: str, size: int, records: int, kind: str,
        reports: bool = False, busy_sender: bool = False) -> dict[str, float]:  # fmt: skip
    """Each process's instructions per record for one client and size (a peer has no
    Sender: its I/O threads are in the app). ``busy_sender``: the Sender's alone, the app
    and the broker run without valgrind."""
    from shmkafka.perf.brokers import free_port

    port, pool = free_port(), "bi" + uuid.uuid4().hex[:12]
    bootstrap = f"127.0.0.1:{port}"
    names: tuple[str, ...] = PROCESSES if client.startswith("shmkafka") else ("app", "broker")
    names = ("sender",) if busy_sender else names
    outs = {name: folder / f"{client}.{name}.{size}.out" for name in names}

    def under(name: str, *command: str) -> list[str]:
        return callgrind(outs[name], *command) if name in outs else list(command)

    python, quiet = sys.executable, subprocess.DEVNULL
    broker = subprocess.Popen(
        under("broker", python, "-m", "shmkafka.broker_stub", "--port", str(port),
              "--partitions", "16"), stdout=quiet, stderr=quiet,
    )  # fmt: skip
    sender: subprocess.Popen[bytes] | None = None
    try:
        wait_until("broker_stub", lambda: listening(port), broker)
        if client.startswith("shmkafka"):
            properties = CONFLUENT_PROPERTIES if client == "shmkafka-confluent" else PROPERTIES
            sender = _start_sidecar(outs["sender"], bootstrap, pool, properties)
        client_process = subprocess.Popen(
            under("app", python, __file__, "--app", client, bootstrap, pool,
                  str(size), str(records), kind, str(int(reports))),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=quiet, text=True,
        )  # fmt: skip
        pids = {"app": client_process.pid, "broker": broker.pid}
        if sender is not None:
            pids["sender"] = sender.pid
        _measure(client_process, [pid for name, pid in pids.items() if name in outs])
    finally:
        for process in (sender, broker):  # (a sidecar runs until stopped: SIGTERM stops it)
            if process is not None:
                process.terminate()
                process.wait(120)
    return {name: total(out) / records for name, out in outs.items()}


def _start_sidecar(
    out: Path, bootstrap: str, pool: str, settings: dict[str, str]
) -> subprocess.Popen[bytes]:
    properties = [
        arg for key, value in settings.items() for arg in ("--producer-property", f"{key}={value}")
    ]
    sender = subprocess.Popen(
        callgrind(out, sys.executable, "-m", "shmkafka", "sender", "--pool", pool, "--create",
                  "--bootstrap-server", bootstrap, *properties),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_until("the sidecar Sender", lambda: serving(pool, sender.pid), sender)
    return sender


def _measure(client: subprocess.Popen[str], pids: list[int]) -> None:
    """Instrumentation on in every process from the app's ``go`` to its ``done``."""
    assert client.stdin is not None and client.stdout is not None
    if said(client, 600) != "ready":
        raise RuntimeError("the app did not warm up")
    instrument(True, *pids)
    client.stdin.write("go\n")
    client.stdin.flush()
    if said(client, 1800) != "done":
        raise RuntimeError("the app did not finish")
    instrument(False, *pids)
    client.stdin.write("exit\n")
    client.stdin.flush()
    client.wait(300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000,100000")
    parser.add_argument("--value-kind", default="compressible",
                        choices=("compressible", "realistic"))  # fmt: skip
    parser.add_argument("--clients", default="shmkafka",
                        help="comma-separated, of: " + ", ".join(SENDERS))  # fmt: skip
    parser.add_argument(
        "--keep", metavar="DIR", help="keep the callgrind outputs here (for callgrind_annotate)"
    )
    parser.add_argument("--by-kind", action="store_true",
                        help="also each process's instructions per record by kind: codec, "
                        "crc, copy, python, librdkafka, shmkafka C, other")  # fmt: skip
    parser.add_argument("--reports", action="store_true",
                        help="the confluent API's clients give every record an on_delivery "
                        "callback (served by poll(0)), as confluent-kafka's docs show")  # fmt: skip
    parser.add_argument("--busy-sender", action="store_true",
                        help="count the Sender alone, with the app and the broker run "
                        "without valgrind: the Sender is then the slowest process, busy "
                        "with full batches and no idle rounds (shmkafka clients only)")  # fmt: skip
    parser.add_argument("--app", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.app:
        client, bootstrap, pool, size, records, kind, reports = args.app
        app(client, bootstrap, pool, int(size), int(records), kind, reports == "1")
        return
    clients = args.clients.split(",")
    if unknown := [c for c in clients if c not in SENDERS]:
        parser.error(f"unknown clients {unknown}: choose from {', '.join(SENDERS)}")
    if args.busy_sender and (peers := [c for c in clients if not c.startswith("shmkafka")]):
        parser.error(f"--busy-sender counts shmkafka's Sender: {peers} have none")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("bench_instructions needs valgrind: apt-get install valgrind")
    print(f"instructions per record, {args.value_kind} values, lz4, acks=1, linger 5 ms")
    print(f"{'client':>16} {'size':>7} {'N':>7} "
          + " ".join(f"{name:>10}" for name in PROCESSES)
          + f" {'all':>10} {'per byte':>9}")  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or scratch
        Path(folder).mkdir(parents=True, exist_ok=True)
        for size in (int(size) for size in args.sizes.split(",")):
            records = RECORDS.get(size, max(200, 2_000_000 // max(size, 1)))
            for client in clients:
                per = run(Path(folder), client, size, records, args.value_kind, args.reports,
                          args.busy_sender)  # fmt: skip
                every = sum(per.values())
                cells = " ".join(
                    f"{per[n]:>10,.0f}" if n in per else f"{'-':>10}" for n in PROCESSES
                )
                print(f"{client:>16} {size:>7} {records:>7} {cells} {every:>10,.0f}"
                      f" {every / max(size, 1):>9.1f}", flush=True)  # fmt: skip
                if args.by_kind:
                    _print_kinds(Path(folder), client, size, records, per)


def _print_kinds(folder: Path, client: str, size: int, records: int,
                 per: dict[str, float]) -> None:  # fmt: skip
    """One line per process: its instructions per record by kind."""
    for process in per:
        kinds = by_kind(folder / f"{client}.{process}.{size}.out")
        cells = "  ".join(f"{name} {kinds[name] / records:,.0f}" for name in KIND_NAMES
                          if kinds[name])  # fmt: skip
        print(f"{'':>16} {'':>7} {process:>7}: {cells}", flush=True)


if __name__ == "__main__":
    main()
