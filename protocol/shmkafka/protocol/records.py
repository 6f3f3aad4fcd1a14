"""RecordBatch v2 (magic 2): encode records in place, finalize the header, decode and verify.

Batch header, 61 bytes, big-endian:

    offset  size  field
         0     8  baseOffset
         8     4  batchLength            bytes after this field
        12     4  partitionLeaderEpoch
        16     1  magic                  2
        17     4  crc                    CRC-32C of bytes [21, end)
        21     2  attributes             bits 0-2 compression, 3 timestamp type,
                                         4 transactional, 5 control, 6 delete horizon
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordCount
        61        records

Record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
key (varint length, -1 = null), value (likewise), header count varint, then per header a key
(varint length + UTF-8) and a value (varint length, -1 = null).

Rules:
- The accumulator writes records uncompressed right after a reserved header
  (``HEADER_SIZE``); ``finalize_batch`` fills the header in place, or, when compressing,
  makes new bytes of the header and the compressed records: the batch as parts, for a
  scatter-gather write without a copy.
- Decoding never raises IndexError or struct.error: every failure is a DecodeError subclass
  naming the batch's base offset and the byte position.
"""

from __future__ import annotations

import functools
import importlib
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from shmkafka.protocol.compression import (
    BlockMap,
    CompressionType,
    compress_parts,
    decompress,
)
from shmkafka.protocol.errors import (
    CorruptRecordBatchError,
    DecodeError,
    EncodeError,
    UnsupportedCompressionError,
)
from shmkafka.protocol.primitives import Reader, encode_uvarint, zigzag64


@functools.cache
def crc32c() -> Callable[..., int]:
    """The crc32c library's function, imported when first needed: only the Sender, the
    durable pool's commits and readers compute CRCs, and the library's import (it reads its
    own package metadata) costs every app process 4 MiB. Every module takes it from here."""
    function: Callable[..., int] = importlib.import_module("crc32c").crc32c
    return function


HEADER_SIZE = 61
MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40
COMPRESSION_MASK = 0x07

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_CRC_AT = 17
_ATTRIBUTES_AT = 21

Header = tuple[str, bytes | None]
HeaderInput = tuple[str, bytes | bytearray | memoryview | None]

_SMALL_LIMIT = 1 << 14


@functools.cache
def _zigzag() -> tuple[bytes, ...]:
    """Zigzag varints of small values, looked up rather than computed: lengths, offset and
    timestamp deltas are nearly always small. Index n + 1 holds the encoding of n. Made on
    first use: its 700 KiB are no app process's that only the C append serves."""
    return tuple(encode_uvarint(zigzag64(n)) for n in range(-1, _SMALL_LIMIT))


def _varint(n: int) -> bytes:
    if -1 <= n < _SMALL_LIMIT:
        return _zigzag()[n + 1]
    if not -(2**63) <= n < 2**63:
        raise EncodeError(f"varlong cannot hold {n}")
    return encode_uvarint(zigzag64(n))


def encode_record_tail(
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[HeaderInput] = (),
) -> bytes:
    """The part of a record that does not depend on its batch: key, value and headers.

    The accumulator encodes it before taking any lock, then frames it with ``frame_record``
    once it knows the record's offset and timestamp deltas.
    """
    zz = _zigzag()
    limit = _SMALL_LIMIT
    if key is None:
        key_len: bytes = b"\x01"
        key = b""
    else:
        key_len = zz[len(key) + 1] if len(key) < limit else _varint(len(key))
    if value is None:
        value_len: bytes = b"\x01"
        value = b""
    else:
        value_len = zz[len(value) + 1] if len(value) < limit else _varint(len(value))
    encoded_headers = _encode_headers(headers) if headers else b"\x00"
    return b"".join((key_len, key, value_len, value, encoded_headers))


def frame_record(offset_delta: int, timestamp_delta: int, tail: bytes) -> bytes:
    """A whole record: length prefix, attributes, the two deltas, then ``tail``."""
    return record_head(offset_delta, timestamp_delta, len(tail)) + tail


def record_head(offset_delta: int, timestamp_delta: int, tail_len: int) -> bytes:
    """What ``frame_record`` puts before a tail of ``tail_len`` bytes (written apart from
    the tail, a large value is not copied once more to join them)."""
    zz = _zigzag()
    limit = _SMALL_LIMIT
    ts = zz[timestamp_delta + 1] if -1 <= timestamp_delta < limit else _varint(timestamp_delta)
    off = zz[offset_delta + 1] if -1 <= offset_delta < limit else _varint(offset_delta)
    size = 1 + len(ts) + len(off) + tail_len
    prefix = zz[size + 1] if size < limit else _varint(size)
    return b"".join((prefix, b"\x00", ts, off))


def framed_size(tail_len: int) -> int:
    """The size of ``frame_record(0, 0, tail)`` (a batch's first record), not building it."""
    size = 3 + tail_len  # attributes and the two zero deltas
    return size + (len(_zigzag()[size + 1]) if size < _SMALL_LIMIT else len(_varint(size)))


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[HeaderInput] = (),
) -> bytes:
    """One record in wire form, including its length prefix."""
    return frame_record(offset_delta, timestamp_delta, encode_record_tail(key, value, headers))


def _encode_headers(headers: Sequence[HeaderInput]) -> bytes:
    parts: list[bytes | bytearray | memoryview] = [_varint(len(headers))]
    for header_key, header_value in headers:
        encoded_key = header_key.encode("utf-8")
        parts += (_varint(len(encoded_key)), encoded_key)
        if header_value is None:
            parts.append(b"\x01")
        else:
            parts += (_varint(len(header_value)), header_value)
    return b"".join(parts)


RECORD_OVERHEAD = 1 + 10 + 5 + 5  # attributes, timestamp delta, offset delta, length prefix
VARINT_ROOM = 2 * 5 + 1  # the key and value lengths at their largest, the header count
HEADER_ROOM = 2 * 5  # a header's key and value lengths at their largest


def record_size_bound(
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[HeaderInput] = (),
) -> int:
    """An upper bound of the bytes a record takes in a batch of its own, the batch header
    included: a record above the limit can never be sent, whatever the batch. The accumulator
    checks it before anything is written, and the APIs check their size limits with it."""
    size = HEADER_SIZE + RECORD_OVERHEAD + VARINT_ROOM + len(key or b"") + len(value or b"")
    for name, data in headers:
        size += HEADER_ROOM + len(name.encode()) + len(data or b"")
    return size


@dataclass(frozen=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def size(self) -> int:
        return self.batch_length + 12


def make_attributes(
    compression: CompressionType = CompressionType.NONE,
    *,
    log_append_time: bool = False,
    transactional: bool = False,
    control: bool = False,
) -> int:
    attributes = int(compression)
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    return attributes


@dataclass(frozen=True)
class BatchMeta:
    """What the Sender decides about a batch at drain time (the accumulator does not know)."""

    base_offset: int = 0
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    compression: CompressionType = CompressionType.NONE
    compression_level: int | None = None
    attributes: int = 0  # the non-compression bits, see make_attributes
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE


BatchParts = tuple[bytes | memoryview, ...]


def finalize_batch(
    buf: bytearray | memoryview,
    records_end: int,
    *,
    record_count: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    meta: BatchMeta = BatchMeta(),
    map_blocks: BlockMap = map,
    compressed: tuple[bytes | memoryview, ...] | None = None,
) -> BatchParts:
    """Complete the batch whose records occupy ``buf[HEADER_SIZE:records_end]``; its parts,
    to be written in order (``b"".join`` makes one blob): a view of
    ``buf[:records_end]`` with its header filled in place, or (compressed) the header and
    the compressed records' parts (``compress_parts``, its ``map_blocks``; or
    ``compressed``, those parts made already), apart."""
    compression = meta.compression
    out: bytearray | memoryview
    payload: tuple[bytes | memoryview, ...] = ()
    if compression == CompressionType.NONE:
        out = buf
        end = records_end
    else:
        payload = compressed if compressed is not None else compress_parts(
            compression, memoryview(buf)[HEADER_SIZE:records_end], meta.compression_level,
            map_blocks,
        )  # fmt: skip
        out = bytearray(HEADER_SIZE)
        end = HEADER_SIZE + sum(len(part) for part in payload)
    _HEADER.pack_into(
        out,
        0,
        meta.base_offset,
        end - 12,
        meta.partition_leader_epoch,
        MAGIC,
        0,  # crc, computed next over everything after it
        (meta.attributes & ~COMPRESSION_MASK) | compression,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        meta.producer_id,
        meta.producer_epoch,
        meta.base_sequence,
        record_count,
    )
    if payload:  # the header apart from the compressed records' parts, never joined
        crc = crc32c()(memoryview(out)[_ATTRIBUTES_AT:])
        for part in payload:
            crc = crc32c()(part, crc)
        _CRC.pack_into(out, _CRC_AT, crc)
        return (bytes(out), *payload)
    _CRC.pack_into(out, _CRC_AT, crc32c()(memoryview(out)[_ATTRIBUTES_AT:end]))
    return (memoryview(out)[:end],)


# --------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    attributes: int = 0


@dataclass(frozen=True)
class RecordBatch:
    header: BatchHeader
    records: tuple[Record, ...]

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.base_offset + self.header.last_offset_delta


def decode_batch_header(data: bytes | memoryview, pos: int = 0) -> BatchHeader:
    view = memoryview(data)
    if len(view) - pos < HEADER_SIZE:
        raise DecodeError("record batch header", pos, f"needs {HEADER_SIZE} bytes")
    return BatchHeader(*_HEADER.unpack_from(view, pos))


def decode_batches(
    data: bytes | memoryview | None, *, verify_crc: bool = True, allow_partial_tail: bool = True
) -> list[RecordBatch]:
    """Decode a record set (a Produce or Fetch ``records`` field).

    A Fetch may end in a partial batch cut at the size limit; with ``allow_partial_tail`` it
    is ignored, as consumers do. Anything else malformed raises a DecodeError subclass.
    """
    if not data:
        return []
    view = memoryview(data)
    batches: list[RecordBatch] = []
    pos = 0
    while pos < len(view):
        remaining = len(view) - pos
        if remaining < HEADER_SIZE:
            if allow_partial_tail:
                break
            raise DecodeError("record batch header", pos, f"only {remaining} bytes left")
        header = decode_batch_header(view, pos)
        if header.batch_length < HEADER_SIZE - 12:
            raise CorruptRecordBatchError(
                "record batch", pos, f"batchLength {header.batch_length} is too small"
            )
        if header.size > remaining:
            if allow_partial_tail:
                break
            raise DecodeError("record batch", pos, f"batch of {header.size} bytes is truncated")
        batches.append(_decode_one(view[pos : pos + header.size], header, pos, verify_crc))
        pos += header.size
    return batches


def decode_batch(data: bytes | memoryview, *, verify_crc: bool = True) -> RecordBatch:
    """Decode exactly one batch."""
    view = memoryview(data)
    header = decode_batch_header(view)
    if header.size != len(view):
        raise DecodeError(
            "record batch", 0, f"batchLength says {header.size} bytes, buffer has {len(view)}"
        )
    return _decode_one(view, header, 0, verify_crc)


def _decode_one(view: memoryview, header: BatchHeader, at: int, verify_crc: bool) -> RecordBatch:
    what = f"record batch at offset {header.base_offset}"
    if header.magic != MAGIC:
        raise CorruptRecordBatchError(what, at + 16, f"magic {header.magic}, expected 2")
    if verify_crc:
        actual = crc32c()(view[_ATTRIBUTES_AT:])
        if actual != header.crc:
            raise CorruptRecordBatchError(
                what, at + _CRC_AT, f"CRC-32C {actual:#010x} does not match {header.crc:#010x}"
            )
    codec = header.compression
    if codec > CompressionType.ZSTD:
        raise UnsupportedCompressionError(what, at + _ATTRIBUTES_AT, f"compression id {codec}")
    body: bytes | memoryview = view[HEADER_SIZE:]
    if codec != CompressionType.NONE:
        body = decompress(codec, body, what)
    records = _decode_records(body, header, what)
    return RecordBatch(header, records)


def _decode_records(body: bytes | memoryview, header: BatchHeader, what: str) -> tuple[Record, ...]:
    if header.record_count < 0:
        raise CorruptRecordBatchError(what, 57, f"negative record count {header.record_count}")
    r = Reader(body)
    out: list[Record] = []
    log_append = header.is_log_append_time
    for index in range(header.record_count):
        out.append(_decode_record(r, header, log_append, f"{what}, record {index}"))
    if r.remaining():
        raise CorruptRecordBatchError(
            what, HEADER_SIZE + r.pos, f"{r.remaining()} bytes after {header.record_count} records"
        )
    if out and out[-1].offset - header.base_offset != header.last_offset_delta:
        raise CorruptRecordBatchError(
            what,
            23,
            f"lastOffsetDelta {header.last_offset_delta} does not match the last record's "
            f"offset delta {out[-1].offset - header.base_offset}",
        )
    return tuple(out)


def _decode_record(r: Reader, header: BatchHeader, log_append: bool, what: str) -> Record:
    length = r.varint(what + " length")
    start = r.pos
    if length < 0 or length > r.remaining():
        raise CorruptRecordBatchError(what, start, f"length {length} overruns the batch")
    attributes = r.int8(what + " attributes")
    timestamp_delta = r.varlong(what + " timestampDelta")
    offset_delta = r.varint(what + " offsetDelta")
    key = _nullable_bytes(r, what + " key")
    value = _nullable_bytes(r, what + " value")
    header_count = r.varint(what + " header count")
    if header_count < 0:
        raise CorruptRecordBatchError(what, r.pos, f"negative header count {header_count}")
    headers: list[Header] = []
    for _ in range(header_count):
        raw_key = _nullable_bytes(r, what + " header key")
        if raw_key is None:
            raise CorruptRecordBatchError(what, r.pos, "null header key")
        try:
            header_key = raw_key.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordBatchError(what, r.pos, "header key is not UTF-8") from None
        headers.append((header_key, _nullable_bytes(r, what + " header value")))
    if r.pos - start != length:
        raise CorruptRecordBatchError(what, start, f"length {length} but read {r.pos - start}")
    timestamp = header.max_timestamp if log_append else header.base_timestamp + timestamp_delta
    return Record(
        header.base_offset + offset_delta, timestamp, key, value, tuple(headers), attributes
    )


def _nullable_bytes(r: Reader, what: str) -> bytes | None:
    n = r.varint(what + " length")
    if n < -1:
        raise CorruptRecordBatchError(what, r.pos, f"invalid length {n}")
    return None if n == -1 else bytes(r.raw(n, what))


def build_batch(
    records: Iterable[tuple[int, bytes | None, bytes | None, Sequence[HeaderInput]]],
    meta: BatchMeta = BatchMeta(),
) -> bytes:
    """(timestamp, key, value, headers) → batch bytes, written as the accumulator writes a
    batch: each record framed after the reserved header, then ``finalize_batch`` (the Sender's
    split, broker_stub's control batches, tests)."""
    items = list(records)
    if not items:
        raise EncodeError("a record batch needs at least one record")
    base = items[0][0]
    out = bytearray(HEADER_SIZE)
    for delta, (timestamp, key, value, headers) in enumerate(items):
        out += encode_record(delta, timestamp - base, key, value, headers)
    built = finalize_batch(
        out,
        len(out),
        record_count=len(items),
        last_offset_delta=len(items) - 1,
        base_timestamp=base,
        max_timestamp=max(item[0] for item in items),
        meta=meta,
    )
    return b"".join(built)
