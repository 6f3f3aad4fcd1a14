"""``shmkafka cleanup``: remove pools whose processes are all dead — never a live pool.

A pool is in use while any process slot or the Sender recorded in its header belongs to a
live process. A segment whose creator died before writing its header, or semaphores left
without a segment, are removed as well.

``remove_orphans`` (run by every Sender as it starts, then every 5 minutes) removes, unasked, the
user's pools that no live process uses and that hold no record (no slab in use): what an
OOM kill or a container stop of every process leaves behind. A pool still holding records
stays, for the next producer of that pool to adopt (its Sender delivers them). So does a pool
made less than ``STALE_HEADER_S`` ago: its maker may be between making it and attaching (a
sidecar's ``sender --create`` detaches, then its Sender attaches).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from shmkafka.pool.bufferpool import BufferPool
from shmkafka.shm.errors import LayoutMismatchError, PoolNotFoundError, ShmError
from shmkafka.shm.layout import SENDER_BYTE, SPAWN_BYTE
from shmkafka.shm.locks import KernelLock
from shmkafka.shm.procs import is_alive
from shmkafka.shm.segment import PREFIX, Segment, list_pools, unlink_segment
from shmkafka.shm.sender_counters import recorded_sender, recorded_sender_alive
from shmkafka.shm.slots import SlotTable

STALE_HEADER_S = 30.0


@dataclass(frozen=True)
class CleanupResult:
    pool: str
    removed: bool
    reason: str


def live_processes(segment: Segment) -> list[int]:
    pids = [pid for _, pid, started in SlotTable(segment).active() if is_alive(pid, started)]
    if recorded_sender_alive(segment) or _locked_by_a_process(segment):
        pids.append(recorded_sender(segment)[0])
    return pids


def cleanup_pool(pool: str) -> CleanupResult:
    try:
        segment = Segment.attach(pool)
    except PoolNotFoundError:
        unlink_segment(pool)  # semaphores without a segment
        return CleanupResult(pool, True, "no segment; removed its semaphores")
    except LayoutMismatchError as exc:
        age = time.time() - os.stat(f"/dev/shm/{PREFIX}{pool}").st_mtime
        if age < STALE_HEADER_S:
            return CleanupResult(pool, False, f"unreadable but recent, left alone: {exc}")
        unlink_segment(pool)
        return CleanupResult(pool, True, f"unreadable for {age:.0f} s: {exc}")
    except ShmError as exc:
        return CleanupResult(pool, False, str(exc))
    try:
        with SlotTable(segment).lock():  # (attaching processes claim slots under it)
            live = live_processes(segment)
            if not live and segment.is_current():
                unlink_segment(pool)
    finally:
        segment.close()
    if live:
        return CleanupResult(pool, False, f"in use by pid {', '.join(map(str, live))}")
    return CleanupResult(pool, True, "every process of it is dead")


def remove_orphans(keep: str | None = None) -> list[str]:
    """Remove this user's pools (but ``keep``) with no live process and no record held;
    returns their names. Checked and done under each pool's slot-table lock, which
    attaching processes also take."""
    removed = []
    for name in list_pools():
        if name == keep:
            continue
        try:
            made = os.stat(f"/dev/shm/{PREFIX}{name}")
            if made.st_uid != os.getuid() or time.time() - made.st_mtime < STALE_HEADER_S:
                continue
            segment = Segment.attach(name)
        except (OSError, ShmError):
            continue  # gone meanwhile, or unreadable (``shmkafka cleanup`` decides those)
        try:
            with SlotTable(segment).lock():
                if (
                    segment.is_current()
                    and not live_processes(segment)
                    and not (BufferPool.used_slabs(segment))
                ):
                    unlink_segment(name)
                    removed.append(name)
        finally:
            segment.close()
    return removed


def cleanup(pool: str | None = None) -> list[CleanupResult]:
    pools = [pool] if pool else _all_pool_names()
    return [cleanup_pool(name) for name in pools]


def _all_pool_names() -> list[str]:
    names = set(list_pools())
    sem_prefix = "sem." + PREFIX
    for entry in os.listdir("/dev/shm"):
        if entry.startswith(sem_prefix):
            names.add(entry[len(sem_prefix) :].rsplit(".", 1)[0])
    return sorted(names)


def _locked_by_a_process(segment: Segment) -> bool:
    """A Sender runs (its lock), or a producer is starting one (the spawn lock), in any PID
    namespace: the kernel knows, where pids read from another namespace would not."""
    return any(
        KernelLock.for_segment(segment, byte).held_by_another()
        for byte in (SENDER_BYTE, SPAWN_BYTE)
    )
