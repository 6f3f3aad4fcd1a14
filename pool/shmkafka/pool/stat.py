"""``shmkafka stat``: a pool's state read from shared memory, without locking anything.

Nothing here writes to the pool or takes a lock, so it never disturbs the producers or the
Sender; figures read while they work may be a moment apart from each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from shmkafka.pool.batches import Batches, BatchInfo, Deques
from shmkafka.pool.bufferpool import BufferPool
from shmkafka.pool.recovery import STAT_NAMES
from shmkafka.pool.shared_pool import internal_errors
from shmkafka.shm.directory import Directory
from shmkafka.shm.directory_view import PartitionEntry
from shmkafka.shm.layout import (
    FREE,
    H_COMMITS_DONE,
    H_RECOVERY_STATS,
    IN_FLIGHT,
    RECOVERY_STATS,
    STATE_NAMES,
)
from shmkafka.shm.procs import age_seconds, is_alive
from shmkafka.shm.segment import Segment
from shmkafka.shm.sender_counters import (
    SHOWN,
    SenderCounters,
    recorded_sender,
    recorded_sender_alive,
)
from shmkafka.shm.slots import SlotTable


def pool_stat(name: str) -> dict[str, Any]:
    segment = Segment.attach(name)
    try:
        return segment_stat(segment)
    finally:
        segment.close()


def partition_batches(
    segment: Segment,
) -> Iterator[tuple[str, int, PartitionEntry, list[BatchInfo]]]:
    """(topic, partition, directory entry, its deque's batches, oldest first), for every
    partition of the directory (read without a lock: a moment's view)."""
    batches, deques = Batches(segment), Deques(segment)
    for topic, entries in Directory(segment).snapshot().topics.items():
        for partition, entry in enumerate(entries):
            yield (
                topic,
                partition,
                entry,
                [batches.read(b) for b in deques.batch_ids(entry.deque_id)],
            )


def segment_stat(segment: Segment) -> dict[str, Any]:
    """What ``shmkafka stat`` shows of a mapped segment."""
    config = segment.layout.config
    pid = recorded_sender(segment)[0]
    alive = recorded_sender_alive(segment)
    age = age_seconds(pid) if alive else None
    uptime = None if age is None else round(age, 1)
    processes = [
        {"slot": slot, "pid": p, "alive": is_alive(p, started)}
        for slot, p, started in SlotTable(segment).active()
    ]
    used = BufferPool.used_slabs(segment)
    batches = Batches(segment)
    states: dict[str, int] = {}
    in_flight = 0
    for batch_id in range(config.num_slabs):
        state = batches.state(batch_id)
        if state != FREE:
            states[STATE_NAMES.get(state, str(state))] = (
                states.get(STATE_NAMES.get(state, "?"), 0) + 1
            )
            in_flight += state == IN_FLIGHT
    partitions = [
        {
            "topic": topic,
            "partition": partition,
            "leader": entry.leader,
            "queued_batches": len(infos),
            "queued_bytes": sum(info.write_pos for info in infos),
            "queued_records": sum(info.record_count for info in infos),
        }
        for topic, partition, entry, infos in partition_batches(segment)
    ]
    read = asdict(SenderCounters.read(segment))
    counters = {name: read[name] for name in (*SHOWN, "bytes_sent")}
    return {
        "pool": segment.pool,
        "sender": {"pid": pid, "alive": alive, "uptime_s": uptime, **counters},
        "processes": processes,
        "max_processes": config.max_processes,
        "buffer": {
            "slabs": config.num_slabs,
            "used_slabs": used,
            "used_bytes": used * config.slab_size,
            "buffer_memory": config.buffer_memory,
        },
        "batches": states,
        "in_flight_batches": in_flight,
        "internal_errors": internal_errors(segment),
        "durability": _durability(segment),
        "partitions": partitions,
    }


def _durability(segment: Segment) -> dict[str, Any]:
    """Where the pool lives, its mode, its commits, and what the last recovery found (a
    durable pool: durability.py, recovery.py)."""
    config = segment.layout.config
    stats = RECOVERY_STATS.unpack_from(segment.buf, H_RECOVERY_STATS)
    return {
        "mode": config.pool_durability,
        "dir": config.pool_dir or "/dev/shm",
        "commits": int(segment.words[H_COMMITS_DONE >> 3]),
        "recovery": dict(zip(STAT_NAMES, stats, strict=True)),
    }


def _format_durability(durable: dict[str, Any]) -> str:
    line = f"  durability: {durable['mode']} in {durable['dir']}"
    if durable["mode"] == "memory":
        return line
    recovery = durable["recovery"]
    line += f", {durable['commits']} commits"
    if recovery["recoveries"]:
        line += (
            f"; recovered after the host went down: {recovery['recovered_records']} records "
            f"in {recovery['recovered_batches']} batches, {recovery['delivered_records']} "
            f"delivered, {recovery['failed_records']} failed, {recovery['torn_records']} "
            f"dropped as torn ({recovery['torn_batches']} batches)"
        )
    return line


def format_stat(stat: dict[str, Any]) -> str:
    sender = stat["sender"]
    lines = [
        f"pool {stat['pool']}",
        f"  sender: pid {sender['pid']} {'alive' if sender['alive'] else 'not running'}"
        + (f", up {sender['uptime_s']} s" if sender["uptime_s"] is not None else ""),
        "  sent: " + ", ".join(f"{k.replace('_', ' ')} {sender[k]}" for k in SHOWN),
        "  processes: "
        + (
            ", ".join(f"{p['pid']}{'' if p['alive'] else ' (dead)'}" for p in stat["processes"])
            or "none"
        ),
        f"  buffer: {stat['buffer']['used_slabs']}/{stat['buffer']['slabs']} slabs "
        f"({stat['buffer']['used_bytes']} of {stat['buffer']['buffer_memory']} bytes)",
        f"  batches: {stat['batches'] or 'none'}, in flight {stat['in_flight_batches']}",
        f"  internal errors: {stat['internal_errors']} (records whose result was lost: a bug)",
        _format_durability(stat["durability"]),
    ]
    for p in stat["partitions"]:
        if p["queued_batches"]:
            lines.append(
                f"  {p['topic']}-{p['partition']}: {p['queued_batches']} batches, "
                f"{p['queued_bytes']} bytes queued (leader {p['leader']})"
            )
    return "\n".join(lines)
