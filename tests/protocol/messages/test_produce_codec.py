"""produce.py's hand-written ProduceRequest encoding and ProduceResponse decoding against
their twins, schema.py's generic walk: the same pieces and bytes, the same objects, and
for input either refuses, the walk's own error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmkafka.protocol.errors import DecodeError
from shmkafka.protocol.messages import produce
from shmkafka.protocol.messages.produce import (
    BatchIndexAndErrorMessage,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from shmkafka.protocol.primitives import LARGE_PIECE, Reader, Writer, encode_uvarint
from shmkafka.protocol.schema import decode_struct, encode_struct

VERSIONS = st.integers(ProduceRequest.MIN_VERSION, ProduceRequest.MAX_VERSION)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=12)
BLOB = st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=LARGE_PIECE, max_size=LARGE_PIECE + 64),  # (kept by reference)
)
RECORDS = st.one_of(
    st.none(),
    BLOB,
    BLOB.map(memoryview),
    st.lists(st.one_of(BLOB, BLOB.map(memoryview)), max_size=4).map(tuple),
)
PARTITIONS = st.builds(PartitionProduceData, INT32, RECORDS)
TOPICS = st.builds(TopicProduceData, TEXT, st.lists(PARTITIONS, max_size=4).map(tuple))
REQUESTS = st.builds(
    ProduceRequest,
    transactional_id=st.none() | TEXT,
    acks=INT16,
    timeout_ms=INT32,
    topic_data=st.lists(TOPICS, max_size=3).map(tuple),
)


def _pieces_by_hand(request: Any, version: int, before: bytes = b"") -> list[bytes]:
    w = Writer(by_reference=True)
    w.raw(before)
    ProduceRequest.encode_into(request, w, version)
    return [bytes(piece) for piece in w.take_pieces()]


def _written_by_hand(request: ProduceRequest, version: int) -> bool:
    """The hand wrote it (it did not hand it to the walk)."""
    flexible = version >= ProduceRequest.FLEXIBLE_FROM
    return produce._encode_request(Writer(by_reference=True), request, flexible)


def _pieces_by_walk(request: Any, version: int, before: bytes = b"") -> list[bytes]:
    w = Writer(by_reference=True)
    w.raw(before)
    encode_struct(w, request, version, version >= ProduceRequest.FLEXIBLE_FROM)
    return [bytes(piece) for piece in w.take_pieces()]


def _outcome(make: Any) -> tuple[str, Any]:
    try:
        return "value", make()
    except Exception as exc:  # noqa: BLE001 (the twins must fail alike: type and words)
        return type(exc).__name__, str(exc)


@settings(max_examples=300)
@given(REQUESTS, VERSIONS, st.binary(max_size=8))
def test_a_request_is_written_as_the_walk_writes_it(
    request: ProduceRequest, version: int, before: bytes
) -> None:
    assert _written_by_hand(request, version)
    by_hand = _pieces_by_hand(request, version, before)
    assert by_hand == _pieces_by_walk(request, version, before)  # (pieces, not only bytes)
    assert b"".join(by_hand) == before + request.encode(version)


def _bad_requests() -> list[Any]:
    """Requests the hand refuses: the walk refuses them too, or (a bool for an int, a list
    for an array) writes them."""
    partition = PartitionProduceData(0, b"x")
    topic = TopicProduceData("t", (partition,))
    large = TopicProduceData("a", (PartitionProduceData(1, b"y" * LARGE_PIECE),))
    listed: Any = [partition, PartitionProduceData(1, b"y" * LARGE_PIECE)]
    text: Any = "text"
    not_a_part: Any = (b"ok", [b"no"])
    no_name: Any = None
    an_id: Any = b"id"

    def request(*topics: Any, acks: Any = 1, timeout_ms: int = 0, txn: Any = None) -> Any:
        return ProduceRequest(txn, acks, timeout_ms, topics)

    return [
        request(acks=2**15),
        request(timeout_ms=2**31),
        request(topic, acks=True),
        request(txn=an_id),
        ProduceRequest(acks=1, timeout_ms=0, topic_data=[topic]),  # type: ignore[arg-type]
        request(TopicProduceData(no_name, ())),
        request(TopicProduceData("t", listed)),
        # (refused after a large blob went by reference: what was written is taken back,
        # and the walk, which takes a list for an array, writes it all)
        request(large, TopicProduceData("b", listed)),
        request(large, TopicProduceData("b", (PartitionProduceData(2**31, b"z"),))),
        request(large, TopicProduceData("b", (PartitionProduceData(2, text),))),
        request(large, TopicProduceData("b", (PartitionProduceData(3, not_a_part),))),
    ]


@pytest.mark.parametrize("version", [3, 8, 9])
@pytest.mark.parametrize("request_", _bad_requests())
def test_a_request_the_hand_refuses_goes_to_the_walk(request_: Any, version: int) -> None:
    before = b"head"
    assert not _written_by_hand(request_, version)
    by_hand = _outcome(lambda: _pieces_by_hand(request_, version, before))
    assert by_hand == _outcome(lambda: _pieces_by_walk(request_, version, before))


@pytest.mark.parametrize("version", [3, 8, 9])
def test_a_string_too_long_for_an_int16_length_is_refused_where_its_length_is_one(
    version: int,
) -> None:
    request = ProduceRequest(transactional_id="t" * 0x8000, acks=1, timeout_ms=0)
    assert _written_by_hand(request, version) == (version >= ProduceRequest.FLEXIBLE_FROM)
    by_hand = _outcome(lambda: _pieces_by_hand(request, version))
    assert by_hand == _outcome(lambda: _pieces_by_walk(request, version))


def _answers(version: int) -> st.SearchStrategy[PartitionProduceResponse]:
    """A partition's answer holding only what ``version`` carries (the rest at defaults)."""
    errors = st.lists(
        st.builds(BatchIndexAndErrorMessage, INT32, st.none() | TEXT), max_size=3
    ).map(tuple)
    return st.builds(
        PartitionProduceResponse,
        index=INT32,
        error_code=INT16,
        base_offset=INT64,
        log_append_time_ms=INT64,
        log_start_offset=INT64 if version >= 5 else st.just(-1),
        record_errors=errors if version >= 8 else st.just(()),
        error_message=(st.none() | TEXT) if version >= 8 else st.just(None),
    )


@st.composite
def _responses(draw: st.DrawFn) -> tuple[int, ProduceResponse]:
    version = draw(VERSIONS)
    topics = st.builds(
        TopicProduceResponse, TEXT, st.lists(_answers(version), max_size=4).map(tuple)
    )
    response = ProduceResponse(
        responses=draw(st.lists(topics, max_size=3).map(tuple)), throttle_time_ms=draw(INT32)
    )
    return version, response


def _walk(data: bytes, version: int, strict: bool) -> ProduceResponse:
    r = Reader(data)
    flexible = version >= ProduceResponse.FLEXIBLE_FROM
    decoded = decode_struct(r, ProduceResponse, version, flexible, "ProduceResponse")
    if strict and r.remaining():
        raise DecodeError("ProduceResponse", r.pos, f"{r.remaining()} trailing bytes")
    return decoded


def _encoded(response: ProduceResponse, version: int) -> bytes:
    w = Writer()
    encode_struct(w, response, version, version >= ProduceResponse.FLEXIBLE_FROM)
    return bytes(w.buf)


@settings(max_examples=300)
@given(_responses())
def test_a_response_is_read_as_the_walk_reads_it(case: tuple[int, ProduceResponse]) -> None:
    version, response = case
    data = _encoded(response, version)
    assert produce._decode_response(memoryview(data), version, True) is not None  # (by hand)
    decoded = ProduceResponse.decode(data, version)
    assert decoded == response == _walk(data, version, True)
    assert decoded == ProduceResponse.decode(memoryview(data), version)
    assert type(decoded.responses) is tuple and all(
        type(t.partition_responses) is tuple for t in decoded.responses
    )


@settings(max_examples=500)
@given(_responses(), st.data(), st.booleans())
def test_a_damaged_response_fails_or_reads_as_the_walk_does(
    case: tuple[int, ProduceResponse], data: st.DataObject, strict: bool
) -> None:
    version, response = case
    body = bytearray(_encoded(response, version))
    for _ in range(data.draw(st.integers(1, 4))):
        how = data.draw(st.sampled_from(["flip", "cut", "extend"]))
        if how == "flip" and body:
            at = data.draw(st.integers(0, len(body) - 1))
            body[at] = data.draw(st.integers(0, 255))
        elif how == "cut":
            del body[data.draw(st.integers(0, len(body))) :]
        else:
            body += data.draw(st.binary(min_size=1, max_size=4))
    damaged = bytes(body)
    by_hand = _outcome(lambda: ProduceResponse.decode(damaged, version, strict=strict))
    assert by_hand == _outcome(lambda: _walk(damaged, version, strict))


def test_unknown_tags_of_a_flexible_response_are_skipped_as_the_walk_skips_them() -> None:
    tag = encode_uvarint(1) + encode_uvarint(7) + encode_uvarint(3) + b"abc"  # (one field)
    answer = (
        (0).to_bytes(4, "big") + (0).to_bytes(2, "big") + (42).to_bytes(8, "big")
        + (-1).to_bytes(8, "big", signed=True) + (5).to_bytes(8, "big")
        + encode_uvarint(1) + encode_uvarint(0) + tag
    )  # fmt: skip
    body = (
        encode_uvarint(2) + encode_uvarint(2) + b"t" + encode_uvarint(2) + answer + tag
        + (0).to_bytes(4, "big") + tag
    )  # fmt: skip
    assert produce._decode_response(memoryview(body), 9, True) is not None
    decoded = ProduceResponse.decode(body, 9)
    assert decoded == _walk(body, 9, True)
    assert decoded.responses[0].partition_responses[0].base_offset == 42
    assert decoded.responses[0].partition_responses[0].log_start_offset == 5
