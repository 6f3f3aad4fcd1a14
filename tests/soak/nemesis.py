"""The soak's faults: a deck of every kind, shuffled each round, so that after k rounds each
kind has been injected k times; one starts every ``interval`` seconds (random), each in its
own thread, so they overlap. A fault that could not be made just then (no worker in the
phase it needs, no live Sender, its proxy or node held by another fault) is dealt again next,
so that a short run still makes every kind.

Rules:
- At most one broker node is down at a time (3 replicas, ``min.insync.replicas=2``: acks=all
  goes on), and one fault at a time holds each proxy.
- A fault is counted when it happened, not when it was asked for: a mid-flush kill only if
  the worker was flushing at that moment, an armed kill point when its process died of it.
- A lasting fault is undone by the thread that made it, at once when the nemesis stops;
  ``heal`` then checks that no proxy and no Sender is left faulty.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

from shmkafka.shm.procs import start_time
from tests.soak.worker import FLUSHING, SENDING

if TYPE_CHECKING:
    from tests.soak.harness import Soak

KINDS = (
    "app_kill", "app_kill_mid_append", "app_kill_mid_flush", "sender_kill", "sender_stop",
    "node_kill", "leader_move", "net_stall", "net_blackhole", "net_reset", "net_truncate",
    "net_slow", "pool_full", "partitions_grow", "txn_kill_mid_transaction",
    "txn_kill_mid_commit",
)  # fmt: skip

# how a fault's effect is looked for in the acks: its pool's, or everyone's
GLOBAL = {"node_kill", "leader_move", "net_stall", "net_blackhole", "net_reset",
          "net_truncate", "net_slow", "partitions_grow"}  # fmt: skip


class Nemesis:
    def __init__(self, soak: Soak, interval: tuple[float, float], seed: int) -> None:
        self.soak = soak
        self.interval = interval
        self.rng = random.Random(seed)
        self.injected: Counter[str] = Counter()
        self.asked: Counter[str] = Counter()
        self._stop = threading.Event()
        self._node_down = threading.Lock()
        self._proxy_locks = [threading.Lock() for _ in range(3)]  # (one per node's proxy)
        self._threads: list[threading.Thread] = []
        self._stopped_senders: set[int] = set()
        self._lock = threading.Lock()
        self._again: list[str] = []  # kinds that could not be made: dealt before the deck

    # ------------------------------------------------------------------ running

    def run(self, until: float) -> None:
        deck: list[str] = []
        while time.monotonic() < until and not self._stop.is_set():
            if not deck:
                deck = list(KINDS)
                self.rng.shuffle(deck)
            with self._lock:
                kind = self._again.pop(0) if self._again else deck.pop()
            self.asked[kind] += 1
            t = threading.Thread(target=self._inject, args=(kind,), daemon=True)
            t.start()
            self._threads.append(t)
            self._stop.wait(self.rng.uniform(*self.interval))

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def counted(self, kind: str, start_ms: int, end_ms: int, target: str) -> None:
        with self._lock:
            self.injected[kind] += 1
        self.soak.log_fault(kind, start_ms, end_ms, target)

    def _inject(self, kind: str) -> None:
        try:
            if getattr(self, kind)() is False:
                with self._lock:
                    self._again.append(kind)
        except Exception as exc:  # noqa: BLE001 - a fault that could not be made is reported
            self.soak.note(f"nemesis: {kind} failed: {type(exc).__name__}: {exc}")

    def _hold(self, low: float, high: float) -> None:
        self._stop.wait(self.rng.uniform(low, high))

    # ------------------------------------------------------------------ the apps

    def app_kill(self) -> bool:
        w = self.rng.choice(self.soak.plain_workers())
        start = self.soak.now_ms()
        if not self.soak.kill_worker(w, signal.SIGKILL):
            return False
        self.counted("app_kill", start, start, f"w{w}")
        return True

    def app_kill_mid_append(self) -> None:
        """The worker's next incarnation dies in the middle of an append (the kill point
        between writing a record and publishing it), after a random number of records."""
        w = self.rng.choice(self.soak.plain_workers())
        self.soak.arm(w, {"SHMKAFKA_FAULT_AT": "append.before_publish",
                          "SHMKAFKA_PURE_PYTHON": "1",
                          "SHMKAFKA_FAULT_SKIP": str(self.rng.randint(200, 3000))})  # fmt: skip
        self.soak.kill_worker(w, signal.SIGTERM)  # (a clean stop; the armed one follows)

    def app_kill_mid_flush(self) -> bool:
        return self._kill_in_phase(self.soak.plain_workers(), FLUSHING, "app_kill_mid_flush")

    def txn_kill_mid_transaction(self) -> bool:
        return self._kill_in_phase(self.soak.txn_workers(), SENDING, "txn_kill_mid_transaction")

    def txn_kill_mid_commit(self) -> None:
        """The transactional worker's next incarnation dies once its COMMIT is posted."""
        w = self.rng.choice(self.soak.txn_workers())
        self.soak.arm(w, {"SHMKAFKA_FAULT_AT": "txn.commit_posted",
                          "SHMKAFKA_FAULT_SKIP": str(self.rng.randint(0, 3))})  # fmt: skip
        self.soak.kill_worker(w, signal.SIGTERM)

    def _kill_in_phase(self, workers: list[int], phase: int, kind: str) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self._stop.is_set():
            for w in workers:
                if self.soak.board.phase(w) == phase and self.soak.alive(w):
                    start = self.soak.now_ms()
                    if not self.soak.kill_worker(w, signal.SIGKILL):
                        return False
                    self.counted(kind, start, start, f"w{w}")
                    return True
            time.sleep(0.0005)
        return False

    def pool_full(self) -> None:
        """A burst of twice the pool's buffer memory, sent as fast as the worker goes."""
        w = self.rng.choice(self.soak.burst_workers())
        start = self.soak.now_ms()
        self.soak.board.add_burst(w)
        self._hold(2, 2)
        self.counted("pool_full", start, self.soak.now_ms(), f"w{w}")

    # ------------------------------------------------------------------ the Senders

    def _live_sender(self) -> tuple[str, int] | None:
        """A random pool whose Sender is alive just now (a pool between two Senders, or
        removed after its last process died, is not a target), waiting up to 10 s."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self._stop.is_set():
            pools = self.soak.pools()
            self.rng.shuffle(pools)
            for pool in pools:
                pid = self.soak.sender_pid(pool)
                if pid and start_time(pid) is not None:
                    return pool, pid
            time.sleep(0.1)
        return None

    def sender_kill(self) -> bool:
        target = self._live_sender()
        if target is None:
            return False
        pool, pid = target
        start = self.soak.now_ms()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.counted("sender_kill", start, start, pool)
        return True

    def sender_stop(self) -> bool:
        target = self._live_sender()
        if target is None:
            return False
        pool, pid = target
        start = self.soak.now_ms()
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        self._stopped_senders.add(pid)
        self._hold(0.5, 3.0)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        self._stopped_senders.discard(pid)
        self.counted("sender_stop", start, self.soak.now_ms(), pool)
        return True

    # ------------------------------------------------------------------ the brokers

    def node_kill(self) -> bool:
        if not self._node_down.acquire(timeout=10):
            return False
        try:
            node = self.rng.choice(self.soak.node_ids)
            start = self.soak.now_ms()
            self.soak.control("kill_node", node=node)
            self._hold(1.0, 5.0)
            self.soak.control("restart_node", node=node)
            self.counted("node_kill", start, self.soak.now_ms(), f"node {node}")
            return True
        finally:
            self._node_down.release()

    def leader_move(self) -> None:
        partitions = self.soak.control("partition_count", topic=self.soak.topic)
        partition = self.rng.randrange(partitions)
        leader = self.soak.control("leader", topic=self.soak.topic, partition=partition)
        others = [n for n in self.soak.node_ids if n != leader]
        start = self.soak.now_ms()
        for to in self.rng.sample(others, len(others)):
            try:
                self.soak.control("move_leader", topic=self.soak.topic, partition=partition,
                                  to=to)  # fmt: skip
            except RuntimeError:  # (that node is down just now: the other one)
                continue
            self.counted("leader_move", start, start, f"p{partition} {leader}->{to}")
            return

    def partitions_grow(self) -> None:
        count = self.soak.control("partition_count", topic=self.soak.topic)
        if count >= self.soak.max_partitions:
            return
        start = self.soak.now_ms()
        self.soak.control("add_partitions", topic=self.soak.topic, count=count + 1)
        self.counted("partitions_grow", start, start, f"{count}->{count + 1}")

    # ------------------------------------------------------------------ the network

    def _network(self, kind: str, fault: str, delay_s: float, hold: tuple[float, float]) -> bool:
        index = self.rng.randrange(len(self.soak.proxies))
        lock = self._proxy_locks[index]
        if not lock.acquire(timeout=10):
            return False
        try:
            proxy = self.soak.proxies[index]
            start = self.soak.now_ms()
            proxy.set(fault, delay_s)
            self._hold(*hold)
            proxy.set("pass")
            self.counted(kind, start, self.soak.now_ms(), f"proxy {index}")
            return True
        finally:
            lock.release()

    def net_stall(self) -> bool:
        return self._network("net_stall", "delay", self.rng.uniform(0.2, 0.6), (2.0, 5.0))

    def net_blackhole(self) -> bool:
        return self._network("net_blackhole", "blackhole", 0.0, (2.0, 5.0))

    def net_reset(self) -> bool:
        return self._network("net_reset", "reset", 0.0, (0.3, 1.0))

    def net_truncate(self) -> bool:
        return self._network("net_truncate", "truncate", 0.0, (0.3, 1.0))

    def net_slow(self) -> bool:
        return self._network("net_slow", "slow", 0.005, (3.0, 6.0))

    # ------------------------------------------------------------------ the end

    def heal(self) -> None:
        for proxy in self.soak.proxies:
            proxy.set("pass")
        for pid in list(self._stopped_senders):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
