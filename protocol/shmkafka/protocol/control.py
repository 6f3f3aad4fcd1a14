"""Control records: the transaction markers a coordinator has written into each partition a
transaction touched, in a batch of its own with the control and transactional bits set.

Key: version int16 (0), type int16 (0 ABORT, 1 COMMIT). Value (the EndTxnMarker): version
int16 (0), coordinator epoch int32. A reader of a partition finds, after a transaction's
data batches, exactly one such marker for its producer id.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from shmkafka.protocol.errors import DecodeError
from shmkafka.protocol.records import RecordBatch

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True)
class TxnMarker:
    """One control record: the transaction's outcome, for a producer id and epoch."""

    control_type: ControlType
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    offset: int


def encode_marker_key(control_type: ControlType) -> bytes:
    return _KEY.pack(0, int(control_type))


def encode_marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(0, coordinator_epoch)


def markers_of(batch: RecordBatch) -> list[TxnMarker]:
    """The transaction markers of a control batch ([] for a data batch)."""
    if not batch.header.is_control:
        return []
    out = []
    for record in batch.records:
        key, value = record.key or b"", record.value or b""
        what = f"control record at offset {record.offset}"
        if len(key) < _KEY.size:
            raise DecodeError(what, 0, f"a key of {len(key)} bytes")
        version, kind = _KEY.unpack_from(key)
        if version != 0 or kind not in (0, 1):
            raise DecodeError(what, 0, f"key version {version}, type {kind}")
        epoch = _VALUE.unpack_from(value)[1] if len(value) >= _VALUE.size else -1
        out.append(TxnMarker(ControlType(kind), batch.header.producer_id,
                             batch.header.producer_epoch, epoch, record.offset))  # fmt: skip
    return out
