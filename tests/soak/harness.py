"""The soak run: a 3-node broker_stub (its own process) behind three TCP proxies, producer
workers of the three APIs, the nemesis, and the checker; then the figures.

Rules:
- The broker is ``shmkafka broker-stub`` with 3 replicas, ``min.insync.replicas=2`` and a
  durable log (``--flush sync``); its nodes advertise the proxies' ports, so every
  connection (the producers' and the checker's) crosses the network faults.
- One pool per API (the facades differ in Sender-level defaults) plus the transactional
  worker's; workers are ``python -m tests.soak.worker`` processes, restarted as a new
  incarnation whenever they die.
- The rate: every worker unpaced first (``calibrate_s``); the peak is what the pipeline
  delivered meanwhile (the topic's high watermarks), split by each worker's share of the
  sends; then every worker is paced at ``rate_fraction`` of its part.
- Secrets (the SASL password) live in 0600 files of the run's 0700 directory, never on a
  command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from tests.reliability.proxy import Proxy
from tests.soak.figures import DEFECTS, memory_summary, timeline
from tests.soak.history import INTENT, read_history
from tests.soak.nemesis import KINDS, Nemesis
from tests.soak.worker import IDLE, Board, create_board

TOPIC = "soak"
# (api, mode); the last one is transactional
WORKERS = (
    ("kafka-python", "future"), ("kafka-python", "callback"), ("kafka-python", "fire"),
    ("confluent-kafka", "callback"), ("confluent-kafka", "fire"),
    ("aiokafka", "future"), ("aiokafka", "fire"), ("kafka-python", "txn"),
)  # fmt: skip
POOL_OF_API = {"kafka-python": "kp", "confluent-kafka": "cf", "aiokafka": "aio"}


@dataclass(frozen=True)
class Options:
    duration_s: float = 1800.0
    security: str = "plaintext"  # or "sasl_ssl"
    calibrate_s: float = 15.0
    rate_fraction: float = 0.8
    fault_interval_s: tuple[float, float] = (3.0, 8.0)
    # each kind injected at least this often, or the run fails; None: 60% of what the
    # deck deals each kind over the duration (12 in 30 minutes, 4 in 10)
    min_faults: int | None = None
    record_size: int = 200
    buffer_memory: int = 4 << 20
    partitions: int = 4
    max_partitions: int = 24
    retention_ms: int = 180_000
    session_lifetime_ms: int = 10_000
    seed: int | None = None
    directory: str | None = None


def required_faults(o: Options, kind: str = "") -> int:
    """How often a fault kind must have happened for the run to pass (the topic grows only
    up to ``max_partitions``: ``partitions_grow`` can happen no more often than that)."""
    if o.min_faults is not None:
        need = o.min_faults
    else:
        dealt = o.duration_s / (sum(o.fault_interval_s) / 2) / len(KINDS)
        need = max(1, int(0.6 * dealt))
    if kind == "partitions_grow":
        return min(need, o.max_partitions - o.partitions)
    return need


@dataclass
class Slot:
    worker: int
    api: str
    mode: str
    pool: str
    incarnation: int = 0
    proc: subprocess.Popen[bytes] | None = None
    armed: dict[str, str] | None = None
    armed_now: bool = False  # the running incarnation carries a kill point
    exits: Counter[str] = field(default_factory=Counter)


def free_ports(count: int) -> int:
    """A base port with ``count`` free ports from it."""
    for _ in range(200):
        base = random.randint(20_000, 50_000)
        sockets: list[socket.socket] = []
        try:
            for i in range(count):
                sockets.append(socket.create_server(("127.0.0.1", base + i)))
        except OSError:
            continue  # a port in the range is taken: try another range
        finally:
            # Closed on both paths: a socket left open when a later port of
            # its range was taken is an unraisable ResourceWarning at its
            # collection, which pytest fails the test for.
            for s in sockets:
                s.close()
        return base
    raise RuntimeError("no free port range")


def write_private(path: str, text: str) -> None:
    """A file only its owner reads (a config may name a secret's file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def write_final(directory: str, partitions: int) -> None:
    """Tell the checker the run is over, with the topic's partition count as the broker has
    it at the end: it reads every partition, one grown in the run's last seconds too
    (renamed into place whole: the checker reads it once it exists)."""
    final = os.path.join(directory, "final")
    write_private(final + ".part", json.dumps({"partitions": partitions}))
    os.replace(final + ".part", final)


def control(address: tuple[str, int], op: str, **args: Any) -> Any:
    """One operation on broker_stub's control port."""
    with socket.create_connection(address, timeout=60) as s:
        s.sendall(json.dumps({"op": op, "args": args}).encode() + b"\n")
        reply = json.loads(s.makefile().readline())
    if not reply["ok"]:
        raise RuntimeError(f"{op}: {reply['error']}")
    return reply["result"]


def start_checker(directory: str, bootstrap: str, security: dict[str, Any] | None,
                  topic: str, modes: dict[int, str]) -> subprocess.Popen[bytes]:  # fmt: skip
    """The history checker (checker.py), reading ``topic`` back as the run goes."""
    config = {"dir": directory, "bootstrap": bootstrap, "security": security, "topic": topic,
              "modes": modes}  # fmt: skip
    path = os.path.join(directory, "checker.json")
    write_private(path, json.dumps(config))
    with open(os.path.join(directory, "checker.log"), "ab") as err:
        return subprocess.Popen([sys.executable, "-m", "tests.soak.checker", path],
                                stdout=err, stderr=err)  # fmt: skip


def stop_slots(slots: list[Slot], sigterm: Callable[[int], bool],
               count_exit: Callable[[Slot, int], bool]) -> dict[str, Any]:  # fmt: skip
    """A clean stop (SIGTERM: flush, then unresolved records noted) of every worker: each
    is signalled once it is up (``sigterm(worker)`` says whether it was), one that does not
    end in 180 s is hung, one that ends with a code ``count_exit`` does not expect failed."""
    up_by = time.monotonic() + 60  # (one just started: it comes up first)
    for slot in slots:
        while slot.proc is not None and not sigterm(slot.worker):
            if slot.proc.poll() is not None or time.monotonic() > up_by:
                break
            time.sleep(0.05)
    hung, failed = [], []
    deadline = time.monotonic() + 180
    for slot in slots:
        if slot.proc is None:
            continue
        try:
            code = slot.proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung.append(slot.worker)
            slot.proc.kill()
            slot.proc.wait()
            continue
        if code != 0 and not count_exit(slot, code):
            failed.append((slot.worker, code))
    return {"hung_processes": hung, "failed_processes": failed}


class Soak:
    def __init__(self, options: Options) -> None:
        self.o = options
        self.seed = options.seed if options.seed is not None else random.randrange(1 << 30)
        self.rng = random.Random(self.seed)
        self.dir = options.directory or tempfile.mkdtemp(prefix="shmkafka-soak-")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.tag = secrets.token_hex(3)
        self.topic = TOPIC
        self.max_partitions = options.max_partitions
        self.node_ids = [1, 2, 3]
        self.epoch = time.time()
        self.proxies: list[Proxy] = []
        self.broker: subprocess.Popen[bytes] | None = None
        self.control_port = 0
        self.security: dict[str, Any] | None = None
        self.board: Board = create_board(os.path.join(self.dir, "board"))
        self.slots = [Slot(i, api, mode, f"soak{self.tag}{POOL_OF_API[api]}"
                           if mode != "txn" else f"soak{self.tag}txn")
                      for i, (api, mode) in enumerate(WORKERS)]  # fmt: skip
        self.stopping = False
        self._lock = threading.Lock()
        self._log = open(os.path.join(self.dir, "soak.log"), "a")  # noqa: SIM115 - the run's
        self._faults = open(os.path.join(self.dir, "faults.jsonl"), "a")  # noqa: SIM115
        self.memory: list[dict[str, Any]] = []
        self.nemesis = Nemesis(self, options.fault_interval_s, self.seed)

    # ------------------------------------------------------------------ helpers

    def now_ms(self) -> int:
        return int((time.time() - self.epoch) * 1000)

    def note(self, text: str) -> None:
        with self._lock:
            self._log.write(f"{self.now_ms():>9} {text}\n")
            self._log.flush()

    def log_fault(self, kind: str, start_ms: int, end_ms: int, target: str) -> None:
        line = {"kind": kind, "start_ms": start_ms, "end_ms": end_ms, "target": target}
        with self._lock:
            self._faults.write(json.dumps(line) + "\n")
            self._faults.flush()

    def control(self, op: str, **args: Any) -> Any:
        return control(("127.0.0.1", self.control_port), op, **args)

    def plain_workers(self) -> list[int]:
        return [s.worker for s in self.slots if s.mode != "txn"]

    def txn_workers(self) -> list[int]:
        return [s.worker for s in self.slots if s.mode == "txn"]

    def burst_workers(self) -> list[int]:
        return [s.worker for s in self.slots if s.api != "aiokafka" and s.mode != "txn"]

    def pools(self) -> list[str]:
        return sorted({s.pool for s in self.slots})

    def sender_pid(self, pool: str) -> int:
        from shmkafka.shm.segment import Segment
        from shmkafka.shm.sender_counters import recorded_sender

        try:
            segment = Segment.attach(pool)
        except Exception:  # noqa: BLE001 - no pool just now (between Senders)
            return 0
        try:
            return recorded_sender(segment)[0]
        finally:
            segment.close()

    def alive(self, worker: int) -> bool:
        proc = self.slots[worker].proc
        return proc is not None and proc.poll() is None

    def arm(self, worker: int, env: dict[str, str]) -> None:
        self.slots[worker].armed = env

    def kill_worker(self, worker: int, signum: int) -> bool:
        """Signal a running worker; a SIGTERM (a clean stop) only once it is up, with its
        handler in place (before that, SIGTERM would simply end it)."""
        proc = self.slots[worker].proc
        if proc is None or proc.poll() is not None:
            return False
        if signum == signal.SIGTERM and self.board.phase(worker) == IDLE:
            return False
        try:
            os.kill(proc.pid, signum)
        except ProcessLookupError:
            return False
        return True

    # ------------------------------------------------------------------ broker

    def start_broker(self) -> None:
        base = free_ports(4)
        self.proxies = [Proxy(("127.0.0.1", base + i)) for i in range(3)]
        storage = os.path.join(self.dir, "broker")
        command = [
            sys.executable, "-m", "shmkafka.broker_stub", "--nodes", "3", "--port", str(base),
            "--replication-factor", "3", "--min-insync-replicas", "2",
            "--partitions", str(self.o.partitions), "--storage", storage, "--flush", "sync",
            "--segment-bytes", str(16 << 20), "--retention-ms", str(self.o.retention_ms),
            "--advertise-ports", ",".join(str(p.port) for p in self.proxies),
        ]  # fmt: skip
        if self.o.security == "sasl_ssl":
            command += self._security_arguments()
        with open(os.path.join(self.dir, "broker.log"), "ab") as out:
            self.broker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=out)
        assert self.broker.stdout is not None
        line = self.broker.stdout.readline().decode()
        if "control port" not in line:
            raise RuntimeError(f"broker_stub did not start: {line!r}")
        self.control_port = int(line.split("control port ")[1].split(";")[0])
        threading.Thread(target=self._drain_broker_output, daemon=True).start()
        self.control("create_topic", name=self.topic, partitions=self.o.partitions, rf=3)
        self.note(f"broker up: {line.strip()}")

    def _drain_broker_output(self) -> None:
        assert self.broker is not None and self.broker.stdout is not None
        for _ in self.broker.stdout:
            pass

    def _security_arguments(self) -> list[str]:
        from pathlib import Path

        from tests.security import make_certs

        certs_dir = os.path.join(self.dir, "certs")
        os.makedirs(certs_dir, mode=0o700, exist_ok=True)
        certs = make_certs(Path(certs_dir))
        password = secrets.token_urlsafe(24)
        users = os.path.join(self.dir, "users")
        secret = os.path.join(self.dir, "password")
        for path, text in ((users, f"soak:{password}\n"), (secret, password)):
            write_private(path, text)
        self.security = {
            "protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512", "username": "soak",
            "password_file": secret, "cafile": certs.ca,
        }  # fmt: skip
        return [
            "--tls-cert", certs.server[0], "--tls-key", certs.server[1],
            "--sasl-mechanisms", "SCRAM-SHA-512", "--users-file", users,
            "--sasl-session-lifetime-ms", str(self.o.session_lifetime_ms),
        ]  # fmt: skip

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p.port}" for p in self.proxies)

    # ------------------------------------------------------------------ workers

    def start_worker(self, slot: Slot) -> None:
        slot.incarnation += 1
        config = {
            "worker": slot.worker, "incarnation": slot.incarnation, "api": slot.api,
            "mode": slot.mode, "pool": slot.pool, "bootstrap": self.bootstrap,
            "security": self.security, "topic": self.topic, "dir": self.dir,
            "board": os.path.join(self.dir, "board"), "epoch": self.epoch,
            "record_size": self.o.record_size, "buffer_memory": self.o.buffer_memory,
            "burst": 2 * self.o.buffer_memory // self.o.record_size,
            "transactional_id": f"soak-{self.tag}-txn{slot.worker}",
        }  # fmt: skip
        path = os.path.join(self.dir, f"w{slot.worker:03d}-i{slot.incarnation:04d}.json")
        write_private(path, json.dumps(config))
        self.board.set_phase(slot.worker, IDLE)  # (it says SENDING once it is up)
        env = dict(os.environ, SHMKAFKA_SENDER_IDLE_EXIT_MS="2000")
        env.pop("SHMKAFKA_FAULT_AT", None)
        slot.armed_now = slot.armed is not None
        if slot.armed:
            env.update(slot.armed)
            slot.armed = None
        with open(path[: -len(".json")] + ".log", "ab") as err:
            slot.proc = subprocess.Popen([sys.executable, "-m", "tests.soak.worker", path],
                                         env=env, stdout=err, stderr=err)  # fmt: skip

    def supervise(self) -> None:
        """Restart a worker that exited (a kill, a kill point, a clean stop asked for)."""
        for slot in self.slots:
            proc = slot.proc
            if proc is None or proc.poll() is None:
                continue
            self._count_exit(slot, proc.returncode)
            slot.proc = None
            if not self.stopping:
                self.start_worker(slot)

    def _count_exit(self, slot: Slot, code: int) -> bool:
        """Count a worker's exit; True if it was its kill point (armed: it may fire in the
        final stop too, in the flush that SIGTERM starts)."""
        why = {-9: "SIGKILL", 0: "clean"}.get(code, f"exit {code}")
        slot.exits[why] += 1
        if slot.armed_now and code == -signal.SIGKILL:
            kind = "txn_kill_mid_commit" if slot.mode == "txn" else "app_kill_mid_append"
            now = self.now_ms()
            self.nemesis.counted(kind, now, now, f"w{slot.worker}")
            return True
        if code not in (0, -signal.SIGKILL):
            self.note(f"worker {slot.worker} i{slot.incarnation} ended: {why}")
        return False

    def seqs(self) -> dict[int, int]:
        """Each worker's records announced so far, over all its incarnations."""
        total: dict[int, int] = {}
        for name in os.listdir(self.dir):
            if name.endswith(".hist"):
                worker = int(name[1:4])
                last = 0
                for e in read_history(os.path.join(self.dir, name)):
                    if e.kind == INTENT:
                        last = e.offset
                total[worker] = total.get(worker, 0) + last
        return total

    def delivered(self) -> int:
        """Records (and transaction markers) in the topic so far: the high watermarks."""
        count = self.control("partition_count", topic=self.topic)
        return sum(self.control("high_watermark", topic=self.topic, partition=p)
                   for p in range(count))  # fmt: skip

    def calibrate(self) -> tuple[int, dict[int, int]]:
        """The peak: what the whole pipeline delivers with every worker unpaced (the high
        watermarks' growth, so a pool filling up does not count), and each worker's share
        of the sends meanwhile. Returns (records/s delivered, records/s per worker)."""
        warmup = min(5.0, self.o.calibrate_s / 3)  # (started, connected, queues full)
        end = time.monotonic() + warmup
        while time.monotonic() < end:
            self.supervise()
            time.sleep(0.2)
        sent0, delivered0, t0 = self.seqs(), self.delivered(), time.monotonic()
        end = t0 + self.o.calibrate_s
        while time.monotonic() < end:
            self.supervise()
            time.sleep(0.2)
        sent1, delivered1, t1 = self.seqs(), self.delivered(), time.monotonic()
        peak = int((delivered1 - delivered0) / (t1 - t0))
        sent = {w: max(0, sent1.get(w, 0) - sent0.get(w, 0)) for w in sent1}
        total = sum(sent.values()) or 1
        return peak, {w: int(peak * n / total) for w, n in sent.items()}

    # ------------------------------------------------------------------ memory

    def sample_memory(self) -> None:
        row: dict[str, Any] = {"t_s": round(self.now_ms() / 1000)}
        pids = {f"sender {p}": self.sender_pid(p) for p in self.pools()}
        pids.update({f"w{s.worker}": s.proc.pid for s in self.slots if s.proc is not None})
        if self.broker is not None:
            pids["broker"] = self.broker.pid
        for name, pid in pids.items():
            with contextlib.suppress(psutil.Error, ValueError):
                info = psutil.Process(pid).memory_full_info()
                row[name] = {"rss_mb": round(info.rss / 2**20, 1),
                             "pss_mb": round(info.pss / 2**20, 1)}  # fmt: skip
        self.memory.append(row)
        with open(os.path.join(self.dir, "memory.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")

    # ------------------------------------------------------------------ the run

    def run(self) -> dict[str, Any]:
        self.note(f"soak: seed {self.seed}, dir {self.dir}, options {asdict(self.o)}")
        self.start_broker()
        checker = self._start_checker()
        try:
            for slot in self.slots:
                self.start_worker(slot)
            peak, peaks = self.calibrate()
            rates = {w: max(20, int(r * self.o.rate_fraction)) for w, r in peaks.items()}
            for w, rate in rates.items():
                self.board.set_rate(w, rate)
            self.note(f"peak {peak} records/s delivered, shares {peaks}; paced at {rates}")
            started = self.now_ms()
            until = time.monotonic() + self.o.duration_s
            nemesis = threading.Thread(target=self.nemesis.run, args=(until,), daemon=True)
            nemesis.start()
            next_memory = time.monotonic()
            while time.monotonic() < until:
                self.supervise()
                if time.monotonic() >= next_memory:
                    self.sample_memory()
                    next_memory += 60
                time.sleep(0.1)
            self.nemesis.stop()
            nemesis.join(60)
            self.nemesis.heal()
            ended = self.now_ms()
            time.sleep(3)
            self.supervise()
            self.sample_memory()
            stop = self._stop_workers()
            left = self._wait_pools_gone()
            auth = self.control("auth_events") if self.security else {}
            verdict = self._finish_checker(checker)
        finally:
            self._teardown(checker)
        report = self._report(verdict, peak, peaks, rates, started, ended, stop, left, auth)
        with open(os.path.join(self.dir, "report.json"), "w") as f:
            json.dump(report, f, indent=1)
        return report

    def _start_checker(self) -> subprocess.Popen[bytes]:
        return start_checker(self.dir, self.bootstrap, self.security, self.topic,
                             {s.worker: s.mode for s in self.slots})  # fmt: skip

    def _stop_workers(self) -> dict[str, Any]:
        """A clean stop of every worker; one that does not end in 180 s is hung."""
        self.stopping = True
        return stop_slots(self.slots, lambda w: self.kill_worker(w, signal.SIGTERM),
                          self._count_exit)  # fmt: skip

    def _wait_pools_gone(self) -> list[str]:
        """Every pool, its semaphores and its Sender gone (the Senders exit when idle)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            left = self._left_behind()
            if not left:
                return []
            time.sleep(0.5)
        return left

    def _left_behind(self) -> list[str]:
        prefix = f"soak{self.tag}"
        left = [n for n in os.listdir("/dev/shm") if prefix in n]
        for p in psutil.process_iter(["cmdline"]):
            line = p.info["cmdline"] or []
            if "shmkafka.sender" in line and any(prefix in a for a in line):
                left.append(f"Sender pid {p.pid}")
        return left

    def _finish_checker(self, checker: subprocess.Popen[bytes]) -> dict[str, Any]:
        write_final(self.dir, self.control("partition_count", topic=self.topic))
        checker.wait(900)
        with open(os.path.join(self.dir, "verdict.json")) as f:
            verdict: dict[str, Any] = json.load(f)
        return verdict

    def _teardown(self, checker: subprocess.Popen[bytes]) -> None:
        self.stopping = True
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                slot.proc.kill()
                slot.proc.wait()
        if checker.poll() is None:
            checker.kill()
            checker.wait()
        if self.broker is not None and self.broker.poll() is None:
            self.broker.terminate()
            try:
                self.broker.wait(30)
            except subprocess.TimeoutExpired:
                self.broker.kill()
                self.broker.wait()
        for proxy in self.proxies:
            proxy.close()
        if self.broker is not None and self.broker.stdout is not None:
            self.broker.stdout.close()
        self._log.close()
        self._faults.close()
        # a pool whose Sender was killed last may stay: remove it (it is reported above)
        from shmkafka.pool.cleanup import cleanup_pool

        for pool in self.pools():
            with contextlib.suppress(Exception):
                cleanup_pool(pool)

    # ------------------------------------------------------------------ figures

    def _report(self, verdict: dict[str, Any], peak: int, peaks: dict[int, int],
                rates: dict[int, int],
                started: int, ended: int, stop: dict[str, Any], left: list[str],
                auth: dict[str, int]) -> dict[str, Any]:  # fmt: skip
        counts = verdict["counts"]
        counts["hung"] = counts.get("hung", 0) + len(stop["hung_processes"])
        with open(os.path.join(self.dir, "faults.jsonl")) as f:
            faults = [json.loads(line) for line in f]
        pool_of = {slot.worker: slot.pool for slot in self.slots}
        timing = timeline(self.dir, faults, pool_of, started, ended)
        injected = dict(self.nemesis.injected)
        report = {
            "seed": self.seed, "dir": self.dir, "security": self.o.security,
            "duration_s": round((ended - started) / 1000), "peak_rates": peaks,
            "paced_rates": rates, "peak_total": peak,
            "paced_total": sum(rates.values()), "counts": counts,
            "examples": verdict.get("examples", {}), "caught_up": verdict.get("caught_up"),
            "partitions": verdict.get("partitions"), "faults": injected,
            "faults_asked": dict(self.nemesis.asked),
            "faults_required": required_faults(self.o), **stop, "left_behind": left,
            "auth_events": auth, "memory": memory_summary(self.memory),
            "exits": {f"w{s.worker} {s.api} {s.mode}": dict(s.exits) for s in self.slots},
            **timing,
        }  # fmt: skip
        report["passed"] = (
            all(counts.get(k, 0) == 0 for k in (*DEFECTS, "resolved_twice", "ack_mismatch",
                                                "txn_partial", "fire_and_forget_absent"))
            and not stop["failed_processes"] and not left and bool(verdict.get("caught_up"))
            and all(injected.get(k, 0) >= required_faults(self.o, k) for k in KINDS)
        )  # fmt: skip
        return report
