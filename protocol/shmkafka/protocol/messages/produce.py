"""Produce (key 0), v3–v9. Flexible from v9. ``records`` holds raw RecordBatch bytes.

Rules:
- The fields below are the definition; schema.py's walk encodes and decodes them.
- The Sender's hot path, a ProduceRequest's encoding and a ProduceResponse's decoding, is
  written out by hand here (``_encode_request``, ``_decode_response``): the twins of
  ``schema.encode_struct`` and ``schema.decode_struct`` for these classes, byte for byte and
  object for object (tests/protocol/test_produce_codec.py drives both). The generic walk
  costs a Python call per field; a fleet's Sender sends a request of a few small batches
  every round. Input either twin would refuse (a value out of range, a null where none
  may be, a malformed or truncated body) goes to the generic walk, whose errors name
  the field and the offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, TypeVar

from shmkafka.protocol.errors import EncodeError
from shmkafka.protocol.primitives import Writer, encode_uvarint
from shmkafka.protocol.schema import Array, Message, check_version, kf


@dataclass(frozen=True)
class PartitionProduceData:
    index: int = kf("int32")
    # (a memoryview of a batch in shared memory is written from there, not copied; a
    # tuple is written as the concatenation of its parts: see finalize_batch)
    records: bytes | memoryview | tuple[bytes | memoryview, ...] | None = kf(
        "records", nullable="0+"
    )


@dataclass(frozen=True)
class TopicProduceData:
    name: str = kf("string")
    partition_data: tuple[PartitionProduceData, ...] = kf(Array(PartitionProduceData))


@dataclass(frozen=True)
class ProduceRequest(Message):
    API_KEY = 0
    MIN_VERSION = 3
    MAX_VERSION = 9
    FLEXIBLE_FROM = 9

    transactional_id: str | None = kf("string", "3+", nullable="3+", default=None)
    acks: int = kf("int16")
    timeout_ms: int = kf("int32")
    topic_data: tuple[TopicProduceData, ...] = kf(Array(TopicProduceData))

    def encode_into(self, w: Writer, version: int) -> Writer:
        check_version(type(self), version)
        if not _encode_request(w, self, version >= self.FLEXIBLE_FROM):
            super().encode_into(w, version)  # (what it refuses, with the field's name)
        return w


@dataclass(frozen=True)
class SealedProduceRequest(Message):
    """A ProduceRequest whose body was framed already (pool/sealing.py): its pieces, for a
    version of the same flexibility, written as they are (large ones by reference)."""

    API_KEY = 0
    MIN_VERSION = 3
    MAX_VERSION = 9
    FLEXIBLE_FROM = 9

    flexible: bool
    pieces: tuple[bytes | bytearray | memoryview, ...]

    def encode_into(self, w: Writer, version: int) -> Writer:
        check_version(type(self), version)
        if (version >= self.FLEXIBLE_FROM) != self.flexible:
            raise EncodeError(f"a body sealed {'flexible' * self.flexible or 'classic'} "
                              f"cannot be sent as version {version}")  # fmt: skip
        for piece in self.pieces:
            w.blob(piece)
        return w


def request_head(
    transactional_id: str | None, acks: int, timeout_ms: int, topics: int, flexible: bool
) -> bytes:
    """What precedes a ProduceRequest's topics: its fields, then the topics' count."""
    head = _string(transactional_id, flexible, nullable=True)
    if head is None:
        raise EncodeError(f"transactional id {transactional_id!r} cannot be encoded")
    return head + _HEAD.pack(acks, timeout_ms) + _count(topics, flexible)


def topic_prefix(name: str, partitions: int, flexible: bool) -> bytes:
    """What precedes a topic's partitions: its name, then their count."""
    data = _string(name, flexible, nullable=False)
    if data is None:
        raise EncodeError(f"topic name {name!r} cannot be encoded")
    return data + _count(partitions, flexible)


@dataclass(frozen=True)
class BatchIndexAndErrorMessage:
    batch_index: int = kf("int32", "8+")
    batch_index_error_message: str | None = kf("string", "8+", nullable="8+", default=None)


@dataclass(frozen=True)
class PartitionProduceResponse:
    index: int = kf("int32")
    error_code: int = kf("int16")
    base_offset: int = kf("int64")
    log_append_time_ms: int = kf("int64", "2+", default=-1)
    log_start_offset: int = kf("int64", "5+", default=-1)
    record_errors: tuple[BatchIndexAndErrorMessage, ...] = kf(
        Array(BatchIndexAndErrorMessage), "8+"
    )
    error_message: str | None = kf("string", "8+", nullable="8+", default=None)


@dataclass(frozen=True)
class TopicProduceResponse:
    name: str = kf("string")
    partition_responses: tuple[PartitionProduceResponse, ...] = kf(Array(PartitionProduceResponse))


@dataclass(frozen=True)
class ProduceResponse(Message):
    API_KEY = 0
    MIN_VERSION = 3
    MAX_VERSION = 9
    FLEXIBLE_FROM = 9

    responses: tuple[TopicProduceResponse, ...] = kf(Array(TopicProduceResponse))
    throttle_time_ms: int = kf("int32", "1+")

    @classmethod
    def decode(
        cls, data: bytes | memoryview, version: int, *, strict: bool = True
    ) -> ProduceResponse:
        check_version(cls, version)
        decoded = _decode_response(memoryview(data).cast("B"), version, strict)
        if decoded is None:  # (the generic walk raises what is wrong, and where)
            return super().decode(data, version, strict=strict)
        return decoded


# ---------------------------------------------------------------- the hot path, by hand

T = TypeVar("T")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hi")  # acks, timeout_ms
_PARTITION = struct.Struct(">ii")  # index, records' length (non-flexible)
_I64 = struct.Struct(">q")
_ANSWER_V3 = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_ANSWER_V5 = struct.Struct(">ihqqq")  # and the log start offset
_I16_RANGE = range(-(2**15), 2**15)
_I32_RANGE = range(-(2**31), 2**31)
_BUFFERS = (bytes, bytearray, memoryview)


def _encode_request(w: Writer, request: ProduceRequest, flexible: bool) -> bool:
    """``request`` written after what ``w`` holds, as ``encode_struct`` writes it; False
    (with nothing written) for anything it would refuse."""
    if type(request.acks) is not int or request.acks not in _I16_RANGE:
        return False
    if type(request.timeout_ms) is not int or request.timeout_ms not in _I32_RANGE:
        return False
    head = _string(request.transactional_id, flexible, nullable=True)
    topics = request.topic_data
    if head is None or type(topics) is not tuple:
        return False
    pieces_before = None if w.pieces is None else len(w.pieces)
    buf_before, size_before = len(w.buf), w.size
    w.buf += head + _HEAD.pack(request.acks, request.timeout_ms) + _count(len(topics), flexible)
    for topic in topics:
        if not _encode_topic(w, topic, flexible):
            _undo(w, pieces_before, buf_before, size_before)
            return False
    if flexible:
        w.buf.append(0)  # (no tagged fields)
    return True


def _encode_topic(w: Writer, topic: Any, flexible: bool) -> bool:
    if type(topic) is not TopicProduceData:
        return False
    name, partitions = _string(topic.name, flexible, nullable=False), topic.partition_data
    if name is None or type(partitions) is not tuple:
        return False
    w.buf += name + _count(len(partitions), flexible)
    for partition in partitions:
        if type(partition) is not PartitionProduceData:
            return False
        index, records = partition.index, partition.records
        if type(index) is not int or index not in _I32_RANGE:
            return False
        if records is None:
            w.buf += _I32.pack(index) + (b"\0" if flexible else b"\xff\xff\xff\xff")
        else:
            parts: tuple[Any, ...] = records if type(records) is tuple else (records,)
            size = 0
            for part in parts:
                if type(part) not in _BUFFERS:
                    return False
                size += len(part)
            if flexible:
                w.buf += _I32.pack(index) + encode_uvarint(size + 1)
            else:
                w.buf += _PARTITION.pack(index, size)
            for part in parts:
                w._blob(part)  # (a large part kept by reference, as bytes_ keeps it)
        if flexible:
            w.buf.append(0)
    if flexible:
        w.buf.append(0)
    return True


def _undo(w: Writer, pieces_before: int | None, buf_before: int, size_before: int) -> None:
    """Back to what ``w`` held before a refused request (its pieces, its bytes)."""
    if w.pieces is not None and pieces_before is not None and len(w.pieces) > pieces_before:
        first = w.pieces[pieces_before]
        assert isinstance(first, bytearray)
        w.buf = first[:buf_before]
        del w.pieces[pieces_before:]
    else:
        del w.buf[buf_before:]
    w.size = size_before


def _string(value: object, flexible: bool, *, nullable: bool) -> bytes | None:
    """A string field's bytes; None where the walk would refuse it."""
    if value is None:
        if not nullable:
            return None
        return b"\0" if flexible else b"\xff\xff"
    if type(value) is not str:
        return None
    data = value.encode("utf-8")
    if flexible:
        return encode_uvarint(len(data) + 1) + data
    if len(data) not in _I16_RANGE:
        return None
    return _I16.pack(len(data)) + data


def _count(n: int, flexible: bool) -> bytes:
    return encode_uvarint(n + 1) if flexible else _I32.pack(n)


class _Malformed(Exception):
    """Anything ``_decode_response`` does not read as the walk would."""


def _decode_response(buf: memoryview, version: int, strict: bool) -> ProduceResponse | None:
    """A ProduceResponse as ``decode_struct`` reads it; None where the walk raises, or
    reads a null array."""
    read = _FlexibleReader(buf) if version >= ProduceResponse.FLEXIBLE_FROM else _Reader(buf)
    try:
        response = read.response(version)
    except (_Malformed, struct.error, IndexError, UnicodeDecodeError):
        return None
    if strict and read.pos != len(buf):
        return None
    return response


def _new(cls: type[T], fields: dict[str, Any]) -> T:
    """A frozen dataclass of its fields, as its __init__ makes it (these have no
    __post_init__ and no slots), without a call per field."""
    made = object.__new__(cls)
    made.__dict__.update(fields)
    return made


class _Reader:
    """The classic versions (v3–v8): int32 counts, int16 string lengths, no tags."""

    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 0

    def response(self, version: int) -> ProduceResponse:
        topics = tuple(self.topic(version) for _ in range(self.count()))
        throttle = self.fixed(_I32)
        self.tags()
        return _new(ProduceResponse, {"responses": topics, "throttle_time_ms": throttle})

    def topic(self, version: int) -> TopicProduceResponse:
        name = self.string()
        answers = tuple(self.partition(version) for _ in range(self.count()))
        self.tags()
        return _new(TopicProduceResponse, {"name": name, "partition_responses": answers})

    # What follows a v8+ answer with no record errors and no message (and no tags): read
    # at once, the common case.
    PLAIN_TAIL = b"\0\0\0\0\xff\xff"

    def partition(self, version: int) -> PartitionProduceResponse:
        buf, pos = self.buf, self.pos
        if version >= 5:
            index, error, base, append, start = _ANSWER_V5.unpack_from(buf, pos)
            pos += _ANSWER_V5.size
        else:
            index, error, base, append = _ANSWER_V3.unpack_from(buf, pos)
            start, pos = -1, pos + _ANSWER_V3.size
        errors: tuple[BatchIndexAndErrorMessage, ...] = ()
        message = None
        tail = self.PLAIN_TAIL
        if version < 8:
            self.pos = pos
        elif buf[pos : pos + len(tail)] == tail:
            self.pos = pos + len(tail)
        else:
            self.pos = pos
            errors = tuple(self.record_error() for _ in range(self.count()))
            message = self.string()
            self.tags()
        return _new(PartitionProduceResponse, {
            "index": index, "error_code": error, "base_offset": base,
            "log_append_time_ms": append, "log_start_offset": start,
            "record_errors": errors, "error_message": message,
        })  # fmt: skip

    def record_error(self) -> BatchIndexAndErrorMessage:
        index = self.fixed(_I32)
        message = self.string()
        self.tags()
        return _new(BatchIndexAndErrorMessage,
                    {"batch_index": index, "batch_index_error_message": message})  # fmt: skip

    def fixed(self, fmt: struct.Struct) -> int:
        value: int = fmt.unpack_from(self.buf, self.pos)[0]
        self.pos += fmt.size
        return value

    def count(self) -> int:
        """An array's length; a null array (the walk's None) or one longer than the bytes
        left is not ours to read."""
        n = self.length()
        if not 0 <= n <= len(self.buf) - self.pos:
            raise _Malformed
        return n

    def length(self) -> int:
        return self.fixed(_I32)

    def string_length(self) -> int:
        return self.fixed(_I16)

    def string(self) -> str | None:
        n = self.string_length()
        if n == -1:
            return None
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise _Malformed
        text = str(self.buf[self.pos : end], "utf-8")
        self.pos = end
        return text

    def tags(self) -> None:
        """Tagged fields: none in the classic versions."""


class _FlexibleReader(_Reader):
    """v9: compact counts and strings, and a tagged-field section ending every struct
    (every tag unknown to these versions, so skipped)."""

    PLAIN_TAIL = b"\x01\0\0"  # (an empty compact array, a null compact string, no tags)

    def uvarint(self) -> int:
        buf, pos = self.buf, self.pos
        byte = buf[pos]
        if byte < 0x80:
            self.pos = pos + 1
            return byte
        result, shift = 0, 0
        for at in range(pos, pos + 10):
            byte = buf[at]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = at + 1
                return result
            shift += 7
        raise _Malformed

    def length(self) -> int:
        return self.uvarint() - 1

    def string_length(self) -> int:
        return self.uvarint() - 1

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            size = self.uvarint()
            if self.pos + size > len(self.buf):
                raise _Malformed
            self.pos += size
