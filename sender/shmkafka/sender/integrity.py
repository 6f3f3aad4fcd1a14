"""Integrity of the shared batches: ``verify_batches`` checks that no batch exposes a
partial record (tests and diagnostics), ``quarantine_damaged`` empties deques whose memory
is damaged (the Sender, periodically).

Rules:
- Both read descriptors and deques that other processes write: quarantine takes the
  deque's stripe lock before it changes anything; verify is for a pool nobody appends to.
"""

from __future__ import annotations

from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.errors import DecodeError
from shmkafka.protocol.records import decode_batch, finalize_batch
from shmkafka.shm.layout import FREE


def quarantine_damaged(acc: RecordAccumulator) -> list[tuple[DrainedBatch, str]]:
    """Empty every deque whose links are damaged; return the batches that were
    queued there (found by their descriptors), each with the problem, for the Sender to
    fail. Appenders open new batches on the emptied deque."""
    out: list[tuple[DrainedBatch, str]] = []
    pool = acc.pool
    deques = pool.deques
    for deque_id in deques.active(pool.deques_used()):
        if deques.problem(deque_id) is None:  # the common case: no lock
            continue
        found = pool.directory.owner(deque_id)
        if found is None:
            continue
        topic, partition = found
        with pool.locks.held(pool.layout.stripe_lock(deque_id)):
            problem = deques.problem(deque_id)
            if problem is None:
                continue
            for info in acc.seal_queued(deque_id):
                out.append((DrainedBatch(topic, partition, info), problem))
    return out


def verify_batches(pool: SharedPool) -> list[str]:
    """Check that no batch exposes a partial record: each live batch's published bytes hold
    exactly ``record_count`` whole records (decoded from a finalized copy). For tests and
    ``shmkafka`` diagnostics, while no process appends."""
    problems = []
    for batch_id in range(pool.config.num_slabs):
        info = pool.batches.read(batch_id)
        if info.state == FREE:
            continue
        if info.record_count == 0:
            problems.append(f"batch {batch_id} is queued with no record")
            continue
        copy = bytearray(pool.batches.data(info))
        data = finalize_batch(
            copy,
            info.write_pos,
            record_count=info.record_count,
            last_offset_delta=info.record_count - 1,
            base_timestamp=info.base_timestamp,
            max_timestamp=info.max_timestamp,
        )
        try:
            decoded = decode_batch(b"".join(data))
        except DecodeError as exc:
            problems.append(f"batch {batch_id}: {exc}")
            continue
        if len(decoded.records) != info.record_count:
            problems.append(f"batch {batch_id}: {len(decoded.records)} != {info.record_count}")
    return problems
