from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shmkafka.protocol.errors import CorrelationIdError, InvalidFrameSizeError, TruncatedFrameError
from shmkafka.protocol.frames import (
    ClientProtocol,
    FrameDecoder,
    decode_request_header,
    encode_request,
    encode_response,
)
from shmkafka.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from shmkafka.protocol.messages.api_versions import ApiVersion


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@given(st.lists(st.binary(max_size=40), max_size=6), st.data())
def test_decoder_accepts_any_chunking(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(_frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = FrameDecoder()
    frames: list[bytes] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        frames.extend(decoder.feed(stream[start:cut]))
        start = cut
    assert frames == payloads
    assert decoder.buffered == 0


@pytest.mark.parametrize("cut", [2, 4, 9])
def test_truncated_frame_at_end_of_stream_is_typed(cut: int) -> None:
    decoder = FrameDecoder()
    assert list(decoder.feed(_frame(b"0123456789")[:cut])) == []
    with pytest.raises(TruncatedFrameError, match="stream ended inside a frame"):
        decoder.eof()


def test_clean_end_of_stream() -> None:
    decoder = FrameDecoder()
    assert list(decoder.feed(_frame(b"abc"))) == [b"abc"]
    decoder.eof()  # nothing pending: no error


def test_negative_frame_size_rejected() -> None:
    with pytest.raises(InvalidFrameSizeError, match="negative"):
        list(FrameDecoder().feed(struct.pack(">i", -5)))


def test_oversize_frame_rejected_before_buffering() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(InvalidFrameSizeError, match="above the limit of 1024"):
        list(decoder.feed(struct.pack(">i", 1025)))
    assert FrameDecoder().max_frame_size == 100 * 1024 * 1024


def test_request_header_versions() -> None:
    v1 = encode_request(MetadataRequest(topics=None), 8, 7, "cid")
    header, body_at = decode_request_header(v1[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 8, 7)
    assert header.client_id == "cid"
    assert MetadataRequest.decode(v1[4 + body_at :], 8) == MetadataRequest(topics=None)
    v2 = encode_request(MetadataRequest(topics=None), 12, 8, None)
    header, body_at = decode_request_header(v2[4:])
    assert header.client_id is None
    assert v2[4 + body_at - 1] == 0  # empty header tagged fields
    assert MetadataRequest.decode(v2[4 + body_at :], 12) == MetadataRequest(topics=None)


def test_client_matches_responses_in_order_across_chunks() -> None:
    client = ClientProtocol()
    first, _ = client.send_request(MetadataRequest(topics=()), 12)
    second, _ = client.send_request(MetadataRequest(topics=()), 1)
    one = encode_response(3, 12, first, MetadataResponse(cluster_id="c"))
    two = encode_response(3, 1, second, MetadataResponse(controller_id=4))
    stream = one + two
    got = client.receive_bytes(stream[:3]) + client.receive_bytes(stream[3:])
    assert [cid for cid, _ in got] == [first, second]
    assert got[0][1] == MetadataResponse(cluster_id="c")
    assert got[1][1] == MetadataResponse(controller_id=4)
    assert client.in_flight == 0


def test_unexpected_correlation_id_is_a_protocol_error() -> None:
    client = ClientProtocol()
    cid, _ = client.send_request(MetadataRequest(topics=()), 1)
    with pytest.raises(CorrelationIdError, match=f"expected correlation id {cid}"):
        client.receive_bytes(encode_response(3, 1, cid + 5, MetadataResponse()))


def test_response_without_request_is_a_protocol_error() -> None:
    with pytest.raises(CorrelationIdError):
        ClientProtocol().receive_bytes(encode_response(3, 1, 0, MetadataResponse()))


def test_api_versions_response_header_is_v0_even_when_flexible() -> None:
    client = ClientProtocol()
    cid, _ = client.send_request(ApiVersionsRequest(client_software_name="x"), 3)
    response = ApiVersionsResponse(api_keys=(ApiVersion(0, 3, 9),))
    frame = encode_response(18, 3, cid, response)
    assert frame[4:8] == struct.pack(">i", cid) and frame[8:10] == b"\x00\x00"
    assert client.receive_bytes(frame) == [(cid, response)]


def test_api_versions_unsupported_version_falls_back_to_v0() -> None:
    client = ClientProtocol()
    cid, _ = client.send_request(ApiVersionsRequest(), 3)
    old_broker_answer = ApiVersionsResponse(error_code=35, api_keys=(ApiVersion(18, 0, 2),))
    frame = encode_response(18, 0, cid, old_broker_answer)
    assert client.receive_bytes(frame) == [(cid, old_broker_answer)]


def test_acks0_produce_expects_no_response() -> None:
    client = ClientProtocol()
    client.send_request(MetadataRequest(topics=()), 1, expect_response=False)
    assert client.in_flight == 0
