"""Two pools made alike, one for each twin of a C/Python pair (the differential tests):
the same operations on both must leave the same bytes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.config import PoolConfig
from tests.conftest import publish

CREATED_MS = slice(56, 64)  # (the header's creation time: each pool's own)


def twin_pools(
    prefix: str, config: PoolConfig, topics: dict[str, int] | None = None
) -> Iterator[tuple[SharedPool, SharedPool]]:
    """A fixture's body: two pools of ``config`` (with ``topics`` published), destroyed
    after the test."""
    made = [SharedPool.open(f"{prefix}{uuid.uuid4().hex[:12]}", config) for _ in range(2)]
    for pool in made:
        if topics:
            publish(pool, topics)
    yield made[0], made[1]
    for pool in made:
        pool.destroy()


def segment_bytes(pool: SharedPool) -> bytearray:
    """The pool's segment, but for what differs between two pools made alike."""
    data = bytearray(pool.segment.buf[: pool.layout.size])
    data[CREATED_MS] = bytes(8)
    return data
