from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shmkafka.protocol.errors import DecodeError, EncodeError
from shmkafka.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from shmkafka.protocol.primitives import (
    Reader,
    Writer,
    encode_uvarint,
    encode_varint,
    encode_varlong,
    varint_size,
)


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(n: int) -> None:
    data = encode_varint(n)
    r = Reader(data)
    assert r.varint() == n
    assert r.remaining() == 0
    assert varint_size(n) == len(data) <= 5


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(n: int) -> None:
    data = encode_varlong(n)
    assert Reader(data).varlong() == n
    assert len(data) <= 10


@given(st.integers(0, 2**64 - 1))
def test_unsigned_varint_round_trip(n: int) -> None:
    assert Reader(encode_uvarint(n)).uvarint() == n


def test_zigzag_known_values() -> None:
    # From the protobuf spec: 0→0, -1→1, 1→2, -2→3, 2147483647→4294967294.
    assert [encode_varint(n) for n in (0, -1, 1, -2)] == [b"\x00", b"\x01", b"\x02", b"\x03"]
    assert encode_varint(2**31 - 1) == b"\xfe\xff\xff\xff\x0f"
    assert encode_uvarint(300) == b"\xac\x02"


def test_varint_out_of_range_is_typed() -> None:
    with pytest.raises(EncodeError):
        encode_varint(2**31)
    with pytest.raises(EncodeError):
        encode_uvarint(-1)


def test_truncated_varint_names_offset() -> None:
    with pytest.raises(DecodeError) as info:
        Reader(b"\x00\x80\x80", pos=1).varint("timestampDelta")
    assert info.value.offset == 1
    assert "timestampDelta" in str(info.value)


def test_overlong_varint_rejected() -> None:
    with pytest.raises(DecodeError, match="longer than 5 bytes"):
        Reader(b"\xff" * 6 + b"\x01").varint()


@given(st.one_of(st.none(), st.text(max_size=50)), st.booleans())
def test_strings_round_trip(value: str | None, compact: bool) -> None:
    w = Writer()
    w.string(value, compact)
    assert Reader(w.getvalue()).string(compact) == value


@given(st.one_of(st.none(), st.binary(max_size=50)), st.booleans())
def test_bytes_round_trip_null_distinct_from_empty(value: bytes | None, compact: bool) -> None:
    w = Writer()
    w.bytes_(value, compact)
    assert Reader(w.getvalue()).bytes_(compact) == value


def test_compact_encodings() -> None:
    w = Writer()
    w.string(None, compact=True)
    w.string("", compact=True)
    w.string("ab", compact=True)
    w.bytes_(None, compact=False)
    assert w.getvalue() == b"\x00\x01\x03ab\xff\xff\xff\xff"


def test_fixed_width_ranges() -> None:
    w = Writer()
    for method, lo, hi in (
        (w.int8, -128, 127),
        (w.int16, -(2**15), 2**15 - 1),
        (w.int32, -(2**31), 2**31 - 1),
        (w.int64, -(2**63), 2**63 - 1),
    ):
        method(lo)
        method(hi)
        with pytest.raises(EncodeError):
            method(hi + 1)
    r = Reader(w.getvalue())
    assert [r.int8(), r.int8(), r.int16(), r.int16()] == [-128, 127, -(2**15), 2**15 - 1]
    assert [r.int32(), r.int32(), r.int64(), r.int64()] == [
        -(2**31),
        2**31 - 1,
        -(2**63),
        2**63 - 1,
    ]


def test_invalid_utf8_is_typed() -> None:
    with pytest.raises(DecodeError, match="UTF-8"):
        Reader(b"\x00\x02\xff\xfe").string(False, "client_id")


def test_short_read_names_type_and_offset() -> None:
    with pytest.raises(DecodeError) as info:
        Reader(b"\x00\x01\x02", pos=1).int32("partition")
    assert info.value.what == "partition"
    assert info.value.offset == 1


def test_a_produce_request_writes_parts_as_one_blob_without_joining_them() -> None:
    header, payload = b"h" * 61, bytes(range(256)) * 40  # (a large piece)
    joined = ProduceRequest(acks=1, timeout_ms=100, topic_data=(
        TopicProduceData("t", (PartitionProduceData(0, header + payload),)),))  # fmt: skip
    split = ProduceRequest(acks=1, timeout_ms=100, topic_data=(
        TopicProduceData("t", (PartitionProduceData(0, (header, payload)),)),))  # fmt: skip
    for version in (3, 9):
        assert split.encode(version) == joined.encode(version)
        pieces = split.encode_into(Writer(by_reference=True), version).take_pieces()
        assert any(piece is payload for piece in pieces)  # written from where it is
