"""The memory map's named offsets agree with the structs that lay their fields out
(layout.py), so that nothing reads a field where another is written."""

from __future__ import annotations

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
    B_PUBLISH_TIMES,
    B_RECORD_COUNT,
    B_RESERVED_80,
    B_SLAB_COUNT,
    B_STATE,
    B_WRITE_POS,
    BATCH,
    BATCH_BODY,
    BATCH_SIZE_BYTES,
    BROKER,
    COMMIT,
    D_ENDS,
    D_NEXT_SEQUENCE,
    D_PARTITION,
    D_RUN_HINT,
    D_STICKY,
    D_TOPIC,
    DEQUE_HEADER,
    DEQUE_SIZE,
    DREC,
    E_SEQ,
    EVENT,
    H_RECOVERY_STATS,
    HEADER_SIZE,
    LOCK,
    LOCK_OWNER_PID,
    LOCK_OWNER_SLOT,
    LOCK_OWNER_START,
    P_DEQUE,
    P_LEADER,
    PARENT,
    PARTITION_ENTRY_SIZE,
    PENDING,
    PUBLISH,
    PUBLISH_TIMES,
    RECOVERY_STATS,
    S_AWAITING,
    S_FLUSHING,
    S_PENDING,
    S_PENDING_COUNT,
    S_PID,
    S_RING_HEAD,
    S_RING_TAIL,
    S_START,
    S_STATE,
    S_WAITING_ALLOC,
    SLOT_HEADER,
    SLOT_HEADER_SIZE,
    TOPIC_ENTRY_SIZE,
    TOPIC_NAME,
    TOPIC_SHAPE,
    TXN_ANSWER,
    TXN_HEADER,
    U32,
)
from shmkafka.shm.struct_fields import field_offsets, names_match


def test_every_named_offset_is_its_structs_field() -> None:
    assert names_match(LOCK, (LOCK_OWNER_SLOT, LOCK_OWNER_PID, LOCK_OWNER_START))
    assert names_match(
        SLOT_HEADER,
        (S_STATE, S_PID, S_START, S_PENDING, S_PENDING_COUNT, S_RING_HEAD, S_RING_TAIL,
         S_AWAITING, None, None, S_WAITING_ALLOC, S_FLUSHING),
    )  # fmt: skip
    assert names_match(PENDING, (S_PENDING, S_PENDING_COUNT), S_PENDING)
    assert names_match(
        DEQUE_HEADER, (D_ENDS, D_TOPIC, None, D_PARTITION, D_RUN_HINT, D_NEXT_SEQUENCE, D_STICKY)
    )
    assert DEQUE_HEADER.size == DEQUE_SIZE and D_ENDS % 8 == 0
    assert TOPIC_NAME.size <= TOPIC_SHAPE and TOPIC_SHAPE + 8 == TOPIC_ENTRY_SIZE
    assert P_DEQUE == 0 and P_LEADER == 8 and PARTITION_ENTRY_SIZE == 16  # read as u64 words
    assert names_match(
        BATCH,
        (B_STATE, B_GENERATION, B_DEQUE, B_FIRST_SLAB, B_SLAB_COUNT, B_ATTEMPTS, B_WRITE_POS,
         B_RECORD_COUNT, B_MAX_TS, B_LAST_APPEND, B_BASE_TS, B_CREATED, B_PRODUCER_ID,
         B_PRODUCER_EPOCH, B_BASE_SEQUENCE),
    )  # fmt: skip
    assert names_match(BATCH_BODY, tuple(field_offsets(BATCH)[2:]), B_DEQUE)
    assert names_match(PUBLISH, (B_WRITE_POS, B_RECORD_COUNT, B_MAX_TS, B_LAST_APPEND), B_PUBLISH)
    assert names_match(PUBLISH_TIMES, (B_MAX_TS, B_LAST_APPEND), B_PUBLISH_TIMES)
    assert names_match(PARENT, (B_PARENT, B_PARENT_GENERATION, B_PARENT_DELTA), B_PARENT)
    assert BATCH.size == B_RESERVED_80 + 32 <= B_PARENT
    assert B_PARENT + PARENT.size == B_NEXT and B_NEXT + 4 == BATCH_SIZE_BYTES
    assert B_PARENT + PARENT.size <= BATCH_SIZE_BYTES
    assert EVENT.size == 256 and field_offsets(EVENT)[0] == E_SEQ
    assert BROKER.size == 168
    assert TXN_HEADER.size == 256 and TXN_ANSWER.size == 256
    assert SLOT_HEADER.size == SLOT_HEADER_SIZE
    assert COMMIT.size == 88 and DREC.size == 272
    assert H_RECOVERY_STATS + RECOVERY_STATS.size == HEADER_SIZE
    # The publish word: write_pos | record_count << 32 in one aligned little-endian u64.
    assert B_WRITE_POS == B_PUBLISH and B_PUBLISH + U32.size == B_RECORD_COUNT
    assert B_PUBLISH % 8 == 0 and BATCH_SIZE_BYTES % 8 == 0
