"""Many hosts against one cluster: hosts made by the kernel (lab.py), each with one pool and
one Sender shared by app processes of the three APIs, producing to a 3-node broker_stub
whose nodes each live in a namespace of their own; the kernel's faults between them
(faults.py); every record checked by the soak's history checker.

Rules:
- The broker is one ``shmkafka broker-stub`` process (3 replicas, ``min.insync.replicas=2``,
  ``--flush sync``) whose node i listens in namespace ``b{i}`` on ``BASE_PORT + i - 1``
  (``--node-netns``): replication and the quorum follow the nodes' links over the
  network, so a node cut off from the others is fenced and its leadership moves.
- Each host is booted (lab.py): its own /dev/shm, IPC and time namespaces, its monotonic
  clock ``i * CLOCK_STEP_S`` ahead of the machine's. Its app processes are the soak's
  workers (``python -m tests.soak.worker``), restarted as a new incarnation when they die;
  all but the transactional one share the host's pool (``one_pool``: the three APIs agree
  on every Sender-level setting), and a transactional id has a pool and Sender of its own.
- The checker (``python -m tests.soak.checker``) reads the topic back from the root
  namespace through the switch, and classifies every record as the soak does.
- Figures: the soak's (figures.py's ``timeline``: p50/p99 send→ack outside and during
  faults, per fault kind the longest stretch without acks and when they resumed), records
  acknowledged per host, each host's connections to the brokers (sampled every minute), and
  the frames each link lost, duplicated, reordered and corrupted.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from tests.hosts.faults import HostsNemesis
from tests.hosts.lab import NetLab, Node, command_of
from tests.soak.figures import DEFECTS, timeline
from tests.soak.harness import (
    Slot,
    control,
    start_checker,
    stop_slots,
    write_final,
    write_private,
)
from tests.soak.history import ACKED, read_history
from tests.soak.worker import IDLE, create_board

BASE_PORT = 19092
TOPIC = "hosts"
# a host's app processes, in order (the first ``workers_per_host``); "txn" is transactional
WORKERS = (
    ("kafka-python", "future"), ("confluent-kafka", "callback"), ("aiokafka", "future"),
    ("kafka-python", "txn"), ("confluent-kafka", "fire"), ("kafka-python", "callback"),
)  # fmt: skip
CLOCK_STEP_S = 30 * 86400  # host i's monotonic clock reads i x 30 days ahead


@dataclass(frozen=True)
class HostsOptions:
    hosts: int = 4
    workers_per_host: int = 6
    duration_s: float = 1800.0
    rate: int = 60  # records/s per app process
    record_size: int = 200
    partitions: int = 6
    fault_interval_s: tuple[float, float] = (2.0, 5.0)
    fault_s: tuple[float, float] = (3.0, 8.0)
    seed: int | None = None
    directory: str | None = None


class HostsRun:
    def __init__(self, options: HostsOptions, lab: NetLab) -> None:
        self.o, self.lab = options, lab
        self.seed = options.seed if options.seed is not None else random.randrange(1 << 30)
        self.dir = options.directory or tempfile.mkdtemp(prefix="shmkafka-hosts-")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.topic = TOPIC
        self.epoch = time.time()
        self.board = create_board(os.path.join(self.dir, "board"))
        self.node_ids = [1, 2, 3]
        self.brokers = [lab.add_node(f"b{n}") for n in self.node_ids]
        self.hosts = [lab.add_node(f"h{i}") for i in range(options.hosts)]
        for i, host in enumerate(self.hosts):
            lab.boot(host, clock_offset_s=i * CLOCK_STEP_S)
        self.slots = [
            Slot(h * options.workers_per_host + k, api, mode, f"host{h}")
            for h in range(options.hosts)
            for k, (api, mode) in enumerate(WORKERS[: options.workers_per_host])
        ]  # fmt: skip
        self.host_of = {s.worker: self.hosts[int(s.pool[4:])] for s in self.slots}
        self.nemesis = HostsNemesis(self, self.seed)
        self.connections: list[dict[str, dict[str, int]]] = []
        self.stopping = False
        self.control_port = 0
        self._slot_lock = threading.Lock()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{b.address}:{BASE_PORT + i}" for i, b in enumerate(self.brokers))

    def control(self, op: str, **args: Any) -> Any:
        return control(("127.0.0.1", self.control_port), op, **args)

    def now_ms(self) -> int:
        return int((time.time() - self.epoch) * 1000)

    # ------------------------------------------------------------------ the run

    def run(self) -> dict[str, Any]:
        self._start_broker()
        checker = self._start_checker()
        try:
            started, ended, left_faulty, errors_sent, stop = self._faults_and_stop()
            write_final(self.dir, self.control("partition_count", topic=TOPIC))
            checker.wait(900)
        finally:  # (whatever failed: the checker does not outlive the run)
            if checker.poll() is None:
                checker.kill()
                checker.wait(30)
        with open(os.path.join(self.dir, "verdict.json")) as f:
            verdict: dict[str, Any] = json.load(f)
        host_of = {worker: host.name for worker, host in self.host_of.items()}
        report = {
            "seed": self.seed, "options": asdict(self.o), "counts": verdict["counts"],
            "examples": verdict["examples"], "caught_up": verdict["caught_up"],
            "faults": dict(self.nemesis.injected), "faults_asked": dict(self.nemesis.asked),
            "fault_notes": self.nemesis.notes, "left_faulty": left_faulty, **stop,
            "broker_errors_sent": errors_sent,
            "exits": {s.worker: dict(s.exits) for s in self.slots},
            "acked_per_host": self._acked_per_host(host_of),
            "connections": self.connections, "links": self.lab.link_counters(),
            "timeline": timeline(self.dir, self.nemesis.log, host_of, started, ended),
            # the same from the app processes whose results come at once, on the completion
            # thread (KafkaProducer's callbacks): the others read theirs once a chunk
            "timeline_callbacks": timeline(self.dir, self.nemesis.log, {
                w: h for w, h in host_of.items() if self.slots[w].api == "kafka-python"
                and self.slots[w].mode in ("callback", "txn")}, started, ended),
        }  # fmt: skip
        with open(os.path.join(self.dir, "report.json"), "w") as f:
            json.dump(report, f, indent=1)
        return report

    def _faults_and_stop(self) -> tuple[int, int, list[str], dict[str, int], dict[str, Any]]:
        """The app processes started, the faults for ``duration_s``, then the clean stop."""
        for slot in self.slots:
            self.start_worker(slot)
        time.sleep(5)  # (every worker up and sending before the first fault)
        self._until_connected(60)
        started = self.now_ms()
        until = time.monotonic() + self.o.duration_s
        nemesis = threading.Thread(target=self.nemesis.run,
                                   args=(until, self.o.fault_interval_s), daemon=True)  # fmt: skip
        nemesis.start()
        next_sample = time.monotonic()
        while time.monotonic() < until:
            self.supervise()
            if time.monotonic() >= next_sample:
                self.connections.append({h.name: self._connections(h) for h in self.hosts})
                next_sample += 60
            time.sleep(0.1)
        self.nemesis.stop()
        nemesis.join(60)
        left_faulty = self.nemesis.heal()
        ended = self.now_ms()
        # what the brokers answered produce requests with, by error code: the leader changes
        # (6), timeouts (7), ISR refusals (19, 20) the producers' idempotence went through
        errors_sent = {str(k): v for k, v in self.control("errors_sent").items()}
        time.sleep(3)
        self.supervise()
        return started, ended, left_faulty, errors_sent, self._stop_workers()

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
            str(BASE_PORT), "--host", "127.0.0.1",
            "--node-hosts", ",".join(b.address for b in self.brokers),
            "--node-netns", ",".join(b.namespace for b in self.brokers),
            "--replication-factor", "3", "--min-insync-replicas", "2",
            "--replica-lag-time-max-ms", "5000", "--session-timeout-ms", "1500",
            "--partitions", str(self.o.partitions), "--no-auto-create",
            "--storage", os.path.join(self.dir, "broker"), "--flush", "sync",
        ]  # fmt: skip
        with open(os.path.join(self.dir, "broker.log"), "ab") as err:
            broker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err)
        self.lab.processes.append(broker)
        assert broker.stdout is not None
        line = broker.stdout.readline().decode()
        if "control port" not in line:
            raise RuntimeError(f"broker_stub did not start: {line!r}")
        self.control_port = int(line.split("control port ")[1].split(";")[0])
        self.control("create_topic", name=TOPIC, partitions=self.o.partitions, rf=3)

    def _start_checker(self) -> subprocess.Popen[bytes]:
        modes = {s.worker: s.mode for s in self.slots}
        return start_checker(self.dir, self.bootstrap, None, TOPIC, modes)

    # ------------------------------------------------------------------ app processes

    def start_worker(self, slot: Slot) -> None:
        slot.incarnation += 1
        config = {
            "worker": slot.worker, "incarnation": slot.incarnation, "api": slot.api,
            "mode": slot.mode, "pool": slot.pool, "one_pool": True,
            "bootstrap": self.bootstrap, "security": None, "topic": TOPIC, "dir": self.dir,
            "board": os.path.join(self.dir, "board"), "epoch": self.epoch,
            "record_size": self.o.record_size, "buffer_memory": 32 << 20, "burst": 1000,
            "transactional_id": f"hosts-txn{slot.worker}",
        }  # fmt: skip
        path = os.path.join(self.dir, f"w{slot.worker:03d}-i{slot.incarnation:04d}.json")
        write_private(path, json.dumps(config))
        self.board.set_phase(slot.worker, IDLE)  # (it says SENDING once it is up)
        self.board.set_rate(slot.worker, self.o.rate)
        env = dict(os.environ, SHMKAFKA_SENDER_IDLE_EXIT_MS="2000")
        with open(path[: -len(".json")] + ".log", "ab") as err:
            argv = [sys.executable, "-m", "tests.soak.worker", path]
            slot.proc = self.lab.spawn(self.host_of[slot.worker], argv, env=env, stdout=err,
                                       stderr=err, cwd=os.getcwd())  # fmt: skip

    def supervise(self) -> None:
        """Restart an app process that died (a kill), unless the run is stopping."""
        with self._slot_lock:
            for slot in self.slots:
                if slot.proc is None or slot.proc.poll() is None:
                    continue
                code = slot.proc.returncode
                slot.exits[{-9: "SIGKILL", 0: "clean"}.get(code, f"exit {code}")] += 1
                slot.proc = None
                if not self.stopping:
                    self.start_worker(slot)

    def running_worker(self, rng: random.Random) -> int | None:
        with self._slot_lock:  # (supervise() replaces a dead one's process meanwhile)
            up = [s.worker for s in self.slots if s.proc is not None and s.proc.poll() is None
                  and self.board.phase(s.worker) != IDLE]  # fmt: skip
        return rng.choice(up) if up else None

    def signal_worker(self, worker: int, signum: int) -> bool:
        proc = self.slots[worker].proc  # (one read: supervise() may replace it)
        if proc is None or proc.poll() is not None:
            return False
        try:
            os.kill(proc.pid, signum)  # (nsenter execs: the pid is the worker's)
        except ProcessLookupError:
            return False
        return True

    def senders(self, host: Node) -> list[int]:
        return [pid for pid in self.lab.pids(host) if _is_sender(pid)]

    def _stop_workers(self) -> dict[str, Any]:
        with self._slot_lock:
            self.stopping = True

        def sigterm(worker: int) -> bool:  # (once it is up: its handler is in place)
            return self.board.phase(worker) != IDLE and self.signal_worker(worker, signal.SIGTERM)

        return stop_slots(self.slots, sigterm, lambda slot, code: False)

    def _until_connected(self, bound_s: float) -> None:
        """Until every host's pool Sender holds a broker connection (``bound_s`` at most: on
        a loaded machine a Sender takes longer than the workers' warm-up to connect, and
        the first connections sample would catch it before; past the bound the samples'
        check reports it)."""
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            if all(self._connections(h).get("pool_sender", 0) for h in self.hosts):
                return
            self.supervise()
            time.sleep(0.2)

    def _connections(self, host: Node) -> dict[str, int]:
        """The host's connections to the brokers, by who holds them: the shared pool's
        Sender, the transactional Senders, the app processes (none)."""
        by: Counter[str] = Counter()
        for broker in self.brokers:
            for pid in self.lab.connections(host, broker.address):
                by[_holder(pid)] += 1
        by["processes"] = sum(1 for h in self.host_of.values() if h is host)
        return dict(by)


def problems(report: dict[str, Any]) -> list[str]:
    """What a run found wrong: a record not accounted for, a hung or failed process, a
    fault left in place, a checker that did not catch up (empty: it passed)."""
    counts, found = report["counts"], []
    for kind in (*DEFECTS, "resolved_twice", "ack_mismatch", "txn_partial",
                 "fire_and_forget_absent"):  # fmt: skip
        if counts.get(kind, 0):
            found.append(f"{kind}: {counts[kind]} ({report['examples'].get(kind)})")
    for key in ("hung_processes", "failed_processes", "left_faulty", "fault_notes"):
        if report[key]:
            found.append(f"{key}: {report[key]}")
    died = {w: e for w, e in report["exits"].items() if set(e) - {"SIGKILL", "clean"}}
    if died:  # (an app process ended by an exception: its log has the traceback)
        found.append(f"app processes that died: {died}")
    if not report["caught_up"]:
        found.append("the checker did not read everything back")
    if report["timeline"]["acked_logged"] != counts["acknowledged"]:
        found.append("the histories and the checker disagree on the acks")
    return found


def _is_sender(pid: int) -> bool:
    return "shmkafka.sender" in command_of(pid)  # (python -m shmkafka.sender --pool ...)


def _holder(pid: int) -> str:
    command = command_of(pid)
    if "shmkafka.sender" not in command:
        return "apps"
    pool = command[command.index("--pool") + 1] if "--pool" in command else ""
    return "pool_sender" if pool.startswith("host") else "txn_senders"  # (a txn id's pool)
