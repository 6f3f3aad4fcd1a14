"""The Sender's finish of the batches a produce response acknowledged, in one call a
response.

``finish_sent`` is the Python twin and the reference of ``FastAppend.finish_sent``
(``_append_finish.c``); the Sender calls the C one where the extension is built and the pool
is not durable (a durable pool frees a batch only after a commit: ``Sender._complete``).

Rules:
- A row is ``(batch id, generation, base offset, log append time, log start offset)``: a
  batch the response acknowledged, with the generation it was sent at.
- For each row, as ``Sender.finish`` does for a success: its result (``completion_for``,
  with the Sender's view of its last request) posted to every process that appended to it;
  then, unless a ring was full, its descriptor FREE and its slab run given back to the
  caller, which frees the runs and wakes the slots once the round's posts are done.
- A row whose descriptor no longer holds the batch sent (not IN_FLIGHT at that generation,
  recovered, or wrong by ``BatchTable.problem``) is left to the caller, untouched.
"""

from __future__ import annotations

from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.batches import BatchInfo
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.records import HEADER_SIZE
from shmkafka.shm.layout import FREE, IN_FLIGHT
from shmkafka.shm.rings import SenderView, ring_entry

Acked = tuple[int, int, int, int, int]
Finished = tuple[list[int], list[tuple[int, list[int]]], list[int], list[tuple[int, int]]]


def sender_view(info: BatchInfo, node: int, sent_ms: int, took_ms: int) -> SenderView:
    """How the Sender handled the batch, for its result: its last request, to ``node``,
    sent at ``sent_ms`` and answered in ``took_ms`` (-1: no answer)."""
    return SenderView(info.attempts + 1, node, sent_ms - info.created_ms, took_ms)


def finish_sent(
    pool: SharedPool, rows: list[Acked], node: int, sent_ms: int, took_ms: int,
    deques_used: int,
) -> Finished:  # fmt: skip
    """(slots posted to, [(row index, slots whose ring was full)] not freed, row indexes
    left to the caller, slab runs (first, count) to free): the twin of
    ``FastAppend.finish_sent``."""
    posted: list[int] = []
    full: list[tuple[int, list[int]]] = []
    left: list[int] = []
    runs: list[tuple[int, int]] = []
    batches = pool.batches
    for index, (batch_id, generation, base_offset, append_time, log_start) in enumerate(rows):
        info = batches.read(batch_id)
        if (
            info.state != IN_FLIGHT or info.generation != generation
            or batches.recovered(batch_id)
            or batches.problem(info, deques_used, HEADER_SIZE) is not None
        ):  # fmt: skip
            left.append(index)
            continue
        view = sender_view(info, node, sent_ms, took_ms)
        done = RecordAccumulator.completion_for(
            DrainedBatch("", 0, info), base_offset, 0, append_time, log_start, view
        )
        slots, full_slots = pool.rings.post_to(info.appenders_raw, ring_entry(done))
        posted += slots
        if full_slots:
            full.append((index, full_slots))
            continue
        batches.set_state(batch_id, FREE)
        runs.append((info.first_slab, info.slab_count))
    return posted, full, left, runs
