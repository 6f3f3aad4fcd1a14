"""Instructions per record by process (app, Sender, broker), counted by callgrind on a fixed
workload: the figures that do not move with this machine's load.

    make bench-instructions      # or: .venv/bin/python perf/bench_instructions.py
        [--sizes 100,1000,10000,100000] [--value-kind compressible|realistic] [--keep DIR]

For each record size, one app process sends N records through ``KafkaProducer.send`` (lz4,
acks=1, linger 5 ms, keys over 10,007 names, 16 partitions) to a sidecar Sender
(``shmkafka sender --create``) and broker_stub, each in its own process under
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
from pathlib import Path

KEYS = [b"k%015d" % i for i in range(10007)]
PROPERTIES = {"linger_ms": "5", "compression_type": "lz4", "acks": "1"}
TOPIC = "instructions"
WARM = 2000
RECORDS = {100: 20_000, 1000: 20_000, 10_000: 4_000, 100_000: 400}  # N for each size
PROCESSES = ("app", "sender", "broker")


def app(bootstrap: str, pool: str, size: int, records: int, value_kind: str) -> None:
    """The app: warms up, says ``ready``, waits for ``go``, sends ``records`` records and
    flushes, says ``done``, waits for ``exit``."""
    from shmkafka.kafka import KafkaProducer
    from shmkafka.perf.workload import Workload

    values = Workload(record_size=size, value_kind=value_kind).values(0)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, pool=pool, linger_ms=5, compression_type="lz4", acks=1
    )
    for i in range(WARM):
        producer.send(TOPIC, values[i % len(values)], key=KEYS[i % len(KEYS)])
    producer.flush()
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(records):
        producer.send(TOPIC, values[i % len(values)], key=KEYS[i % len(KEYS)])
    producer.flush()
    print("done", flush=True)
    sys.stdin.readline()
    producer.close()


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


def run(folder: Path, size: int, records: int, value_kind: str) -> dict[str, float]:
    """Each process's instructions per record for one size."""
    from shmkafka.perf.brokers import free_port

    port, pool = free_port(), "bi" + uuid.uuid4().hex[:12]
    bootstrap = f"127.0.0.1:{port}"
    outs = {name: folder / f"{name}.{size}.out" for name in PROCESSES}
    python, quiet = sys.executable, subprocess.DEVNULL
    broker = subprocess.Popen(
        callgrind(outs["broker"], python, "-m", "shmkafka.broker_stub", "--port", str(port),
                  "--partitions", "16"), stdout=quiet, stderr=quiet,
    )  # fmt: skip
    sender: subprocess.Popen[bytes] | None = None
    try:
        wait_until("broker_stub", lambda: listening(port), broker)
        properties = [
            arg
            for key, value in PROPERTIES.items()
            for arg in ("--producer-property", f"{key}={value}")
        ]
        sender = subprocess.Popen(
            callgrind(outs["sender"], python, "-m", "shmkafka", "sender", "--pool", pool,
                      "--create", "--bootstrap-server", bootstrap, *properties),
            stdout=quiet, stderr=quiet,
        )  # fmt: skip
        wait_until("the sidecar Sender", lambda: serving(pool, sender.pid), sender)
        client = subprocess.Popen(
            callgrind(outs["app"], python, __file__, "--app", bootstrap, pool, str(size),
                      str(records), value_kind),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=quiet, text=True,
        )  # fmt: skip
        assert client.stdin is not None and client.stdout is not None
        if said(client, 600) != "ready":
            raise RuntimeError("the app did not warm up")
        pids = (client.pid, sender.pid, broker.pid)
        instrument(True, *pids)
        client.stdin.write("go\n")
        client.stdin.flush()
        if said(client, 1800) != "done":
            raise RuntimeError("the app did not finish")
        instrument(False, *pids)
        client.stdin.write("exit\n")
        client.stdin.flush()
        client.wait(300)
    finally:
        for process in (sender, broker):  # (a sidecar runs until stopped: SIGTERM stops it)
            if process is not None:
                process.terminate()
                process.wait(120)
    return {name: total(out) / records for name, out in outs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000,100000")
    parser.add_argument("--value-kind", default="compressible",
                        choices=("compressible", "realistic"))  # fmt: skip
    parser.add_argument(
        "--keep", metavar="DIR", help="keep the callgrind outputs here (for callgrind_annotate)"
    )
    parser.add_argument("--app", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.app:
        bootstrap, pool, size, records, kind = args.app
        app(bootstrap, pool, int(size), int(records), kind)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("bench_instructions needs valgrind: apt-get install valgrind")
    print(f"instructions per record, {args.value_kind} values, KafkaProducer.send, lz4, acks=1")
    print(f"{'size':>7} {'N':>7} " + " ".join(f"{name:>10}" for name in PROCESSES)
          + f" {'all':>10} {'per byte':>9}")  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or scratch
        Path(folder).mkdir(parents=True, exist_ok=True)
        for size in (int(size) for size in args.sizes.split(",")):
            records = RECORDS.get(size, max(200, 2_000_000 // max(size, 1)))
            per = run(Path(folder), size, records, args.value_kind)
            every = sum(per.values())
            print(f"{size:>7} {records:>7} " + " ".join(f"{per[n]:>10,.0f}" for n in PROCESSES)
                  + f" {every:>10,.0f} {every / max(size, 1):>9.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
