"""Many hosts against one cluster (issue "Many hosts against one cluster"), the first part:
hosts made by the kernel (lab.py), the soak's workers and history checker across them, and
network faults made by iptables in a host's namespace.

Rules:
- A 3-node broker_stub (3 replicas, ``min.insync.replicas=2``, ``--flush sync``) runs in a
  namespace of its own on the bridge; node i listens on ``BASE_PORT + i``.
- Each host runs the soak's workers (``python -m tests.soak.worker``: the three APIs),
  each API's workers sharing the host's pool of that API, in the host's own namespaces, so
  every host has its own /dev/shm, pools and Senders. History files and the board live in
  the run's directory, which every host sees.
- The checker (``python -m tests.soak.checker``) reads the topic back from the test's own
  namespace through the bridge, and classifies every record as the soak does.
- Faults, one at a time on a random host, each lasting ``fault_s`` and counted when made: a
  host cut off from one broker node (``cut_node``), a host cut off from every node
  (``partition``), 20% packet loss both ways (``loss``), the host's Sender killed
  (``sender_kill``).
- The figures are the soak's (figures.py's ``timeline``, a host's faults scoped to its
  workers): p50/p99 send→ack outside and during faults, and per fault kind the longest
  stretch without acks and the time they took to resume; and records acked per host.
- Not yet here (see the issue): netem's delay, duplication, reordering and corruption (this
  kernel has no ``sch_netem``), a broker node in its own namespace (broker_stub's replicas
  share one process), clock steps, the 30-minute run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psutil

from tests.hosts.lab import NetLab, Node
from tests.soak.figures import timeline
from tests.soak.harness import control, start_checker, write_private
from tests.soak.history import ACKED, read_history
from tests.soak.worker import create_board

BASE_PORT = 19092
TOPIC = "hosts"
WORKERS = (("kafka-python", "future"), ("confluent-kafka", "callback"), ("aiokafka", "future"))
POOL_OF_API = {"kafka-python": "kp", "confluent-kafka": "cf", "aiokafka": "aio"}
FAULTS = ("cut_node", "partition", "loss", "sender_kill")


@dataclass(frozen=True)
class HostsOptions:
    hosts: int = 2
    duration_s: float = 40.0
    rate: int = 200  # records/s per worker
    record_size: int = 200
    partitions: int = 4
    fault_s: tuple[float, float] = (2.0, 4.0)
    seed: int | None = None
    directory: str | None = None


class HostsRun:
    def __init__(self, options: HostsOptions, lab: NetLab) -> None:
        self.o, self.lab = options, lab
        self.rng = random.Random(options.seed)
        self.dir = options.directory or tempfile.mkdtemp(prefix="shmkafka-hosts-")
        os.makedirs(self.dir, exist_ok=True)
        self.epoch = time.time()
        self.board = create_board(os.path.join(self.dir, "board"))
        self.broker = lab.add_node("broker")
        self.hosts = [lab.add_node(f"h{i}") for i in range(options.hosts)]
        self.faults: Counter[str] = Counter()
        self.fault_log: list[dict[str, Any]] = []  # (as the soak's faults.jsonl)
        self.connections: dict[str, int] = {}
        self.workers: dict[int, Any] = {}
        self.control_port = 0

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.broker.address}:{BASE_PORT + i}" for i in range(3))

    def control(self, op: str, **args: Any) -> Any:
        return control((self.broker.address, self.control_port), op, **args)

    # ------------------------------------------------------------------ the run

    def run(self) -> dict[str, Any]:
        self._start_broker()
        checker = self._start_checker()
        for h, host in enumerate(self.hosts):
            for k, (api, mode) in enumerate(WORKERS):
                self._start_worker(h * len(WORKERS) + k, h, host, api, mode)
        until = time.monotonic() + self.o.duration_s
        time.sleep(3)  # (every worker up and sending before the first fault)
        started = self.now_ms()
        self.connections = {h.name: self._connections(h) for h in self.hosts}
        while time.monotonic() < until:
            self._fault(self.rng.choice(FAULTS), self.rng.choice(self.hosts))
            time.sleep(1.0)
        ended = self.now_ms()
        exits = self._stop_workers()
        open(os.path.join(self.dir, "final"), "w").close()
        checker.wait(600)
        with open(os.path.join(self.dir, "verdict.json")) as f:
            verdict: dict[str, Any] = json.load(f)
        host_of = {h * len(WORKERS) + k: host.name for h, host in enumerate(self.hosts)
                   for k in range(len(WORKERS))}  # fmt: skip
        figures = timeline(self.dir, self.fault_log, host_of, started, ended)
        return {"counts": verdict["counts"], "examples": verdict["examples"],
                "caught_up": verdict["caught_up"], "faults": dict(self.faults),
                "connections": self.connections, "exits": exits,
                "acked_per_host": self._acked_per_host(host_of), "timeline": figures}  # fmt: skip

    def now_ms(self) -> int:
        return int((time.time() - self.epoch) * 1000)

    def _acked_per_host(self, host_of: dict[int, str]) -> dict[str, int]:
        acked: Counter[str] = Counter()
        for name in os.listdir(self.dir):
            if name.endswith(".hist"):
                entries = read_history(os.path.join(self.dir, name))
                acked[host_of[int(name[1:4])]] += sum(1 for e in entries if e.kind == ACKED)
        return dict(acked)

    def _start_broker(self) -> None:
        command = [
            sys.executable, "-m", "shmkafka.broker_stub", "--nodes", "3", "--port",
            str(BASE_PORT), "--host", self.broker.address, "--replication-factor", "3",
            "--min-insync-replicas", "2", "--partitions", str(self.o.partitions),
            "--storage", os.path.join(self.dir, "broker"), "--flush", "sync",
        ]  # fmt: skip
        with open(os.path.join(self.dir, "broker.log"), "ab") as err:
            broker = self.lab.spawn(self.broker, command, stdout=subprocess.PIPE, stderr=err)
        assert broker.stdout is not None
        line = broker.stdout.readline().decode()
        if "control port" not in line:
            raise RuntimeError(f"broker_stub did not start: {line!r}")
        self.control_port = int(line.split("control port ")[1].split(";")[0])
        self.control("create_topic", name=TOPIC, partitions=self.o.partitions, rf=3)

    def _start_checker(self) -> subprocess.Popen[bytes]:
        modes = {h * len(WORKERS) + k: mode for h in range(len(self.hosts))
                 for k, (_, mode) in enumerate(WORKERS)}  # fmt: skip
        return start_checker(self.dir, self.bootstrap, None, TOPIC, modes)

    def _start_worker(self, worker: int, h: int, host: Node, api: str, mode: str) -> None:
        config = {
            "worker": worker, "incarnation": 1, "api": api, "mode": mode,
            "pool": f"hosts{h}{POOL_OF_API[api]}", "bootstrap": self.bootstrap,
            "security": None, "topic": TOPIC, "dir": self.dir,
            "board": os.path.join(self.dir, "board"), "epoch": self.epoch,
            "record_size": self.o.record_size, "buffer_memory": 4 << 20, "burst": 1000,
            "transactional_id": f"hosts-txn{worker}",
        }  # fmt: skip
        path = os.path.join(self.dir, f"w{worker:03d}-i0001.json")
        write_private(path, json.dumps(config))
        self.board.set_rate(worker, self.o.rate)
        env = dict(os.environ, SHMKAFKA_SENDER_IDLE_EXIT_MS="2000")
        with open(path[: -len(".json")] + ".log", "ab") as err:
            self.workers[worker] = self.lab.spawn(
                host, [sys.executable, "-m", "tests.soak.worker", path], env=env,
                stdout=err, stderr=err,
            )  # fmt: skip

    def _connections(self, host: Node) -> dict[str, int]:
        """The host's connections to the brokers: its Senders' and its apps' (none)."""
        by: Counter[str] = Counter()
        for pid in self.lab.connections(host, self.broker.address):
            by["senders" if _is_sender(pid) else "apps"] += 1
        by["sender_processes"] = sum(1 for pid in self.lab.pids(host) if _is_sender(pid))
        return dict(by)

    # ------------------------------------------------------------------ faults

    def _fault(self, kind: str, host: Node) -> None:
        lasting = self.rng.uniform(*self.o.fault_s)
        start = self.now_ms()
        if kind == "sender_kill":
            if self._kill_a_sender(host):
                self._counted(kind, start, start, host)
            time.sleep(lasting)
            return
        if kind == "cut_node":
            rules = self.lab.cut(host, self.broker.address, BASE_PORT + self.rng.randrange(3))
        elif kind == "partition":
            rules = self.lab.cut(host, self.broker.address)
        else:
            rules = self.lab.lose(host, 0.2)
        try:
            time.sleep(lasting)
        finally:
            self.lab.heal(rules)
            self._counted(kind, start, self.now_ms(), host)

    def _counted(self, kind: str, start_ms: int, end_ms: int, host: Node) -> None:
        self.faults[kind] += 1
        self.fault_log.append({"kind": kind, "start_ms": start_ms, "end_ms": end_ms,
                               "target": host.name})  # fmt: skip

    def _kill_a_sender(self, host: Node) -> bool:
        senders = [pid for pid in self.lab.pids(host) if _is_sender(pid)]
        if not senders:
            return False
        try:
            os.kill(self.rng.choice(senders), signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True

    def _stop_workers(self) -> dict[int, int | None]:
        """A clean stop (SIGTERM: flush, then unresolved records noted) of every worker."""
        for process in self.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 180
        exits: dict[int, int | None] = {}
        for worker, process in self.workers.items():
            try:
                exits[worker] = process.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:  # a hung worker: the checker counts its records
                exits[worker] = None
                process.kill()
        return exits


def _is_sender(pid: int) -> bool:
    try:
        command = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    return "shmkafka.sender" in command  # (python -m shmkafka.sender --pool ...)
