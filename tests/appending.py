"""Appending by topic and partition for tests: the deque looked up in the pool's directory,
then ``RecordAccumulator.append_to``, the path the client's send takes."""

from __future__ import annotations

from collections.abc import Sequence

from shmkafka.pool.accumulator import AppendResult, RecordAccumulator
from shmkafka.protocol.broker_errors import UnknownTopicOrPartitionError
from shmkafka.protocol.records import HeaderInput


def append(
    acc: RecordAccumulator,
    topic: str,
    partition: int,
    timestamp_ms: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[HeaderInput] = (),
    *,
    now_ms: int,
) -> AppendResult:
    snapshot = acc.pool.directory.snapshot()
    entries = snapshot.topics.get(topic)
    if entries is None:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} is not in the pool's directory")
    if not 0 <= partition < len(entries):
        raise UnknownTopicOrPartitionError(
            f"partition {partition} of {topic!r} does not exist ({len(entries)} partitions)"
        )
    return acc.append_to(
        entries[partition].deque_id, timestamp_ms, key, value, headers, now_ms=now_ms,
        version=snapshot.version,
    )  # fmt: skip
