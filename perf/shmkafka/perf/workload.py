"""What ``shmkafka perf`` runs: the workload every client gets, identical across clients."""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

CLIENTS = ("shmkafka", "kafka-python", "confluent-kafka")
KEYS_DRAWN = 250_000  # distinct draws per process; longer runs cycle through them


@dataclass(frozen=True)
class Workload:
    processes: int = 4
    records: int = 100_000  # per process; ignored when duration_s is set
    duration_s: float | None = None
    record_size: int = 100
    keys: str = "uniform"  # none | uniform | zipf
    key_count: int = 10_000
    partitions: int = 16
    topic: str = "shmkafka-perf"
    acks: str = "1"
    compression: str = "lz4"
    compression_level: int | None = None
    linger_ms: int = 5
    batch_size: int = 16384
    buffer_memory: int = 32 * 1024 * 1024
    idempotence: bool = False
    max_in_flight: int = 5
    throughput: float | None = None  # total records/s cap across processes
    warmup: int = 1000  # records per process before the start barrier
    seed: int = 1

    def __post_init__(self) -> None:
        if self.processes < 1 or self.record_size < 0 or self.partitions < 1:
            raise ValueError("processes and partitions must be >= 1, record size >= 0")
        if self.keys not in ("none", "uniform", "zipf"):
            raise ValueError(f"keys must be none, uniform or zipf, got {self.keys!r}")
        if self.acks not in ("0", "1", "all", "-1"):
            raise ValueError(f"acks must be 0, 1 or all, got {self.acks!r}")
        if self.idempotence and self.acks not in ("all", "-1"):
            raise ValueError("idempotence needs acks=all")

    @property
    def acks_int(self) -> int:
        return -1 if self.acks in ("all", "-1") else int(self.acks)

    def value(self) -> bytes:
        return random.Random(self.seed).randbytes(self.record_size)

    def keys_for(self, process: int) -> Iterator[bytes | None]:
        """The process's key sequence (endless), the same for every client. Drawn up front
        (then cycled), so that drawing keys costs the timed loop nothing."""
        rng = random.Random(self.seed * 1_000_003 + process)
        if self.keys == "none":
            return itertools.repeat(None)
        names = [b"key-%08d" % i for i in range(self.key_count)]
        count = min(self.records + self.warmup, KEYS_DRAWN) if not self.duration_s else KEYS_DRAWN
        if self.keys == "uniform":
            return itertools.cycle([names[rng.randrange(self.key_count)] for _ in range(count)])
        weights = list(itertools.accumulate(1 / (i + 1) for i in range(self.key_count)))
        total, last = weights[-1], self.key_count - 1
        drawn = [
            names[min(bisect.bisect_left(weights, rng.random() * total), last)]
            for _ in range(count)
        ]
        return itertools.cycle(drawn)

    def per_process_rate(self) -> float | None:
        return None if self.throughput is None else self.throughput / self.processes

    def describe(self) -> str:
        amount = f"{self.duration_s:g} s" if self.duration_s else f"{self.records:,} records"
        cap = f", capped at {self.throughput:,.0f} records/s" if self.throughput else ""
        keys = "no keys" if self.keys == "none" else f"{self.keys} keys over {self.key_count:,}"
        return (
            f"{self.processes} processes x {amount}, {self.record_size}-byte values, {keys}, "
            f"{self.partitions} partitions, acks={self.acks}, {self.compression}, "
            f"linger {self.linger_ms} ms, batch {self.batch_size}, "
            f"idempotence {'on' if self.idempotence else 'off'}{cap}"
        )
