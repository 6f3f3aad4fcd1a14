from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from shmkafka.protocol.compression import CompressionType
from shmkafka.protocol.errors import CorruptRecordBatchError, DecodeError, EncodeError
from shmkafka.protocol.records import (
    HEADER_SIZE,
    BatchMeta,
    build_batch,
    decode_batch,
    decode_batches,
    encode_record_tail,
    finalize_batch,
    frame_record,
    framed_size,
    make_attributes,
    record_head,
    record_size_bound,
)

RecordTuple = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]

records_strategy = st.lists(
    st.tuples(
        st.integers(0, 2**41),
        st.none() | st.binary(max_size=30),
        st.none() | st.binary(max_size=60),
        st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(records_strategy, st.sampled_from(list(CompressionType)))
def test_batch_round_trip_every_field(records: list[RecordTuple], codec: CompressionType) -> None:
    meta = BatchMeta(
        base_offset=1234,
        partition_leader_epoch=9,
        compression=codec,
        producer_id=77,
        producer_epoch=3,
        base_sequence=100,
    )
    batch = decode_batch(build_batch(records, meta))
    h = batch.header
    assert (h.base_offset, h.partition_leader_epoch, h.magic) == (1234, 9, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 3, 100)
    assert h.compression == codec
    assert h.record_count == len(records)
    assert h.last_offset_delta == len(records) - 1
    assert h.base_timestamp == records[0][0]
    assert h.max_timestamp == max(r[0] for r in records)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch.records] == [
        (1234 + i, ts, k, v, hs) for i, (ts, k, v, hs) in enumerate(records)
    ]


@settings(max_examples=40, deadline=None)
@given(records_strategy, st.sampled_from(list(CompressionType)))
def test_kafka_python_reads_our_batches(records: list[RecordTuple], codec: CompressionType) -> None:
    data = build_batch(records, BatchMeta(compression=codec, producer_id=5, base_sequence=1))
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    assert got == [(i, ts, k, v, hs) for i, (ts, k, v, hs) in enumerate(records)]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_we_read_kafka_python_batches(codec: CompressionType) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=11,
        producer_epoch=2,
        base_sequence=40,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=1000, key=b"k", value=b"v" * 300, headers=[("h", b"1")])
    builder.append(1, timestamp=1002, key=None, value=None, headers=[])
    batch = decode_batch(bytes(builder.build()))
    assert batch.header.producer_id == 11 and batch.header.base_sequence == 40
    assert [(r.key, r.value, r.timestamp, r.headers) for r in batch.records] == [
        (b"k", b"v" * 300, 1000, (("h", b"1"),)),
        (None, None, 1002, ()),
    ]


def test_a_batch_is_finalized_in_the_memory_its_records_were_written_to() -> None:
    backing = bytearray(HEADER_SIZE)
    for delta, timestamp in enumerate((10, 11)):
        backing += frame_record(delta, timestamp - 10, encode_record_tail(b"k", b"0123456789"))
    (out,) = finalize_batch(backing, len(backing), record_count=2, last_offset_delta=1,
                            base_timestamp=10, max_timestamp=11)  # fmt: skip
    assert isinstance(out, memoryview)
    assert out.obj is backing  # finalized in place, no copy
    batch = decode_batch(out)
    assert [(r.timestamp, r.value) for r in batch.records] == [
        (10, b"0123456789"),
        (11, b"0123456789"),
    ]


def test_a_record_never_takes_more_than_its_size_bound() -> None:
    for key, value, headers in [(None, None, []), (b"k" * 300, b"v" * 70_000, [("h", b"x" * 200)])]:
        alone = build_batch([(1_700_000_000_000, key, value, headers)])
        assert len(alone) <= record_size_bound(key, value, headers)


def test_attributes_bits() -> None:
    data = build_batch(
        [(5, None, b"x", [])],
        BatchMeta(attributes=make_attributes(log_append_time=True, transactional=True)),
    )
    batch = decode_batch(data)
    assert batch.header.is_log_append_time and batch.header.is_transactional
    assert not batch.header.is_control


def test_corrupted_crc_is_typed_and_names_the_batch() -> None:
    data = bytearray(build_batch([(1, b"k", b"value", [])], BatchMeta(base_offset=42)))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordBatchError, match=r"offset 42.*CRC-32C") as info:
        decode_batch(bytes(data))
    assert info.value.offset == 17


def test_unknown_compression_bits_are_typed() -> None:
    data = bytearray(build_batch([(1, b"k", b"v", [])]))
    struct.pack_into(">h", data, 21, 6)
    import crc32c

    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    with pytest.raises(DecodeError, match="compression id 6"):
        decode_batch(bytes(data))


def test_wrong_magic_is_typed() -> None:
    data = bytearray(build_batch([(1, b"k", b"v", [])]))
    data[16] = 1
    with pytest.raises(CorruptRecordBatchError, match="magic 1"):
        decode_batch(bytes(data))


def test_record_count_mismatch_is_typed() -> None:
    import crc32c

    data = bytearray(build_batch([(1, b"k", b"v", []), (2, b"k", b"v", [])]))
    struct.pack_into(">i", data, 57, 3)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    with pytest.raises(DecodeError, match="record 2"):
        decode_batch(bytes(data))


@pytest.mark.parametrize("cut", [0, 10, 60, 70])
def test_truncated_batch(cut: int) -> None:
    data = build_batch([(1, b"key", b"value" * 5, [])])
    assert decode_batches(data[:cut]) == []  # a partial tail is skipped, as consumers do
    if cut:
        with pytest.raises(DecodeError):
            decode_batches(data[:cut], allow_partial_tail=False)


def test_several_batches_in_one_record_set() -> None:
    one = build_batch([(1, b"a", b"1", [])], BatchMeta(base_offset=0))
    two = build_batch([(2, b"b", b"2", []), (3, b"c", b"3", [])], BatchMeta(base_offset=1))
    batches = decode_batches(one + two + two[:20])
    assert [r.offset for b in batches for r in b.records] == [0, 1, 2]


def test_empty_batch_cannot_be_built() -> None:
    with pytest.raises(EncodeError):
        build_batch([])


def test_garbage_never_raises_untyped_errors() -> None:
    import random

    rng = random.Random(3)
    good = build_batch([(1, b"key", b"value", [("h", b"v")])] * 3)
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(HEADER_SIZE, len(data))] = rng.randrange(256)
        with contextlib.suppress(DecodeError):
            decode_batches(bytes(data), verify_crc=False)


def test_transaction_markers_are_read_from_control_batches_only() -> None:
    from shmkafka.protocol.control import (
        ControlType,
        TxnMarker,
        encode_marker_key,
        encode_marker_value,
        markers_of,
    )
    from shmkafka.protocol.errors import DecodeError
    from shmkafka.protocol.records import BatchMeta, build_batch, decode_batch, make_attributes

    def batch(key: bytes, control: bool) -> Any:
        meta = BatchMeta(attributes=make_attributes(transactional=True, control=control),
                         producer_id=7, producer_epoch=2, base_offset=40)  # fmt: skip
        return decode_batch(build_batch([(0, key, encode_marker_value(5), [])], meta))

    commit = batch(encode_marker_key(ControlType.COMMIT), control=True)
    assert markers_of(commit) == [TxnMarker(ControlType.COMMIT, 7, 2, 5, 40)]
    assert markers_of(batch(encode_marker_key(ControlType.ABORT), control=False)) == []
    with pytest.raises(DecodeError, match="type 7"):
        markers_of(batch(b"\x00\x00\x00\x07", control=True))


def test_a_compressed_batchs_parts_join_to_finalize_batchs_bytes() -> None:
    built = [frame_record(i, i, encode_record_tail(b"k%d" % i, b"v" * 3000)) for i in range(5)]
    records = b"".join(built)
    facts = {"record_count": 5, "last_offset_delta": 4, "base_timestamp": 1000,
             "max_timestamp": 1004, "meta": BatchMeta(compression=CompressionType.LZ4)}  # fmt: skip
    buf = bytearray(HEADER_SIZE) + records
    parts = finalize_batch(bytearray(buf), len(buf), **facts)  # type: ignore[arg-type]
    # the batch header, then the lz4 frame's: its header, each block with its size, the end
    assert [len(p) for p in parts][:2] == [HEADER_SIZE, 7] and parts[-1] == bytes(4)
    assert [r.value for r in decode_batch(b"".join(parts)).records] == [b"v" * 3000] * 5


@pytest.mark.parametrize("tail_len", [0, 1, 60, 61, 62, 8190, 8191, 16380, 16381, 100_000])
def test_framed_size_is_the_first_records_size(tail_len: int) -> None:
    assert framed_size(tail_len) == len(frame_record(0, 0, b"x" * tail_len))


@pytest.mark.parametrize("value_len", [0, 61, 62, 8191, 100_000])
def test_records_written_as_head_then_tail_read_back_with_kafka_pythons_decoder(
    value_len: int,
) -> None:
    backing = bytearray(HEADER_SIZE)
    timestamps = [0, 1, 64, 2**40]  # (deltas of one and several varint bytes)
    for delta, timestamp in enumerate(timestamps):
        tail = encode_record_tail(b"k%d" % delta, b"%d" % delta * value_len)
        backing += record_head(delta, timestamp, len(tail))
        backing += tail  # (apart, as the accumulator writes them)
    (out,) = finalize_batch(backing, len(backing), record_count=4, last_offset_delta=3,
                            base_timestamp=1000, max_timestamp=1000 + 2**40)  # fmt: skip
    decoded = list(DefaultRecordBatch(bytes(out)))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decoded] == [
        (n, 1000 + t, b"k%d" % n, b"%d" % n * value_len) for n, t in enumerate(timestamps)
    ]
