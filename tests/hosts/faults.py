"""The many-host run's faults, made by the kernel and dealt as the soak deals its own: a deck
of every kind, shuffled each round, one started every ``interval`` seconds in a thread of
its own, so they overlap.

Kinds, by what makes them:
- netem's impairments (netem.py's switch) on one host's link or one broker node's link:
  ``delay`` (with jitter), ``loss`` (1-30%), ``duplicate``, ``reorder``, ``corrupt``;
- iptables in a namespace: ``cut_node`` (a host cut off from one broker node only),
  ``isolate_leader`` (a partition leader cut off from the other nodes while every host
  still reaches it: the cluster fences it and leadership moves), ``partition`` (a host cut
  off from every node), ``flap`` (a host's link to the brokers cut and restored every
  0.2-1 s);
- processes: ``node_kill`` (a broker node stopped, then restarted), ``sender_kill``
  (SIGKILL), ``sender_stop`` (SIGSTOP, then SIGCONT), ``app_kill`` (SIGKILL of an app
  process, which the harness restarts as a new incarnation).

Rules:
- One fault at a time holds a target: each host has a lock, and the broker side one (at
  most one broker node is down, fenced or impaired at a time: 3 replicas and
  ``min.insync.replicas=2`` keep acks=all going). A fault whose target is busy is skipped.
- A fault is counted when it happened: a kill when there was a process to kill, an isolated
  leader when the cluster fenced it, a flap when its link went down at least twice.
- A lasting fault is undone by the thread that made it, at once when the nemesis stops;
  ``heal`` then checks that nothing is left cut, impaired, stopped or down.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.hosts.harness import HostsRun
    from tests.hosts.lab import Node, Rule

NETEM = ("delay", "loss", "duplicate", "reorder", "corrupt")
KINDS = (*NETEM, "cut_node", "isolate_leader", "partition", "flap", "node_kill",
         "sender_kill", "sender_stop", "app_kill")  # fmt: skip


class HostsNemesis:
    def __init__(self, run: HostsRun, seed: int) -> None:
        self.run_ = run
        self.rng = random.Random(seed)
        self.injected: Counter[str] = Counter()
        self.asked: Counter[str] = Counter()
        self.log: list[dict[str, object]] = []  # (as the soak's faults.jsonl)
        self.notes: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._host_locks = {h.name: threading.Lock() for h in run.hosts}
        self._broker_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopped: set[int] = set()

    # ------------------------------------------------------------------ running

    def run(self, until: float, interval: tuple[float, float]) -> None:
        deck: list[str] = []
        while not self._stop.is_set() and time.monotonic() < until:
            if not deck:
                deck = list(KINDS)
                self.rng.shuffle(deck)
            kind = deck.pop()
            self.asked[kind] += 1
            thread = threading.Thread(target=self._inject, args=(kind,), daemon=True)
            thread.start()
            self._threads.append(thread)
            self._stop.wait(self.rng.uniform(*interval))

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _inject(self, kind: str) -> None:
        try:
            if kind in NETEM:
                self._netem(kind)
            else:
                getattr(self, kind)()
        except Exception as exc:  # noqa: BLE001 - noted in the report, never fatal
            self.notes.append(f"{kind} failed: {type(exc).__name__}: {exc}")

    def counted(self, kind: str, start_ms: int, end_ms: int, target: str) -> None:
        with self._lock:
            self.injected[kind] += 1
            entry = {"kind": kind, "start_ms": start_ms, "end_ms": end_ms, "target": target}
            self.log.append(entry)
        with open(os.path.join(self.run_.dir, "faults.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")

    def _hold(self) -> None:
        self._stop.wait(self.rng.uniform(*self.run_.o.fault_s))

    def _free_host(self) -> tuple[Node, threading.Lock] | None:
        hosts = list(self.run_.hosts)
        self.rng.shuffle(hosts)
        for host in hosts:
            lock = self._host_locks[host.name]
            if lock.acquire(blocking=False):
                return host, lock
        return None

    def _on_a_host(self, kind: str, make: Callable[[Node], Callable[[], None] | None]) -> None:
        """``make`` the fault on a free host; the callable it returns undoes it."""
        free = self._free_host()
        if free is None:
            return
        host, lock = free
        try:
            start = self.run_.now_ms()
            undo = make(host)
            if undo is None:
                return
            try:
                self._hold()
            finally:
                undo()
            self.counted(kind, start, self.run_.now_ms(), host.name)
        finally:
            lock.release()

    # ------------------------------------------------------------------ netem

    def _impairment(self, kind: str) -> dict[str, float]:
        r = self.rng
        if kind == "delay":
            delay = r.uniform(20, 200)
            return {"delay_ms": delay, "jitter_ms": delay * r.uniform(0.1, 0.5)}
        if kind == "loss":
            return {"loss": r.uniform(0.01, 0.30)}
        if kind == "duplicate":
            return {"duplicate": r.uniform(0.05, 0.30)}
        if kind == "reorder":
            return {"delay_ms": r.uniform(10, 50), "reorder": r.uniform(0.25, 0.5)}
        return {"corrupt": r.uniform(0.01, 0.10)}

    def _netem(self, kind: str) -> None:
        lab, impairment = self.run_.lab, self._impairment(kind)
        if self.rng.random() < 1 / 3 and self._broker_lock.acquire(blocking=False):
            try:  # one broker node's link
                node = self.rng.choice(self.run_.brokers)
                start = self.run_.now_ms()
                lab.impair(node, **impairment)
                try:
                    self._hold()
                finally:
                    lab.impair(node)
                self.counted(kind, start, self.run_.now_ms(), node.name)
                self._back_in_quorum()  # (its probes may have failed: one broker at a time)
            finally:
                self._broker_lock.release()
            return

        def make(host: Node) -> Callable[[], None]:
            lab.impair(host, **impairment)
            return lambda: lab.impair(host)

        self._on_a_host(kind, make)

    # ------------------------------------------------------------------ iptables

    def cut_node(self) -> None:
        def make(host: Node) -> Callable[[], None]:
            rules = self.run_.lab.cut(host, self.rng.choice(self.run_.brokers).address)
            return lambda: self.run_.lab.heal(rules)

        self._on_a_host("cut_node", make)

    def partition(self) -> None:
        def make(host: Node) -> Callable[[], None]:
            rules: list[Rule] = []
            try:
                for broker in self.run_.brokers:
                    rules += self.run_.lab.cut(host, broker.address)
            except Exception:  # (never half a partition left behind)
                self.run_.lab.heal(rules)
                raise
            return lambda: self.run_.lab.heal(rules)

        self._on_a_host("partition", make)

    def flap(self) -> None:
        free = self._free_host()
        if free is None:
            return
        host, lock = free
        lab, flaps = self.run_.lab, 0
        try:
            start = self.run_.now_ms()
            until = time.monotonic() + self.rng.uniform(*self.run_.o.fault_s)
            while time.monotonic() < until and not self._stop.is_set():
                rules: list[Rule] = []
                try:
                    for broker in self.run_.brokers:
                        rules += lab.cut(host, broker.address)
                    flaps += 1
                    self._stop.wait(self.rng.uniform(0.2, 1.0))
                finally:
                    lab.heal(rules)
                self._stop.wait(self.rng.uniform(0.2, 1.0))
            if flaps >= 2:
                self.counted("flap", start, self.run_.now_ms(), host.name)
        finally:
            lock.release()

    def isolate_leader(self) -> None:
        if not self._broker_lock.acquire(timeout=10):
            return
        run, lab = self.run_, self.run_.lab
        try:
            leader = run.control("leader", topic=run.topic,
                                 partition=self.rng.randrange(run.o.partitions))  # fmt: skip
            if leader not in run.node_ids:
                return
            node = run.brokers[leader - 1]
            start = run.now_ms()
            rules: list[Rule] = []
            try:
                for other in run.brokers:
                    if other is not node:
                        rules += lab.cut(node, other.address)
                fenced = self._until(lambda: leader in run.control("fenced"), 15)
                if fenced:
                    self._hold()
            finally:
                lab.heal(rules)
            back = self._until(lambda: leader not in run.control("fenced"), 30)
            if fenced:
                self.counted("isolate_leader", start, run.now_ms(), node.name)
            if not back:
                self.notes.append(f"isolate_leader: node {leader} still fenced 30 s after")
        finally:
            self._broker_lock.release()

    def _back_in_quorum(self) -> bool:
        return self._until(lambda: not self.run_.control("fenced"), 30)

    def _until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.1)
        return False

    # ------------------------------------------------------------------ processes

    def node_kill(self) -> None:
        if not self._broker_lock.acquire(timeout=10):
            return
        run = self.run_
        try:
            node = self.rng.choice(run.node_ids)
            start = run.now_ms()
            run.control("kill_node", node=node)
            try:
                self._hold()
            finally:
                run.control("restart_node", node=node)
            self.counted("node_kill", start, run.now_ms(), f"b{node}")
        finally:
            self._broker_lock.release()

    def _a_sender(self) -> tuple[Node, int] | None:
        host = self.rng.choice(self.run_.hosts)
        senders = self.run_.senders(host)
        return (host, self.rng.choice(senders)) if senders else None

    def sender_kill(self) -> None:
        found = self._a_sender()
        if found is None:
            return
        host, pid = found
        with contextlib.suppress(ProcessLookupError):
            start = self.run_.now_ms()
            os.kill(pid, signal.SIGKILL)
            self.counted("sender_kill", start, start, host.name)

    def sender_stop(self) -> None:
        found = self._a_sender()
        if found is None:
            return
        host, pid = found
        try:
            start = self.run_.now_ms()
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return
        with self._lock:
            self._stopped.add(pid)
        try:
            self._stop.wait(self.rng.uniform(2.0, 6.0))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            with self._lock:
                self._stopped.discard(pid)
        self.counted("sender_stop", start, self.run_.now_ms(), host.name)

    def app_kill(self) -> None:
        worker = self.run_.running_worker(self.rng)
        if worker is None:
            return
        start = self.run_.now_ms()
        if self.run_.signal_worker(worker, signal.SIGKILL):
            self.counted("app_kill", start, start, f"w{worker}")

    # ------------------------------------------------------------------ the end

    def heal(self) -> list[str]:
        """What is still faulty after every fault's thread ended (nothing, normally)."""
        left = [f"rule {r}" for r in self.run_.lab.rules]
        left += [f"stopped Sender {pid}" for pid in self._stopped]
        if not self._back_in_quorum():  # (a node just healed is let catch up first)
            left.append(f"fenced nodes {self.run_.control('fenced')}")
        return left
