"""An app process's completion thread, one wake at a time: what a paced process pays per
result round, apart from the kernel's wake.

    .venv/bin/python perf/bench_completion_round.py [--records 5] [--partitions 5]
        [--rounds 2000] [--python-drain]

Each round sends ``--records`` records spread over ``--partitions`` partitions (a batch
each, as a paced process's tick of keyed records), has this process play the Sender (seal
the batches, post their completions to our ring with the Sender's view, wake us once) and
waits until the completion thread resolved every future. It prints µs per round (best of
3). Its instructions are stable where its time is not: run it under ``valgrind
--tool=callgrind --separate-threads=yes`` with ``--rounds 0`` and with ``--rounds N``, and
take the completion thread's (the second file's) instructions per round by difference
(3N rounds). The first file (this main thread, the Sender's side) gives the drain's cost the
same way, in C and with ``--python-drain`` (the drain and the posting in Python).
"""

from __future__ import annotations

import argparse
import os
import time

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer.client import Client
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import DIRECTORY_LOCK
from shmkafka.shm.rings import SenderView

TOPIC = "rounds"
VIEW = SenderView(1, 1, 5, 2)  # (sent once, to node 1, queued 5 ms, answered in 2 ms)
WAIT_S = 10.0  # (a round that takes this long is a failure, never a wait without bound)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=5, help="records per round")
    parser.add_argument("--partitions", type=int, default=5, help="batches per round")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument(
        "--python-drain",
        action="store_true",
        help="drain and post results in Python (the Sender does both in C)",
    )
    args = parser.parse_args()
    name = f"benchcompl{os.getpid()}"
    client = Client(name, {}, pool_config=PoolConfig(max_partitions=16), start_sender=False)
    try:
        pool = client.pool
        with pool.locks.held(DIRECTORY_LOCK):
            pool.directory.publish({TOPIC: [PartitionLeader(1, 0)] * args.partitions})
        # (the Sender's side: appends in Python, drains and posts results in C)
        sender = RecordAccumulator(pool, fast_path=False, c_drain=not args.python_drain)
        deques = [e.deque_id for e in pool.directory.snapshot().topics[TOPIC]]
        _round(client, sender, deques, args.records)  # the thread started, caches warm
        if args.rounds:
            best = min(_timed(client, sender, deques, args) for _ in range(3))
            print(f"completion round, {args.records} records in {args.partitions} batches: "
                  f"{best / args.rounds * 1e6:.1f} µs per round")  # fmt: skip
    finally:
        client.close(5)
        if SharedPool.exists(name):
            SharedPool.open(name).destroy()


def _timed(
    client: Client, sender: RecordAccumulator, deques: list[int], args: argparse.Namespace
) -> float:
    start = time.perf_counter()
    for _ in range(args.rounds):
        _round(client, sender, deques, args.records)
    return time.perf_counter() - start


def _round(client: Client, sender: RecordAccumulator, deques: list[int], records: int) -> None:
    futures = [client.send(TOPIC, b"v" * 200, partition=i % len(deques)) for i in range(records)]
    sender.defer_wakes(True)  # (one wake per process, as the Sender's poll does)
    for batch in sender.drain(deques, 1 << 30):
        done = sender.completion_for(batch, 0, view=VIEW)
        assert not sender.post_completion(batch, done), "the ring is full"
        sender.complete(batch)
    sender.defer_wakes(False)
    deadline = time.monotonic() + WAIT_S
    for future in futures:
        future.get(max(0.0, deadline - time.monotonic()))


if __name__ == "__main__":
    main()
