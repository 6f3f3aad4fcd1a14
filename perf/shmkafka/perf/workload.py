"""What ``shmkafka perf`` runs: the workload every client gets, identical across clients.

Rules:
- ``batch_size``, ``buffer_memory`` and ``max_in_flight`` are None unless the user gave
  them: then every client runs at its own default (nothing is passed). Compression, acks,
  linger and idempotence are workload settings that every client gets.
- The stop condition is ``duration_s`` if set, else ``records`` per process (``megabytes``
  is turned into ``records`` by the tool, per sweep point).
- ``fleet_rate`` paces every process at that many records/s; ``throughput`` caps the total.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace

from shmkafka.perf.values import values_for

SHMKAFKA_CLIENTS = ("shmkafka", "shmkafka-confluent")
DURABILITY_MODES = ("memory", "flush", "sync")
PEERS = ("kafka-python", "confluent-kafka")
CLIENTS = (*SHMKAFKA_CLIENTS, *PEERS)
VALUE_KINDS = ("compressible", "realistic")
KEYS_DRAWN = 250_000  # distinct draws per process; longer runs cycle through them


@dataclass(frozen=True)
class Workload:
    processes: int = 4
    records: int = 100_000  # per process; ignored when duration_s is set
    duration_s: float | None = None
    record_size: int = 100
    value_kind: str = "compressible"  # compressible | realistic
    keys: str = "uniform"  # none | uniform | zipf
    key_count: int = 10_000
    partitions: int = 16
    topic: str = "shmkafka-perf"
    acks: str = "1"
    compression: str = "lz4"
    compression_level: int | None = None
    linger_ms: int = 5
    batch_size: int | None = None  # None: each client's own default
    buffer_memory: int | None = None  # None: each client's own default
    idempotence: bool = False
    max_in_flight: int | None = None  # None: each client's own default
    throughput: float | None = None  # total records/s cap across processes
    fleet_rate: float | None = None  # records/s of every process (--fleet)
    warmup: int = 1000  # records per process before the start barrier
    seed: int = 1
    # shmkafka's pool only (peers keep records in process memory): memory, flush or sync,
    # and the directory of a durable pool (configuration.md, Durability)
    pool_durability: str = "memory"
    pool_dir: str = ""

    def __post_init__(self) -> None:
        if self.processes < 1 or self.record_size < 0 or self.partitions < 1:
            raise ValueError("processes and partitions must be >= 1, record size >= 0")
        if self.keys not in ("none", "uniform", "zipf"):
            raise ValueError(f"keys must be none, uniform or zipf, got {self.keys!r}")
        if self.value_kind not in VALUE_KINDS:
            raise ValueError(f"value kind must be compressible or realistic: {self.value_kind!r}")
        if self.acks not in ("0", "1", "all", "-1"):
            raise ValueError(f"acks must be 0, 1 or all, got {self.acks!r}")
        if self.idempotence and self.acks not in ("all", "-1"):
            raise ValueError("idempotence needs acks=all")
        for name in ("batch_size", "buffer_memory", "max_in_flight", "fleet_rate", "throughput"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be more than 0, got {value}")
        if self.pool_durability not in DURABILITY_MODES:
            raise ValueError(f"pool durability must be one of {DURABILITY_MODES}")
        if self.pool_durability != "memory" and not (self.idempotence and self.pool_dir):
            raise ValueError("a durable pool needs --idempotence (with --acks all) and a "
                             "--pool-dir")  # fmt: skip
        if self.fleet_rate is not None and self.throughput is not None:
            raise ValueError("a fleet paces every process itself: no total throughput cap too")

    @property
    def acks_int(self) -> int:
        return -1 if self.acks in ("all", "-1") else int(self.acks)

    def values(self, process: int) -> list[bytes]:
        """The process's values, sent in turn. ``compressible``: one random value for every
        record of every process (a batch of copies: lz4 shrinks it about 100x). ``realistic``:
        distinct JSON-like texts, different in every process (lz4: about 2x)."""
        if self.value_kind == "compressible":
            return [random.Random(self.seed).randbytes(self.record_size)]
        return values_for(self.seed, process, self.record_size)

    def records_for(self, process: int) -> Iterator[tuple[bytes, bytes | None]]:
        """(value, key) of the process's records, endless, the same for every client; made
        before the timed part, so that drawing them costs the timed loop nothing."""
        return zip(itertools.cycle(self.values(process)), self.keys_for(process))

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
        if self.fleet_rate is not None:
            return self.fleet_rate
        return None if self.throughput is None else self.throughput / self.processes

    def with_megabytes(self, megabytes: float) -> Workload:
        """The workload that sends ``megabytes`` (10^6 bytes) of values in all, split evenly
        among the processes (rounded up to whole records)."""
        if self.record_size < 1:
            raise ValueError("--megabytes needs a record size of at least 1 byte")
        total = math.ceil(megabytes * 1e6 / self.record_size)
        return replace(self, records=max(1, math.ceil(total / self.processes)), duration_s=None)

    def describe(
        self, processes: str | None = None, sizes: str | None = None, amount: str | None = None
    ) -> str:
        """One line; ``processes``, ``sizes`` and ``amount`` stand for a sweep's (say "P",
        "100,1000", "300 MB in all")."""
        if amount is None:
            amount = f"{self.duration_s:g} s" if self.duration_s else f"{self.records:,} records"
        if self.fleet_rate is not None:
            amount += f" at {self.fleet_rate:,.0f} records/s each"
        cap = f", capped at {self.throughput:,.0f} records/s" if self.throughput else ""
        keys = "no keys" if self.keys == "none" else f"{self.keys} keys over {self.key_count:,}"
        level = "" if self.compression_level is None else f" level {self.compression_level}"
        return (
            f"{processes or self.processes} processes x {amount}, "
            f"{sizes or self.record_size}-byte {self.value_kind} values, {keys}, "
            f"{self.partitions} partitions, acks={self.acks}, {self.compression}{level}, "
            f"linger {self.linger_ms} ms, batch: {_own(self.batch_size)}, "
            f"buffer: {_own(self.buffer_memory)}, max in flight: {_own(self.max_in_flight)}, "
            f"idempotence {'on' if self.idempotence else 'off'}{cap}"
            + (f", pools in {self.pool_dir}" if self.pool_dir else "")
        )


def _own(value: int | None) -> str:
    return "each client's default" if value is None else f"{value}"
