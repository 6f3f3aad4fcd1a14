"""The idempotent producer's sequences in the pool: the one a batch is sent with, and what
the Sender does when it loses them (a new producer id) or takes over from a dead Sender
(batches it had in flight).

Rules:
- A reset runs only with nothing in flight (the caller waits): it drops the producer id,
  restarts every partition's sequence at 0 (idle ones too), clears the sequences of the
  queued batches and forgets the retired topics' saved ones, under the directory lock.
- A restarted Sender sends a dead one's drained batches again, in sequence order, and moves
  each partition's next sequence past the ones those batches used.
"""

from __future__ import annotations

import logging

from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.records import TRANSACTIONAL_BIT, BatchMeta
from shmkafka.shm.layout import DIRECTORY_LOCK

log = logging.getLogger("shmkafka.sender")


def batch_meta(
    pool: SharedPool, config: SenderConfig, transactional: bool, batch: DrainedBatch,
    producer: tuple[int, int],
) -> BatchMeta:  # fmt: skip
    """The batch header's facts: compression, and the idempotent producer's (id, epoch)
    and sequence (the batch keeps the one it was first sent with; a new one takes the next)."""
    if not config.enable_idempotence:
        return BatchMeta(compression=config.compression, compression_level=config.compression_level)
    sequence = batch.info.base_sequence
    if sequence < 0:
        sequence = pool.deques.next_sequence(batch.info.deque_id)
    return BatchMeta(
        compression=config.compression, compression_level=config.compression_level,
        attributes=TRANSACTIONAL_BIT if transactional else 0, producer_id=producer[0],
        producer_epoch=producer[1], base_sequence=sequence,
    )  # fmt: skip


def reset_sequences(
    accumulator: RecordAccumulator,
    reason: str = "producer state lost on the broker",
    level: int = logging.WARNING,
) -> None:
    """A new producer id from the next InitProducerId, and every sequence from 0."""
    log.log(level, "%s: new producer id, sequences from 0", reason)
    pool = accumulator.pool
    pool.set_producer_identity(-1, -1)
    accumulator.forget_sequences()
    with pool.locks.held(DIRECTORY_LOCK):
        pool.directory.forget_retired()


def resume_in_flight(pool: SharedPool, accumulator: RecordAccumulator) -> None:
    """A previous Sender died: queue its drained batches again, never handing out a
    sequence already used."""
    for batch in accumulator.in_flight_batches():
        deque_id = batch.info.deque_id
        if batch.info.base_sequence >= 0:
            end = batch.info.base_sequence + batch.info.record_count
            if end > pool.deques.next_sequence(deque_id):
                pool.deques.set_next_sequence(deque_id, end)
        accumulator.reenqueue(batch, 0)
        log.info("re-sending batch %d of %s-%d", batch.batch_id, batch.topic, batch.partition)
