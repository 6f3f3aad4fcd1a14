"""Pool-level configuration: what every process attached to one pool must agree on.

These values size the shared-memory segment, so they are frozen at creation: the segment
stores them (as canonical JSON) with a SHA-256 fingerprint, and attaching with different
values is a ``LayoutMismatchError`` naming the keys that differ.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from shmkafka.shm.errors import ShmConfigError

POOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOPIC_NAME = 249  # Kafka's limit
# The pool's unit of memory. A batch is a run of slabs that grows with its partition's load
# up to ``batch_size`` (accumulator.py), so a partition that gets one record a second holds
# one slab, not a whole batch_size.
SLAB_SIZE = 16384
DURABILITY_MODES = ("memory", "flush", "sync")


def validate_pool_name(name: str) -> str:
    if not isinstance(name, str) or not POOL_NAME.match(name):
        raise ShmConfigError(
            f"invalid pool name {name!r}: use 1-64 characters from A-Z a-z 0-9 _ -"
        )
    return name


@dataclass(frozen=True)
class PoolConfig:
    """Sizes of one pool. Names follow Kafka's producer configs where one exists."""

    batch_size: int = 16384  # the largest batch (Kafka's batch.size), not its memory
    buffer_memory: int = 32 * 1024 * 1024
    max_request_size: int = 1024 * 1024
    # Capacities of the regions that grow (layout.py): memory is reserved as they fill, so
    # these are ceilings of address space, not of memory.
    max_topics: int = 65536
    max_partitions: int = 1 << 20
    max_processes: int = 4096
    lock_stripes: int = 64
    # librdkafka's batch.num.messages: the most records in one batch (0: no limit)
    batch_max_records: int = 0
    # The Sender-level settings (canonical JSON of a SenderConfig) every producer of the pool
    # shares: one Sender serves them all. "" = not recorded (tools, tests).
    sender_settings: str = ""
    # Where the pool lives and what survives the host (durability.py): "" is /dev/shm; a
    # directory on a file system that persists keeps the pool there, "flush" writes it back
    # every pool_flush_ms, "sync" returns a send only once a group commit covers it.
    pool_dir: str = ""
    pool_durability: str = "memory"
    pool_flush_ms: int = 200

    def __post_init__(self) -> None:
        checks = (
            ("batch_size", 256, 64 * 1024 * 1024),
            ("buffer_memory", 1024, 64 * 1024 * 1024 * 1024),
            ("max_request_size", 256, 1024 * 1024 * 1024),
            ("max_topics", 1, 1 << 20),
            ("max_partitions", 1, 1 << 24),
            ("max_processes", 1, 1 << 16),
            ("lock_stripes", 1, 4096),
            ("batch_max_records", 0, 1_000_000),
            ("pool_flush_ms", 1, 3_600_000),
        )
        for key, lo, hi in checks:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                raise ShmConfigError(f"{key} must be an integer within {lo}..{hi}, got {value!r}")
        if not isinstance(self.sender_settings, str) or len(self.sender_settings) > 3072:
            raise ShmConfigError("sender_settings must be a JSON text of at most 3072 chars")
        self._check_durability()
        if self.buffer_memory < self.slab_size:
            raise ShmConfigError(
                f"buffer_memory ({self.buffer_memory}) must hold at least one slab "
                f"({self.slab_size} bytes)"
            )

    def _check_durability(self) -> None:
        if self.pool_durability not in DURABILITY_MODES:
            raise ShmConfigError(
                f"pool_durability must be one of {', '.join(DURABILITY_MODES)}, "
                f"got {self.pool_durability!r}"
            )
        if not isinstance(self.pool_dir, str) or len(self.pool_dir) > 1024:
            raise ShmConfigError("pool_dir must be a directory path of at most 1024 chars")
        if self.pool_dir and not self.pool_dir.startswith("/"):
            raise ShmConfigError(f"pool_dir must be an absolute path, got {self.pool_dir!r}")
        if self.pool_durability != "memory" and not self.pool_dir:
            raise ShmConfigError(
                f"pool_durability={self.pool_durability!r} needs pool_dir: a directory on a "
                "file system that persists (/dev/shm does not survive the host)"
            )

    @property
    def durable(self) -> bool:
        """True when the pool keeps commit records (flush and sync): durability.py."""
        return self.pool_durability != "memory"

    @property
    def slab_size(self) -> int:
        return min(SLAB_SIZE, self.batch_size)

    @property
    def max_run(self) -> int:
        """The most slabs a batch grows to (a larger record still gets a run that fits)."""
        return max(1, self.batch_size // self.slab_size)

    @property
    def record_limit(self) -> int:
        """The most bytes a record's size bound may take: one request, within the pool."""
        return min(self.max_request_size, self.buffer_memory)

    @property
    def num_slabs(self) -> int:
        return self.buffer_memory // self.slab_size

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    def fingerprint(self) -> bytes:
        return hashlib.sha256(self.to_json()).digest()

    @classmethod
    def from_json(cls, data: bytes) -> PoolConfig:
        raw: dict[str, Any] = json.loads(data)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

    def differences(self, other: PoolConfig) -> list[str]:
        mine, theirs = dataclasses.asdict(self), dataclasses.asdict(other)
        return [
            f"{k}: segment has {theirs[k]!r}, asked {mine[k]!r}"
            for k in mine
            if mine[k] != theirs[k]
        ]
