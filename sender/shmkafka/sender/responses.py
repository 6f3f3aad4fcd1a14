"""The Sender's handling of its produce responses: each batch of a request acknowledged
(finished in one call a response: pool/finishing.py), retried, split or failed.

Rules:
- A batch's response settles it once: ``idempotence.answered`` first, then one of finish,
  retry (back to its deque in sequence order: accumulator.reenqueue), split or fail.
- A partition missing from the response is retried like a lost response; a connection that
  failed retries (or fails, past delivery.timeout.ms or the retries) every batch it carried.
- MESSAGE_TOO_LARGE with several records splits the batch in two (KIP-126); the halves
  take its sequences (idempotence.py).
- The acknowledged batches are finished in one call (C where built): the ones it leaves
  (a descriptor damaged or recovered, and every batch of a durable pool, freed only after a
  commit) go through ``Sender.finish``, one by one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.finishing import Acked, Finished, sender_view
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.broker_errors import for_code
from shmkafka.protocol.clock import Clock
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import InvalidMetadataError, KafkaError, RetriableError
from shmkafka.protocol.messages import ProduceResponse
from shmkafka.sender.connection import ClientResponse
from shmkafka.sender.idempotence import Idempotence
from shmkafka.sender.metadata import Metadata
from shmkafka.sender.split import split_batch
from shmkafka.shm import faultpoints
from shmkafka.shm.errors import BufferExhaustedError
from shmkafka.shm.rings import DELIVERY_TIMEOUT, Completion, SenderView
from shmkafka.shm.sender_counters import SenderCounters


class Host(Protocol):
    """What the responses ask of the Sender that sent the requests (sender.py's ``Sender``)."""

    pool: SharedPool
    config: SenderConfig
    clock: Clock
    accumulator: RecordAccumulator
    metadata: Metadata
    idempotence: Idempotence
    stats: SenderCounters
    finisher: Callable[[list[Acked], int, int, int, int], Finished]

    def finish(
        self, batch: DrainedBatch, base_offset: int, code: int, append: int, start: int,
        view: SenderView | None = None,
    ) -> None:  # fmt: skip
        """The batch's result posted, and its memory given back."""

    def pend(self, batch: DrainedBatch, completion: Completion, slots: list[int]) -> None:
        """A result some rings had no room for, posted to them again later."""


log = logging.getLogger("shmkafka.sender")


def _view(batch: DrainedBatch, response: ClientResponse, took: int) -> SenderView:
    return sender_view(batch.info, response.node_id, response.sent_ms, took)


class ProduceResponses:
    def __init__(self, sender: Host) -> None:
        self.sender = sender

    def on_produce(
        self, batches: list[DrainedBatch], response: ClientResponse, now_ms: int
    ) -> None:
        faultpoints.reached("sender.before_complete")
        results: dict[tuple[str, int], tuple[int, int, int, int]] = {}
        answer = response.response
        if isinstance(answer, ProduceResponse):
            self.sender.stats.produce_responses += 1
            # (now_ms is the round's start, before the poll waited: read the clock)
            latency = self.sender.clock.monotonic_ms() - response.sent_ms
            self.sender.stats.produce_latency_ms += max(0, latency)
            for topic in answer.responses:
                for part in topic.partition_responses:
                    results[(topic.name, part.index)] = (
                        part.error_code, part.base_offset, part.log_append_time_ms,
                        part.log_start_offset,
                    )  # fmt: skip
        took = self.sender.clock.monotonic_ms() - response.sent_ms if answer is not None else -1
        acked: list[tuple[DrainedBatch, Acked]] = []
        for batch in batches:
            self.sender.idempotence.answered(batch)
            if response.error is not None:
                self.retry_or_fail(batch, response.error, ErrorCode.NETWORK_EXCEPTION, now_ms)
                continue
            if answer is None:  # acks=0: done once written
                self.sender.finish(batch, -1, 0, -1, -1, _view(batch, response, took))
                continue
            code, base_offset, append_time, log_start = results.get(
                (batch.topic, batch.partition), (ErrorCode.NETWORK_EXCEPTION, -1, -1, -1)
            )  # (a partition missing from the response is retried like a lost response)
            if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                acked.append((batch, (batch.batch_id, batch.info.generation, base_offset,
                                      append_time, log_start)))  # fmt: skip
            elif (
                code == ErrorCode.MESSAGE_TOO_LARGE
                and batch.info.record_count > 1
                and self._split(batch, now_ms)
            ):
                continue
            else:
                self.retry_or_fail(batch, for_code(code)(), code, now_ms)
        if acked:
            self._finish_acked(acked, response, took)

    def _finish_acked(
        self, acked: list[tuple[DrainedBatch, Acked]], response: ClientResponse, took: int
    ) -> None:
        """The acknowledged batches finished in one call (finishing.py: posted and freed),
        and by ``finish`` what it leaves (and every batch of a durable pool)."""
        rows = [row for _, row in acked]
        if self.sender.pool.committer is None:
            posted, full, left, runs = self.sender.finisher(
                rows, response.node_id, response.sent_ms, took, self.sender.pool.deques_used()
            )
            self.sender.accumulator.finished(posted, runs)
        else:
            full, left = [], list(range(len(acked)))
        for index, slots in full:
            batch, (_, _, base, append, start) = acked[index]
            view = _view(batch, response, took)
            done = self.sender.accumulator.completion_for(batch, base, 0, append, start, view)
            self.sender.pend(batch, done, slots)
        for index in left:
            batch, (_, _, base, append, start) = acked[index]
            self.sender.finish(batch, base, 0, append, start, _view(batch, response, took))

    def retry_or_fail(self, batch: DrainedBatch, error: KafkaError, code: int, now_ms: int) -> None:
        info = batch.info
        retriable = self.sender.idempotence.retriable(
            batch, code, isinstance(error, RetriableError)
        )
        in_time = now_ms - info.created_ms < self.sender.config.delivery_timeout_ms
        if retriable and in_time and info.attempts < self.sender.config.retries:
            if isinstance(error, InvalidMetadataError):
                self.sender.metadata.request_update()
            self.sender.accumulator.reenqueue(batch, now_ms)
            self.sender.stats.retries += 1
            self.sender.stats.records_retried += info.record_count
            log.debug("retrying %s-%d: %s", batch.topic, batch.partition, error)
            return
        self.sender.stats.errors += 1
        log.warning("batch to %s-%d failed: %s", batch.topic, batch.partition, error)
        final = DELIVERY_TIMEOUT if retriable and not in_time else (code if code else -1)
        self.sender.idempotence.failed(batch, final)
        self.sender.finish(batch, -1, final, -1, -1)

    def _split(self, batch: DrainedBatch, now_ms: int) -> bool:
        """MESSAGE_TOO_LARGE with several records: split the batch in two and send the halves
        (as the Java client, KIP-126), transactional or not. They take the batch's sequences
        (idempotence.py): no new epoch."""
        try:
            halves = split_batch(self.sender.accumulator, batch, now_ms, self._free_split)
        except BufferExhaustedError:
            return False
        self.sender.idempotence.split(batch, halves)
        self.sender.stats.retries += 1
        self.sender.stats.records_retried += batch.info.record_count
        log.info(
            "split a batch of %d records to %s-%d: %s",
            batch.info.record_count, batch.topic, batch.partition,
            [h.info.record_count for h in halves],
        )  # fmt: skip
        return True

    def _free_split(self, parent: DrainedBatch) -> None:
        """A durable pool: the halves (queued now) are committed first, then the parent goes
        DONE, then its memory (recovery keeps a live parent whole: durability.py)."""
        committer = self.sender.pool.committer
        if committer is not None:
            committer.commit()
            committer.commit([(parent.batch_id, parent.info.generation)])
        self.sender.accumulator.complete(parent)
