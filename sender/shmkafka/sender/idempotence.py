"""The idempotent producer's sequences, in one place, as the Java client keeps them in its
TransactionManager: which sequence a batch is sent with, which batches of a partition are in
flight, and what a failed batch means for the sequences: send it again, shift the later
batches down, or take a new producer id and epoch.

Rules:
- A batch takes its base sequence when it is first sent: its partition's ``next_sequence``
  (shared memory), which moves past its records before the request is written. It keeps it
  across retries, splits and a Sender's restart, so the broker recognises a resent batch.
- A split keeps its parent's range: the first half takes the parent's base sequence, each
  next half the previous one's end. No new epoch: the broker never wrote the parent.
- A batch the broker refused for good, having written nothing of it (``NOTHING_WRITTEN``),
  leaves a gap: the later batches of its partition, queued or in flight, and its
  ``next_sequence`` move down by its records (Java's ``adjustSequencesDueToFailedBatch``).
  An in-flight batch so moved is answered OUT_OF_ORDER_SEQUENCE_NUMBER for its old range,
  and sent again with its new one. No new epoch.
- A batch whose fate is unknown (it timed out, the broker lost our state) leaves sequences
  nobody can shift safely: a new producer id and epoch, every sequence from 0, once nothing
  is in flight (``reset_due``). A transactional producer never does that on its own: its
  transaction fails, and the abort's new epoch resets them.
- A retried batch goes alone (nothing else of its partition in flight), in sequence order;
  other batches go up to ``MAX_IN_FLIGHT_IDEMPOTENT`` per partition.
- A partition's batches in flight are all on one node: while any is unanswered, nothing of
  it goes to another (a new leader); with idempotence off too, for the order. A broker
  knows a producer's last five batches of a partition; newer batches written by the new
  leader meanwhile would push an old one out, and its retry, if the old leader wrote it
  and its answer was lost, would be answered OUT_OF_ORDER: a written record failed, and a
  new producer id that writes the batches queued behind it again.
- A batch sent under another producer than the pool's (a durable pool's recovered batch,
  under the producer it was first sent by) holds its partition until it is answered: the
  broker orders each producer's batches alone, so a newer batch under the pool's producer
  would pass it if it failed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.records import TRANSACTIONAL_BIT, BatchMeta
from shmkafka.shm.layout import DIRECTORY_LOCK

log = logging.getLogger("shmkafka.sender")

MAX_IN_FLIGHT_IDEMPOTENT = 5  # the most the broker keeps per producer and partition
OUT_OF_ORDER = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
PRODUCER_STATE_LOST = (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.UNKNOWN_PRODUCER_ID)
# the broker validated the batch and wrote none of it: its range can be given back
NOTHING_WRITTEN = frozenset({
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_RECORD,
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_TIMESTAMP,
})  # fmt: skip


class Idempotence:
    """The sequences of one pool's producer, and the batches it has in flight."""

    def __init__(
        self, pool: SharedPool, accumulator: RecordAccumulator, config: SenderConfig,
        transactional: bool,
    ) -> None:  # fmt: skip
        self.pool = pool
        self.accumulator = accumulator
        self.enabled = config.enable_idempotence
        self.transactional = transactional
        self.config = config
        self.in_flight: dict[int, int] = defaultdict(int)  # deque id → batches in flight
        self._in_flight_sequences: dict[int, set[int]] = defaultdict(set)
        self._in_flight_node: dict[int, int] = {}  # deque id → the node its batches went to
        # batches in flight under another producer than the pool's (recovered ones, sent
        # again under the producer they were first sent by): their partition sends nothing
        # else meanwhile, or a failure of theirs would let newer records pass them
        self._foreign: dict[int, int] = {}  # batch id → deque id
        self._max_in_flight = (
            MAX_IN_FLIGHT_IDEMPOTENT if self.enabled
            else config.max_in_flight_requests_per_connection
        )  # fmt: skip
        self.reset_pending = False

    # ------------------------------------------------------------------ sending

    def can_send(self, deque_id: int, attempts: int, leader: int) -> bool:
        """May the partition's first batch go now to ``leader`` (in order, within the
        in-flight bound, and to the node its batches in flight went to)?"""
        in_flight = self.in_flight[deque_id]
        if in_flight and self._in_flight_node.get(deque_id, leader) != leader:
            return False
        if attempts > 0:
            return in_flight == 0  # a retry goes alone, in sequence order
        if self._foreign and deque_id in self._foreign.values():
            return False
        return in_flight < self._max_in_flight

    def meta(self, batch: DrainedBatch, producer: tuple[int, int]) -> BatchMeta:
        """The batch header's facts: compression, and the producer's (id, epoch) and the
        batch's sequence (the one it was first sent with, or the partition's next)."""
        config = self.config
        if not self.enabled:
            return BatchMeta(compression=config.compression,
                             compression_level=config.compression_level)  # fmt: skip
        sequence = batch.info.base_sequence
        if sequence < 0:
            sequence = self.pool.deques.next_sequence(batch.info.deque_id)
        elif batch.info.producer_id >= 0:  # (a batch keeps the producer it was first sent by:
            producer = (batch.info.producer_id, batch.info.producer_epoch)  # recovery.py)
        return BatchMeta(
            compression=config.compression, compression_level=config.compression_level,
            attributes=TRANSACTIONAL_BIT if self.transactional else 0,
            producer_id=producer[0], producer_epoch=producer[1], base_sequence=sequence,
        )  # fmt: skip

    def sent(self, batch: DrainedBatch, meta: BatchMeta, node: int) -> None:
        """The batch is in a request to ``node`` (its sequence stored by ``finalize``): a
        first send moves the partition's next sequence past it."""
        deque_id = batch.info.deque_id
        if self.enabled and batch.info.base_sequence < 0:
            self.pool.deques.set_next_sequence(
                deque_id, meta.base_sequence + batch.info.record_count
            )
        self.in_flight[deque_id] += 1
        self._in_flight_node[deque_id] = node
        self._in_flight_sequences[deque_id].add(meta.base_sequence)
        if self.enabled and meta.producer_id != self.pool.producer_identity()[0]:
            self._foreign[batch.batch_id] = deque_id

    def answered(self, batch: DrainedBatch) -> None:
        """Its response came (or its connection failed): no longer in flight."""
        deque_id = batch.info.deque_id
        self.in_flight[deque_id] -= 1
        if not self.in_flight[deque_id]:
            self._in_flight_node.pop(deque_id, None)
        self._in_flight_sequences[deque_id].discard(batch.info.base_sequence)
        self._foreign.pop(batch.batch_id, None)

    def any_in_flight(self) -> bool:
        return any(self.in_flight.values())

    # ------------------------------------------------------------------ failures

    def retriable(self, batch: DrainedBatch, code: int, retriable: bool) -> bool:
        """Whether a batch that failed with ``code`` (``retriable``: as its error class
        says) is sent again, as far as its sequences go; may ask for a new producer."""
        if not self.enabled:
            return retriable
        if code == OUT_OF_ORDER and (
            self.reset_pending or self._moved(batch) or self._earlier_retry_pending(batch)
        ):
            # The gap an earlier batch left: it goes first, or its range was given back and
            # this one goes again with its new sequence, or (it failed for good) this one
            # goes again under the new producer id.
            return True
        if self.transactional and code in (*PRODUCER_STATE_LOST, OUT_OF_ORDER):
            # A transactional producer never takes a new epoch on its own: the transaction
            # fails (abortable, or fenced), and the abort bumps the epoch.
            return False
        if code == OUT_OF_ORDER:
            # Head of line: the broker lost batches it had acknowledged (an unclean leader
            # change). Resending cannot bring them back, so, as the Java client, this batch
            # fails with the error and the producer continues under a new id and epoch.
            self.request_reset()
            return False
        if code in PRODUCER_STATE_LOST:
            # The broker dropped or refused our producer state (its retention removed it, a
            # restart without its log, a fenced epoch): as the Java client (KIP-360), get a
            # new producer id and epoch, restart the sequences, and send the batch again.
            self.request_reset()
            return True
        return retriable

    def failed(self, batch: DrainedBatch, code: int) -> None:
        """A batch failed for good. Its range goes back when the broker wrote none of it;
        otherwise the gap it may leave is the next OUT_OF_ORDER's to resolve."""
        info = batch.info
        if not self.enabled or info.base_sequence < 0 or code not in NOTHING_WRITTEN:
            return
        self._give_back(info.deque_id, info.base_sequence, info.record_count)

    def _give_back(self, deque_id: int, start: int, count: int) -> None:
        """Move every later batch of the partition, and its next sequence, down by
        ``count``: the range [start, start + count) was never written."""
        pool = self.pool
        moved = 0
        for batch_id in self._later_batches(deque_id, start):
            info = pool.batches.read(batch_id)
            pool.batches.set_producer_state(
                batch_id, info.producer_id, info.producer_epoch, info.base_sequence - count
            )
            moved += 1
        next_sequence = pool.deques.next_sequence(deque_id)
        if next_sequence >= start + count:
            pool.deques.set_next_sequence(deque_id, next_sequence - count)
        log.info("sequences %d..%d of deque %d given back: %d later batches moved down",
                 start, start + count - 1, deque_id, moved)  # fmt: skip

    def _later_batches(self, deque_id: int, start: int) -> list[int]:
        """The batches of the partition with a sequence past ``start``: queued in its
        deque, or drained and not answered yet."""
        pool = self.pool
        with pool.locks.held(pool.layout.stripe_lock(deque_id)):
            queued = set(pool.deques.batch_ids(deque_id))
        drained = {b.batch_id for b in self.accumulator.in_flight_batches() if
                   b.info.deque_id == deque_id}  # fmt: skip
        return sorted(b for b in queued | drained if pool.batches.read(b).base_sequence > start)

    def _moved(self, batch: DrainedBatch) -> bool:
        """Its sequence moved since it was sent (a range before it was given back)."""
        now = self.pool.batches.read(batch.batch_id)
        return (now.generation == batch.info.generation
                and now.base_sequence != batch.info.base_sequence)  # fmt: skip

    def _earlier_retry_pending(self, batch: DrainedBatch) -> bool:
        # An earlier batch of the partition failed and is queued again: this one failed only
        # because of the gap it left, and will succeed once that one is through.
        sequence = batch.info.base_sequence
        if any(0 <= s < sequence for s in self._in_flight_sequences[batch.info.deque_id]):
            return True
        for batch_id in self.pool.deques.batch_ids(batch.info.deque_id):
            queued = self.pool.batches.read(batch_id)
            if queued.attempts > 0 and 0 <= queued.base_sequence < sequence:
                return True
        return False

    # ------------------------------------------------------------------ splits

    def split(self, parent: DrainedBatch, halves: Sequence[DrainedBatch]) -> None:
        """The halves of a split batch take its range, in order: no new epoch."""
        info = parent.info
        if not self.enabled or info.base_sequence < 0:
            return
        sequence = info.base_sequence
        for half in halves:
            self.pool.batches.set_producer_state(
                half.batch_id, info.producer_id, info.producer_epoch, sequence
            )
            sequence += half.info.record_count

    # ------------------------------------------------------------------ a new producer

    def request_reset(self) -> None:
        """A new producer id and epoch, every sequence from 0, once nothing is in flight."""
        self.reset_pending |= self.enabled

    def reset_due(self) -> bool:
        """True while a reset waits for the batches in flight (nothing is sent meanwhile);
        once they all answered, the reset is made."""
        if not self.reset_pending:
            return False
        if self.any_in_flight():
            return True
        reset_sequences(self.accumulator)
        self.reset_pending = False
        return False

    def resume(self) -> None:
        """A previous Sender died: queue its drained batches again, never handing out a
        sequence already used."""
        pool = self.pool
        producer_id = pool.producer_identity()[0]
        for batch in self.accumulator.in_flight_batches():
            deque_id = batch.info.deque_id
            # (a recovered batch keeps its old producer's sequences: they are not ours)
            if batch.info.base_sequence >= 0 and batch.info.producer_id == producer_id:
                end = batch.info.base_sequence + batch.info.record_count
                if end > pool.deques.next_sequence(deque_id):
                    pool.deques.set_next_sequence(deque_id, end)
            self.accumulator.reenqueue(batch, 0)
            log.info("re-sending batch %d of %s-%d", batch.batch_id, batch.topic, batch.partition)


def reset_sequences(
    accumulator: RecordAccumulator,
    reason: str = "producer state lost on the broker",
    level: int = logging.WARNING,
) -> None:
    """A new producer id from the next InitProducerId, and every sequence from 0."""
    log.log(level, "%s: new producer id, sequences from 0", reason)
    pool = accumulator.pool
    pool.set_producer_identity(-1, -1)
    # every partition's sequence from 0, and no queued batch keeping one (the caller waited
    # until nothing is in flight)
    used = pool.deques_used()
    for deque_id in range(used):
        pool.deques.set_next_sequence(deque_id, 0)
    for deque_id in pool.deques.active(used):
        for batch_id in pool.deques.batch_ids(deque_id):
            pool.batches.set_producer_state(batch_id, -1, -1, -1)
    with pool.locks.held(DIRECTORY_LOCK):
        pool.directory.forget_retired()
