"""What a produced record set must satisfy before a leader appends it: the batch header, the
CRC-32C, the record count, the size limit and the idempotent producer's sequence. Records
themselves are never decoded (the stub must not be the bottleneck).
"""

from __future__ import annotations

import crc32c

from shmkafka.broker_stub.log import PartitionLog
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.records import (
    _ATTRIBUTES_AT,
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    decode_batch_header,
)


def split_batches(records: bytes | None) -> list[tuple[BatchHeader, bytes]] | int:
    """The batches of a Produce record set, each checked, or an error code."""
    if not records:
        return ErrorCode.INVALID_RECORD
    view = memoryview(records)
    out = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < HEADER_SIZE:
            return ErrorCode.CORRUPT_MESSAGE
        header = decode_batch_header(view, pos)
        end = pos + header.size
        if header.batch_length < HEADER_SIZE - 12 or end > len(view):
            return ErrorCode.CORRUPT_MESSAGE
        if header.magic != MAGIC:
            return ErrorCode.CORRUPT_MESSAGE
        if crc32c.crc32c(view[pos + _ATTRIBUTES_AT : end]) != header.crc:
            return ErrorCode.CORRUPT_MESSAGE
        if header.record_count != header.last_offset_delta + 1 or header.record_count < 1:
            return ErrorCode.INVALID_RECORD
        out.append((header, bytes(view[pos:end])))
        pos = end
    return out


def check_sequence(log: PartitionLog, header: BatchHeader) -> tuple[int, int]:
    """(error code, base offset of a duplicate). 0 = append; DUPLICATE_SEQUENCE_NUMBER comes
    with the offset the batch was first written at."""
    if header.producer_id < 0:
        return 0, -1
    entry = log.producers.get(header.producer_id)
    last_seq = header.base_sequence + header.last_offset_delta
    if entry is None:
        # A producer we do not know may only start a sequence (or resume after retention).
        return (0, -1) if header.base_sequence == 0 else (ErrorCode.UNKNOWN_PRODUCER_ID, -1)
    if header.producer_epoch < entry.epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH, -1
    if header.producer_epoch > entry.epoch:
        return (
            (0, -1) if header.base_sequence == 0 else (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        )
    for first, last, base_offset in entry.batches:
        if first == header.base_sequence and last == last_seq:
            return ErrorCode.DUPLICATE_SEQUENCE_NUMBER, base_offset
    if header.base_sequence != entry.last_sequence + 1:
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
    return 0, -1
