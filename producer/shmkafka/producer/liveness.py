"""Every record gets its result: the app side's check that each record still waiting is
held by a batch, run on the completion thread.

Rules:
- The Sender posts a batch's result to the ring of every process that appended to it, and
  only then frees the descriptor (accumulator.py: ``post_completion``, then ``complete``;
  a full ring keeps the batch, slabs and all, until its result is posted). The halves of a
  split batch are queued before their parent is freed, and each names the parent's batch
  id and generation (sender/split.py).
- So the records of a registration (batch id << 32 | generation) still waiting are *held*
  while the descriptor has that generation and is not FREE, or while a descriptor that is
  not FREE names that registration as its parent.
- ``unheld`` reads the holders first; the caller then drains its ring (a result posted
  before its batch was freed is delivered then) and fails what still waits among the
  unheld at this check and at the one before: its result can never come. (Two checks,
  so that a scan that raced the Sender, say a half split again while it was read, is
  never taken for a loss.) Each such record is an internal error (a bug to find, never a
  normal path): counted in the pool header, logged at ERROR, and failed with
  ``ResultLostError`` naming the cause (results.py: ``check_liveness``).
- The check runs every ``CHECK_S``, so a lost result is noticed within about two
  ``CHECK_S`` of its batch being freed or reused: inside delivery.timeout.ms plus 1 s.
"""

from __future__ import annotations

import struct

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.layout import B_PARENT, FREE, NO_PARENT, PARENT, STATE_NAMES

CHECK_S = 0.5
STATE_AND_GENERATION = struct.Struct("<II")  # B_STATE, B_GENERATION: the descriptor's start


def unheld(pool: SharedPool, registrations: list[int]) -> dict[int, str]:
    """Of ``registrations``, those no batch holds any more, each with its cause."""
    buf, layout, slabs = pool.segment.buf, pool.layout, pool.config.num_slabs
    causes: dict[int, str] = {}
    for registration in registrations:
        batch_id, generation = registration >> 32, registration & 0xFFFFFFFF
        if batch_id >= slabs:
            causes[registration] = f"batch {batch_id} does not exist ({slabs} slabs)"
            continue
        state, current = STATE_AND_GENERATION.unpack_from(buf, layout.batch_at(batch_id))
        if current == generation and state != FREE:
            continue
        if current == generation:
            causes[registration] = f"batch {batch_id} generation {generation} was freed"
        else:
            causes[registration] = (
                f"batch {batch_id} generation {generation} was reused (now generation "
                f"{current}, {STATE_NAMES.get(state, state)})"
            )
    if causes:  # (rare: only then is every descriptor read)
        for parent in split_parents(pool):
            causes.pop(parent, None)
    return causes


def split_parents(pool: SharedPool) -> set[int]:
    """The registrations that a live half of a split batch completes part of."""
    buf, layout = pool.segment.buf, pool.layout
    parents = set()
    for batch_id in range(pool.config.num_slabs):
        at = layout.batch_at(batch_id)
        state, _ = STATE_AND_GENERATION.unpack_from(buf, at)
        if state == FREE:
            continue
        parent, generation, _ = PARENT.unpack_from(buf, at + B_PARENT)
        if parent != NO_PARENT:
            parents.add(parent << 32 | generation)
    return parents
