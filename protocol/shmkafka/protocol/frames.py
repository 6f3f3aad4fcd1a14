"""Framing: size-prefixed frames, request/response headers, and the two sans-IO connection roles.

Rules:
- Nothing here touches a socket: bytes in, typed messages out (h11's rule).
- Request header v2 (tagged fields) goes with flexible request versions, v1 otherwise; its
  client id is a classic nullable string in both. Response header v1 goes with flexible
  response versions, v0 otherwise, except ApiVersions, whose response header is always v0
  (a client must be able to read it before it knows what the broker supports).
- Kafka answers requests on one connection in order, so the client matches each response
  to the oldest request in flight and treats any other correlation id as a protocol error.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import (
    CorrelationIdError,
    DecodeError,
    InvalidFrameSizeError,
    TruncatedFrameError,
)
from shmkafka.protocol.messages import APIS
from shmkafka.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from shmkafka.protocol.primitives import Buffer, Reader, Writer
from shmkafka.protocol.schema import Message

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def is_flexible(api_key: int, version: int) -> bool:
    request_cls, _ = APIS[api_key]
    return version >= request_cls.FLEXIBLE_FROM


def response_header_version(api_key: int, version: int) -> int:
    if api_key == ApiVersionsRequest.API_KEY:
        return 0
    return 1 if is_flexible(api_key, version) else 0


def encode_request(
    request: Message, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """A complete request frame: size, header (v1 or v2), body."""
    return b"".join(encode_request_pieces(request, version, correlation_id, client_id))


def encode_request_pieces(
    request: Message, version: int, correlation_id: int, client_id: str | None
) -> list[Buffer]:
    """``encode_request`` as pieces to write in order: large records blobs are the
    caller's own buffers, not copies (they must not change until written)."""
    w = Writer(by_reference=True)
    w.raw(b"\0\0\0\0")
    w.int16(request.API_KEY)
    w.int16(version)
    w.int32(correlation_id)
    w.string(client_id, compact=False)
    if version >= request.FLEXIBLE_FROM:
        w.uvarint(0)  # header tagged fields
    request.encode_into(w, version)
    pieces = w.take_pieces()
    first = pieces[0]
    assert isinstance(first, bytearray) and len(first) >= 4  # the size prefix is ours
    _SIZE.pack_into(first, 0, w.size + len(w.buf) - 4)
    return pieces


def decode_request_header(frame: bytes | memoryview) -> tuple[RequestHeader, int]:
    """Parse a request frame's header; returns it and the offset where the body starts.

    Only the api key must be known to tell a v1 header from a v2 one; an unknown key is
    decoded as v1 so a server can still answer UNSUPPORTED_VERSION.
    """
    r = Reader(frame)
    api_key = r.int16("request header api_key")
    version = r.int16("request header api_version")
    correlation_id = r.int32("request header correlation_id")
    client_id = r.string(False, "request header client_id")
    if api_key in APIS and is_flexible(api_key, version):
        _skip_tagged_fields(r, "request header")
    return RequestHeader(api_key, version, correlation_id, client_id), r.pos


def encode_response(api_key: int, version: int, correlation_id: int, response: Message) -> bytes:
    """A complete response frame for a request of (api_key, version)."""
    w = Writer()
    w.raw(b"\0\0\0\0")
    w.int32(correlation_id)
    if response_header_version(api_key, version) >= 1:
        w.uvarint(0)
    w.raw(response.encode(version))
    _SIZE.pack_into(w.buf, 0, len(w.buf) - 4)
    return bytes(w.buf)


def _skip_tagged_fields(r: Reader, what: str) -> None:
    for _ in range(r.uvarint(what + " tagged field count")):
        r.uvarint(what + " tag")
        r.raw(r.uvarint(what + " tagged field size"), what + " tagged field")


class FrameDecoder:
    """Accepts byte chunks of any size and yields complete frames (without the size prefix)."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._need: int | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[bytes]:
        self._buf += data
        while True:
            if self._need is None:
                if len(self._buf) < 4:
                    return
                size = _SIZE.unpack_from(self._buf, 0)[0]
                if size < 0 or size > self.max_frame_size:
                    raise InvalidFrameSizeError(size, self.max_frame_size)
                del self._buf[:4]
                self._need = size
            if len(self._buf) < self._need:
                return
            frame = bytes(self._buf[: self._need])
            del self._buf[: self._need]
            self._need = None
            yield frame

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def eof(self) -> None:
        """The peer closed the stream: a partial frame left behind is a protocol error."""
        if self._buf or self._need:
            expected = "a 4-byte size" if self._need is None else f"{self._need} bytes"
            raise TruncatedFrameError(
                f"stream ended inside a frame: {len(self._buf)} bytes buffered, {expected} expected"
            )


@dataclass(frozen=True)
class _InFlight:
    correlation_id: int
    api_key: int
    version: int


class ClientProtocol:
    """The client role on one connection: frames requests, matches and decodes responses."""

    def __init__(
        self, client_id: str | None = "shmkafka", max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    ) -> None:
        self.client_id = client_id
        self._decoder = FrameDecoder(max_frame_size)
        self._in_flight: deque[_InFlight] = deque()
        self._next_correlation_id = 0

    def send_request(
        self, request: Message, version: int, *, expect_response: bool = True
    ) -> tuple[int, bytes]:
        """Frame a request; returns its correlation id and the bytes to write."""
        correlation_id, pieces = self.send_request_pieces(
            request, version, expect_response=expect_response
        )
        return correlation_id, b"".join(pieces)

    def send_request_pieces(
        self, request: Message, version: int, *, expect_response: bool = True
    ) -> tuple[int, list[Buffer]]:
        """``send_request`` as pieces to write in order (``encode_request_pieces``)."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        pieces = encode_request_pieces(request, version, correlation_id, self.client_id)
        if expect_response:
            self._in_flight.append(_InFlight(correlation_id, request.API_KEY, version))
        return correlation_id, pieces

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def receive_bytes(self, data: bytes | bytearray | memoryview) -> list[tuple[int, Message]]:
        """Feed received bytes; returns (correlation id, response) for each complete frame."""
        out: list[tuple[int, Message]] = []
        for frame in self._decoder.feed(data):
            out.append(self._decode_response(frame))
        return out

    def _decode_response(self, frame: bytes) -> tuple[int, Message]:
        if not self._in_flight:
            raise CorrelationIdError("received a response while no request is in flight")
        expected = self._in_flight.popleft()
        r = Reader(frame)
        correlation_id = r.int32("response header correlation_id")
        if correlation_id != expected.correlation_id:
            raise CorrelationIdError(
                f"expected correlation id {expected.correlation_id}, received {correlation_id}"
            )
        if response_header_version(expected.api_key, expected.version) >= 1:
            _skip_tagged_fields(r, "response header")
        _, response_cls = APIS[expected.api_key]
        body = r.buf[r.pos :]
        if expected.api_key == ApiVersionsRequest.API_KEY and _error_code_of(body) == (
            ErrorCode.UNSUPPORTED_VERSION
        ):
            return correlation_id, _unsupported_api_versions(body)
        return correlation_id, response_cls.decode(body, expected.version, strict=False)


def _unsupported_api_versions(body: memoryview) -> ApiVersionsResponse:
    """A broker that does not know our ApiVersions version answers in v0 (KIP-511), listing
    its own ApiVersions range. Some (librdkafka's mock cluster) write that body in another
    shape; then we keep only the error, and the caller retries with v0, which every broker
    supports."""
    try:
        return ApiVersionsResponse.decode(body, 0, strict=False)
    except DecodeError:
        return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)


def _error_code_of(body: memoryview) -> int:
    return Reader(body).int16("ApiVersionsResponse.error_code")
