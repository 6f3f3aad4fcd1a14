"""The C append fast path (``_append.c``) for one pool: built and allowed, and given the
pool's memory map, its slot and its lock semaphores. Its Python twin, the append of
``accumulator.py``, is the reference and serves when this gives None."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from shmkafka.pool import native
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.records import HEADER_SIZE
from shmkafka.shm import lockdep
from shmkafka.shm.layout import (
    B_ATTEMPTS,
    B_BASE_SEQUENCE,
    B_BASE_TS,
    B_CREATED,
    B_DEQUE,
    B_FIRST_SLAB,
    B_GENERATION,
    B_LAST_APPEND,
    B_MAX_TS,
    B_NEXT,
    B_PARENT,
    B_PARENT_DELTA,
    B_PARENT_GENERATION,
    B_PRODUCER_EPOCH,
    B_PRODUCER_ID,
    B_PUBLISH,
    B_RECORD_COUNT,
    B_RECOVERED,
    B_SLAB_COUNT,
    B_STATE,
    B_WRITE_POS,
    BATCH_SIZE_BYTES,
    D_ENDS,
    D_RUN_HINT,
    D_STICKY,
    FIRST_STRIPE_LOCK,
    FREE,
    H_ALLOC_CURSOR,
    H_DIRECTORY_VERSION,
    H_NEW_BATCHES,
    H_SENDER_LINGER,
    H_SENDER_WAKE_AT,
    H_SLOTS_HIGH,
    H_WAITQ_HEAD,
    H_WAITQ_TAIL,
    IN_FLIGHT,
    LOCK,
    LOCK_OWNER_PID,
    LOCK_OWNER_SLOT,
    LOCK_OWNER_START,
    NO_BATCH,
    NO_PARENT,
    NO_SLAB,
    OPEN,
    POOL_LOCK,
    RING_ENTRY,
    S_PENDING,
    S_PENDING_COUNT,
    S_RING_HEAD,
    S_RING_TAIL,
    SEALED,
    Layout,
)
from shmkafka.shm.segment import semaphore_name

if TYPE_CHECKING:
    from shmkafka.pool._append import FastAppend
else:
    try:
        native.check()
        from shmkafka.pool._append import FastAppend
    except ImportError:  # not built (no C compiler): the pure-Python path serves
        FastAppend = None
try:
    from shmkafka.pool._append import full_fence
except ImportError:  # no C append path: producers always wake the Sender, no fence needed

    def full_fence() -> None:
        """The Sender's side of the new-batch wake protocol (_append.c's twin)."""


__all__ = ["FastAppend", "fast_path_for", "fast_path_offsets", "full_fence"]
log = logging.getLogger("shmkafka.producer")
_warned_not_built = False


def fast_path_for(pool: SharedPool, *, for_sends: bool = True) -> FastAppend | None:
    """The pool's C fast path, or None (not built, or ``SHMKAFKA_PURE_PYTHON``). Only a
    producer's (``for_sends``) warns once that it is not built: the Sender's drain is not."""
    global _warned_not_built
    if FastAppend is None and for_sends and not _warned_not_built and not native.turned_off():
        _warned_not_built = True
        log.warning(
            "shmkafka's C extension was not built (a pure-Python wheel, or no C compiler at "
            "install): every send runs in Python, about 10x slower; install the manylinux "
            "wheel, or build with gcc and the Python headers (shmkafka doctor)"
        )
    if FastAppend is None or native.turned_off():
        return None
    offsets = fast_path_offsets(pool.layout, pool.slot)
    offsets.update(
        slot=pool.slot, pid=pool.pid, started=pool.started, record_batch_header=HEADER_SIZE
    )
    names = [
        semaphore_name(pool.name, "l", FIRST_STRIPE_LOCK + i)
        for i in range(pool.config.lock_stripes)
    ]
    hook = lockdep.PoolLockHook() if lockdep.ENABLED else None
    return FastAppend(
        pool.segment.buf, names, offsets, semaphore_name(pool.name, "l", POOL_LOCK), hook
    )


def fast_path_offsets(layout: Layout, slot: int) -> dict[str, int]:
    """Everything the C append fast path (_append.c) knows of the memory map (shm/layout.py), for
    process slot ``slot``: it hard-codes nothing, and reads exactly these keys (its
    ``FastAppend.offsets()`` returns them; tests/pool/test_fastpath_offsets.py checks)."""
    return {
        # header
        "directory_version_at": H_DIRECTORY_VERSION,
        "sender_wake_at": H_SENDER_WAKE_AT,
        "sender_linger_at": H_SENDER_LINGER,
        "new_batches_at": H_NEW_BATCHES,
        "waitq_head_at": H_WAITQ_HEAD,
        "waitq_tail_at": H_WAITQ_TAIL,
        "alloc_cursor_at": H_ALLOC_CURSOR,
        # locks: the owner records, and this slot's intent bytes
        "locks_at": layout.locks_at,
        "lock_stride": LOCK.size,
        "lock_owner_slot": LOCK_OWNER_SLOT,
        "lock_owner_pid": LOCK_OWNER_PID,
        "lock_owner_start": LOCK_OWNER_START,
        "pool_lock": POOL_LOCK,
        "first_stripe": FIRST_STRIPE_LOCK,
        "intent_at0": layout.intent_at(slot, 0),
        # this slot's pending allocation
        "pending_first_at": layout.slot_at(slot) + S_PENDING,
        "pending_count_at": layout.slot_at(slot) + S_PENDING_COUNT,
        "no_slab": NO_SLAB,
        # deques
        "deques_at": layout.deques_at,
        "deque_size": layout.deque_size,
        "d_ends": D_ENDS,
        "no_batch": NO_BATCH,
        "active_at": layout.active_at,
        "b_next": B_NEXT,
        "d_sticky": D_STICKY,
        "d_run_hint": D_RUN_HINT,
        **_batch_offsets(layout),
        # free map and slabs
        "freemap_at": layout.freemap_at,
        "num_slabs": layout.config.num_slabs,
        "slabs_at": layout.slabs_at,
        "slab_size": layout.config.slab_size,
        "max_run": layout.config.max_run,
        "batch_max_records": layout.config.batch_max_records,
        # (the accumulator's limit of a record's size bound: C opens a batch only below it)
        "record_limit": layout.config.record_limit,
        # process slots' completion rings (the Sender's posting)
        "slots_high_at": H_SLOTS_HIGH,
        "max_processes": layout.config.max_processes,
        "slots_at": layout.slots_at,
        "slot_size": layout.slot_size,
        "s_ring_head": S_RING_HEAD,
        "s_ring_tail": S_RING_TAIL,
        "ring_at": layout.ring_entry_at(0, 0) - layout.slot_at(0),
        "ring_capacity": layout.ring_capacity,
        "ring_entry_size": RING_ENTRY.size,
    }


def _batch_offsets(layout: Layout) -> dict[str, int]:
    """The batch descriptors' part of ``fast_path_offsets``."""
    return {
        "batches_at": layout.batches_at,
        "batch_stride": BATCH_SIZE_BYTES,
        "b_state": B_STATE,
        "b_generation": B_GENERATION,
        "b_deque": B_DEQUE,
        "b_first_slab": B_FIRST_SLAB,
        "b_slab_count": B_SLAB_COUNT,
        "b_attempts": B_ATTEMPTS,
        "b_publish": B_PUBLISH,
        "b_write_pos": B_WRITE_POS,
        "b_record_count": B_RECORD_COUNT,
        "b_max_ts": B_MAX_TS,
        "b_last_append": B_LAST_APPEND,
        "b_base_ts": B_BASE_TS,
        "b_created": B_CREATED,
        "b_producer_id": B_PRODUCER_ID,
        "b_producer_epoch": B_PRODUCER_EPOCH,
        "b_base_sequence": B_BASE_SEQUENCE,
        "appenders_at": layout.appenders_at,
        "appenders_size": layout.appenders_size,
        "b_parent": B_PARENT,
        "b_parent_generation": B_PARENT_GENERATION,
        "b_parent_delta": B_PARENT_DELTA,
        "no_parent": NO_PARENT,
        "b_recovered": B_RECOVERED,
        "free_state": FREE,
        "open_state": OPEN,
        "sealed_state": SEALED,
        "in_flight_state": IN_FLIGHT,
    }
