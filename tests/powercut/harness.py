"""Power cuts under load, then a recovery, then a checker that reads everything back.

A round: the host boots (cutfs mounted on the durable images), apps of every API start
sending numbered records to a durable pool in its directory (the first app to open it
recovers what the last cut left), and after a random while the power goes: cutfs keeps a
random share of the dirty pages, the apps and the Sender die, the page cache goes. Some cuts
land while the pool is still being recovered, most while the apps send.

After the last round the host boots once more; one producer opens the pool (recovery) and
waits until the Sender has delivered everything. A real consumer then reads the topic back,
and the checker holds:
- nothing is delivered twice, nothing torn is delivered, nothing is reordered per process
  per partition (the records are numbered and checksummed: workers.py);
- ``sync``: every record whose send returned is delivered;
- ``flush``: a record whose send returned and that is missing was sent within the last
  window before its cut: after the start of the last commit that finished. Commits hold
  the commit lock through their msync, so that start is no earlier than the end of the
  fsync before the last one, as cutfs reports them. (The window is pool_flush_ms plus the
  time a commit takes, which a loaded machine stretches: each is reported.)
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import psutil

from shmkafka.pool.recovery import DELIVERED_RECORDS as DELIVERED
from shmkafka.pool.recovery import FAILED_RECORDS as FAILED
from shmkafka.pool.recovery import RECOVERED_RECORDS as RECOVERED
from tests.powercut.host import PowerHost
from tests.powercut.workers import API_NAMES, SAME, parse

ROOT = Path(__file__).resolve().parents[2]
QUIET_S = 2.0  # the read back's end: this long without a record, past the watermarks
FSYNC_DELAY_MS = 5  # a slow disk: cuts land inside syncs, tearing commits
SENDING_BOUND_S = 60  # (an app and its Sender start in about a second, on a loaded host in many)


@dataclass
class Outcome:
    mode: str
    cuts: int = 0
    acknowledged: int = 0
    delivered: int = 0
    lost_in_window: int = 0
    windows: list[float] = field(default_factory=list)  # flush: each cut's window (s)
    unacknowledged_delivered: int = 0
    pages_kept: int = 0
    pages_dropped: int = 0
    recovery_stats: tuple[int, ...] = ()
    problems: list[str] = field(default_factory=list)


@dataclass
class _Proc:
    proc: int
    api: str
    log: Path
    cut_at: float = 0.0
    durable_before: float = 0.0  # flush: a record sent before this time survives the cut


def run(peer_bootstrap: str, topic: str, root: Path, mode: str, cuts: int, seed: int,
        pool: str, apps: int = 3, flush_ms: int = 100) -> Outcome:  # fmt: skip
    rng = random.Random(seed)
    host = PowerHost(root)
    outcome = Outcome(mode)
    settings = {"bootstrap": peer_bootstrap, "dir": str(host.disk), "mode": mode,
                "flush_ms": flush_ms}  # fmt: skip
    procs: list[_Proc] = []
    host.boot(fsync_delay_ms=FSYNC_DELAY_MS)
    try:
        for round_ in range(cuts):
            running = []
            for i in range(apps):
                # (one API a round, each in turn: one Sender serves the pool, and the APIs'
                # defaults of its settings differ)
                proc = _Proc(round_ * apps + i, API_NAMES[round_ % len(API_NAMES)],
                             root / f"log-{round_ * apps + i}")  # fmt: skip
                procs.append(proc)
                running.append((proc, _start(proc, pool, settings, topic)))
            # a short while lands the cut in the recovery or the start; most land under load,
            # once every app has sent (an app's start, the Sender's too, takes a second; many
            # on a loaded machine). The first round always sends: a run checks something.
            if round_ and rng.random() < 0.25:
                time.sleep(rng.uniform(0.05, 0.4))
            else:
                if not _until_sending([p for p, _ in running], bound_s=SENDING_BOUND_S):
                    outcome.problems.append(
                        f"round {round_}: an app did not send within {SENDING_BOUND_S} s"
                    )
                time.sleep(rng.uniform(0.2, 1.5))
            victims = [p.pid for _, p in running] + _senders(pool)
            kept, dropped = host.cut(victims, keep=rng.choice((0.0, 0.3, 0.8)),
                                     seed=rng.randrange(1 << 30), pools=[pool])  # fmt: skip
            durable_before = host.synced[-2] if len(host.synced) >= 2 else 0.0
            if durable_before:
                outcome.windows.append(host.cut_at - durable_before)
            for proc, popen in running:
                proc.cut_at, proc.durable_before = host.cut_at, durable_before
                popen.wait(30)
            outcome.cuts += 1
            outcome.pages_kept += kept
            outcome.pages_dropped += dropped
            host.boot(fsync_delay_ms=FSYNC_DELAY_MS)
        outcome.recovery_stats = stats = _recover_and_deliver(pool, settings)
        if stats[FAILED]:  # (nobody waits for a recovered record: a failure is a loss)
            outcome.problems.append(f"{stats[FAILED]} recovered records failed: {stats}")
        _check(outcome, procs, _read_back(peer_bootstrap, topic), mode)
    finally:
        for pid in _senders(pool):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        host.shutdown()
        for name in os.listdir("/dev/shm"):
            if name.startswith((f"shmkafka.{pool}", f"sem.shmkafka.{pool}.")):
                with contextlib.suppress(OSError):
                    os.unlink(f"/dev/shm/{name}")
    return outcome


def _until_sending(procs: list[_Proc], bound_s: float) -> bool:
    """Until every app has logged a sent record; False if ``bound_s`` passed first."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if all(p.log.exists() and p.log.stat().st_size > 0 for p in procs):
            return True
        time.sleep(0.02)
    return False


def _start(proc: _Proc, pool: str, settings: dict[str, Any], topic: str) -> subprocess.Popen[bytes]:
    args = {"api": proc.api, "pool": pool, "settings": settings, "topic": topic,
            "proc": proc.proc, "count": 1_000_000, "log_path": str(proc.log)}  # fmt: skip
    env = {**os.environ, "POWERCUT_WORKER": json.dumps(args), "PYTHONPATH": str(ROOT)}
    with open(proc.log.with_suffix(".err"), "ab") as err:  # (what an app said, for a failure)
        return subprocess.Popen([sys.executable, "-m", "tests.powercut.workers"], env=env,
                                cwd=ROOT, stderr=err)  # fmt: skip


def _senders(pool: str) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmdline = p.info["cmdline"] or []
        if "shmkafka.sender" in cmdline and pool in cmdline:
            out.append(p.info["pid"])
    return out


def _recover_and_deliver(pool: str, settings: dict[str, Any]) -> tuple[int, ...]:
    """The host's first app after the last cut: recovers, and waits (bounded) until the
    Sender has delivered or failed every recovered record."""
    from shmkafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=settings["bootstrap"], pool=pool, pool_dir=settings["dir"],
        pool_durability=settings["mode"], pool_flush_ms=settings["flush_ms"], **SAME,
    )  # fmt: skip
    try:
        client = producer.shmkafka_client
        assert client is not None
        stats = client.pool.recovery_stats
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            now = stats()
            if now[DELIVERED] + now[FAILED] >= now[RECOVERED]:
                return now
            time.sleep(0.1)
        raise AssertionError(f"recovered records not delivered within 120 s: {stats()}")
    finally:
        producer.close(30)


def _read_back(bootstrap: str, topic: str) -> list[tuple[int, int, bytes]]:
    """Every record of the topic: (partition, offset, value). Read to the high watermarks,
    then on until nothing more comes for ``QUIET_S``: Tansu's high watermark can stop at the
    first offset of a partition's last batch when it is large (a recovered batch of 1 MB),
    though it serves the whole batch. A record still missing is a loss the checker names."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                                         "enable.auto.commit": False, "log_level": 3})  # fmt: skip
    try:
        meta = consumer.list_topics(topic, timeout=30)
        partitions = sorted(meta.topics[topic].partitions)
        highs = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p),
                                                   timeout=30)[1] for p in partitions}  # fmt: skip
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in partitions])  # fmt: skip
        out: list[tuple[int, int, bytes]] = []
        done = {p for p, high in highs.items() if high == 0}
        deadline = time.monotonic() + 120
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                if len(done) == len(partitions) and time.monotonic() - quiet_since > QUIET_S:
                    break
                continue
            quiet_since = time.monotonic()
            out.append((msg.partition(), msg.offset(), msg.value()))
            if msg.offset() + 1 >= highs[msg.partition()]:
                done.add(msg.partition())
        assert len(done) == len(partitions), f"read back stopped short: {done} of {highs}"
        return out
    finally:
        consumer.close()


def _acknowledged(proc: _Proc) -> dict[int, float]:
    """The numbers whose send returned, with when (a torn last line is no acknowledgement)."""
    out: dict[int, float] = {}
    if proc.log.exists():
        for line in proc.log.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[int(parts[0])] = float(parts[1])
    return out


def _check(outcome: Outcome, procs: list[_Proc], records: list[tuple[int, int, bytes]],
           mode: str) -> None:  # fmt: skip
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    for partition, offset, value in records:
        key = parse(value)
        if key in seen:
            outcome.problems.append(f"record {key} delivered twice: {seen[key]}, "
                                    f"{(partition, offset)}")  # fmt: skip
        seen[key] = (partition, offset)
    outcome.delivered = len(seen)
    for proc in procs:
        acked = _acknowledged(proc)
        outcome.acknowledged += len(acked)
        for seq, when in acked.items():
            if (proc.proc, seq) in seen:
                continue
            if mode == "flush" and when >= proc.durable_before:
                outcome.lost_in_window += 1
                continue
            outcome.problems.append(
                f"record {(proc.proc, seq)} ({proc.api}) was acknowledged "
                f"{proc.cut_at - when:.3f} s before the cut and is lost (the cut's window: "
                f"{proc.cut_at - proc.durable_before:.3f} s)"
            )
        last: dict[int, int] = defaultdict(lambda: -1)
        last_seq: dict[int, int] = defaultdict(lambda: -1)
        for seq in sorted(s for (p, s) in seen if p == proc.proc):
            partition, offset = seen[(proc.proc, seq)]
            if offset <= last[partition]:
                outcome.problems.append(f"process {proc.proc}'s record {seq} lies before "
                                        f"its record {last_seq[partition]} in partition "
                                        f"{partition}")  # fmt: skip
            last[partition], last_seq[partition] = offset, seq
            if seq not in acked:
                outcome.unacknowledged_delivered += 1
