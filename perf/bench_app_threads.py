"""Where one app process's CPU goes, thread by thread: the confluent API's ``Producer`` of
shmkafka and of confluent-kafka, each record with a delivery callback, on Tansu.

    .venv/bin/python perf/bench_app_threads.py [--seconds 20] [--size 100]
        [--clients shmkafka,confluent-kafka]

Each client runs in a process of its own: it produces ``--size``-byte records with an
``on_delivery`` callback in a loop (``poll(0)`` every 1,000, as confluent-kafka's docs
show) for ``--seconds``, then prints its records/s and, for each thread, the user and
system CPU seconds it used (``/proc/self/task/*/stat``) and the µs a record they come to.
At P=1 and small records both clients are bound by the app: confluent-kafka's main
thread (the loop, ``produce()`` and the reports) against shmkafka's main thread and its
completion thread, which share one GIL.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from shmkafka.perf.brokers import run_tansu

APP = r"""
import glob, os, sys, time
client, bootstrap, seconds, size = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
settings = {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4", "acks": 1}
if client == "confluent-kafka":
    from confluent_kafka import Producer
else:
    from shmkafka.confluent_kafka import Producer
    settings["shmkafka.pool"] = "threads%d" % os.getpid()
producer = Producer(settings)
keys, value, done = [b"k%015d" % i for i in range(10007)], b"v" * size, [0]

def on_delivery(err, msg):
    done[0] += 1

def produce(i):
    try:
        producer.produce("threads", value, keys[i % 10007], on_delivery=on_delivery)
    except BufferError:
        producer.poll(0.005)

def ticks():
    out = {}
    for task in glob.glob("/proc/self/task/*"):
        fields = open(task + "/stat").read().rsplit(")", 1)[1].split()
        name = open(task + "/comm").read().strip()
        out[task.rsplit("/", 1)[1] + " " + name] = (int(fields[11]), int(fields[12]))
    return out

for i in range(20_000):  # (warm up: the Sender started, the topic known)
    produce(i)
producer.flush(60)
before, start, sent = ticks(), time.monotonic(), 0
while time.monotonic() - start < seconds:
    for i in range(1000):
        produce(i)
    sent += 1000
    producer.poll(0)
elapsed = time.monotonic() - start
producer.flush(60)
after, hz = ticks(), os.sysconf("SC_CLK_TCK")
print(f"{client}: {sent / elapsed:,.0f} records/s")
for thread in sorted(after):
    user, system = (a - b for a, b in zip(after[thread], before.get(thread, (0, 0))))
    if user + system:
        cpu = (user + system) / hz
        print(f"  thread {thread:<24} user {user / hz:6.2f} s  system {system / hz:5.2f} s"
              f"  {cpu * 1e6 / sent:.3f} µs a record")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--clients", default="shmkafka,confluent-kafka")
    args = parser.parse_args()
    with run_tansu() as broker:
        for client in args.clients.split(","):
            subprocess.run(
                [sys.executable, "-c", APP, client, broker.bootstrap, str(args.seconds),
                 str(args.size)], check=True, timeout=args.seconds * 3 + 120,
            )  # fmt: skip


if __name__ == "__main__":
    main()
