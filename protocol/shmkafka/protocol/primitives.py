"""Kafka's primitive types: fixed-width integers, varints, strings, bytes, arrays, tagged fields.

``Writer`` appends to a bytearray; ``Reader`` walks a memoryview and raises ``DecodeError``
(naming the type and the byte offset) instead of ``IndexError`` or ``struct.error``.
Compact (flexible-version) lengths are unsigned varints of ``length + 1``; 0 means null.
Signed varints use zigzag encoding (as protobuf's sint32/sint64).
"""

from __future__ import annotations

import struct
import uuid

from shmkafka.protocol.errors import DecodeError, EncodeError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

ZERO_UUID = uuid.UUID(int=0)


def zigzag32(n: int) -> int:
    return ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF


def zigzag64(n: int) -> int:
    return ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF


def unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def encode_uvarint(n: int) -> bytes:
    """Unsigned LEB128 varint (n >= 0)."""
    if n < 0:
        raise EncodeError(f"unsigned varint cannot hold {n}")
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """Zigzag varint of a signed 32-bit value."""
    if not -(2**31) <= n < 2**31:
        raise EncodeError(f"varint (int32) cannot hold {n}")
    return encode_uvarint(zigzag32(n))


def encode_varlong(n: int) -> bytes:
    """Zigzag varint of a signed 64-bit value."""
    if not -(2**63) <= n < 2**63:
        raise EncodeError(f"varlong (int64) cannot hold {n}")
    return encode_uvarint(zigzag64(n))


def varint_size(n: int) -> int:
    """Encoded size of a zigzag varint/varlong."""
    u = zigzag64(n)
    size = 1
    while u >= 0x80:
        u >>= 7
        size += 1
    return size


LARGE_PIECE = 4096  # a records blob at least this long is kept by reference, not copied

Buffer = bytes | bytearray | memoryview


class Writer:
    """Appends Kafka primitives to a bytearray. With ``by_reference``, a large records blob
    is not copied: the bytes written so far and the blob become ``pieces`` (for a
    scatter-gather write; the blob must stay unchanged until written)."""

    __slots__ = ("buf", "pieces", "size")

    def __init__(self, by_reference: bool = False) -> None:
        self.buf = bytearray()
        self.pieces: list[Buffer] | None = [] if by_reference else None
        self.size = 0  # bytes in pieces

    def getvalue(self) -> bytes:
        return bytes(self.buf)

    def take_pieces(self) -> list[Buffer]:
        """Everything written, in order (the writer is spent)."""
        pieces = self.pieces if self.pieces is not None else []
        if self.buf:
            pieces.append(self.buf)
        return pieces

    def _fixed(self, fmt: struct.Struct, kind: str, value: int) -> None:
        lo, hi = _RANGES[kind]
        if not isinstance(value, int) or not lo <= value <= hi:
            raise EncodeError(f"{kind} cannot hold {value!r}")
        self.buf += fmt.pack(value)

    def int8(self, v: int) -> None:
        self._fixed(_I8, "int8", v)

    def int16(self, v: int) -> None:
        self._fixed(_I16, "int16", v)

    def uint16(self, v: int) -> None:
        self._fixed(_U16, "uint16", v)

    def int32(self, v: int) -> None:
        self._fixed(_I32, "int32", v)

    def uint32(self, v: int) -> None:
        self._fixed(_U32, "uint32", v)

    def int64(self, v: int) -> None:
        self._fixed(_I64, "int64", v)

    def float64(self, v: float) -> None:
        self.buf += _F64.pack(v)

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def uuid(self, v: uuid.UUID) -> None:
        self.buf += v.bytes

    def uvarint(self, v: int) -> None:
        self.buf += encode_uvarint(v)

    def varint(self, v: int) -> None:
        self.buf += encode_varint(v)

    def varlong(self, v: int) -> None:
        self.buf += encode_varlong(v)

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def length(self, n: int | None, compact: bool) -> None:
        """An array/bytes length prefix; None is null (-1, or 0 when compact)."""
        if compact:
            self.uvarint(0 if n is None else n + 1)
        else:
            self.int32(-1 if n is None else n)

    def bytes_(
        self, v: bytes | bytearray | memoryview | tuple[Buffer, ...] | None, compact: bool
    ) -> None:
        """A length-prefixed blob: one buffer, or a tuple of parts written as their
        concatenation (a compressed batch's header and records, never joined in memory)."""
        if isinstance(v, tuple):
            self.length(sum(len(part) for part in v), compact)
            for part in v:
                self._blob(part)
            return
        self.length(None if v is None else len(v), compact)
        if v is not None:
            self._blob(v)

    def blob(self, v: Buffer) -> None:
        """Bytes as they are, kept by reference if large (as ``bytes_`` keeps a blob)."""
        self._blob(v)

    def _blob(self, v: Buffer) -> None:
        if self.pieces is not None and len(v) >= LARGE_PIECE:
            self.pieces += (self.buf, v)
            self.size += len(self.buf) + len(v)
            self.buf = bytearray()
        else:
            self.buf += v

    def string(self, v: str | None, compact: bool) -> None:
        if v is None:
            if compact:
                self.uvarint(0)
            else:
                self.int16(-1)
            return
        data = v.encode("utf-8")
        if compact:
            self.uvarint(len(data) + 1)
        else:
            if len(data) > 0x7FFF:
                raise EncodeError(f"string of {len(data)} bytes exceeds int16 length")
            self.int16(len(data))
        self.buf += data


class Reader:
    """Reads Kafka primitives from a buffer; every failure is a DecodeError with an offset."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None):
        self.buf = memoryview(data).cast("B")
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, what: str) -> int:
        start = self.pos
        if n < 0 or start + n > self.end:
            raise DecodeError(what, start, f"needs {n} bytes, {self.end - start} left")
        self.pos = start + n
        return start

    def _fixed(self, fmt: struct.Struct, what: str) -> int:
        start = self._need(fmt.size, what)
        value: int = fmt.unpack_from(self.buf, start)[0]
        return value

    def int8(self, what: str = "int8") -> int:
        return self._fixed(_I8, what)

    def int16(self, what: str = "int16") -> int:
        return self._fixed(_I16, what)

    def uint16(self, what: str = "uint16") -> int:
        return self._fixed(_U16, what)

    def int32(self, what: str = "int32") -> int:
        return self._fixed(_I32, what)

    def uint32(self, what: str = "uint32") -> int:
        return self._fixed(_U32, what)

    def int64(self, what: str = "int64") -> int:
        return self._fixed(_I64, what)

    def float64(self, what: str = "float64") -> float:
        start = self._need(8, what)
        value: float = _F64.unpack_from(self.buf, start)[0]
        return value

    def boolean(self, what: str = "bool") -> bool:
        start = self._need(1, what)
        return self.buf[start] != 0

    def uuid(self, what: str = "uuid") -> uuid.UUID:
        start = self._need(16, what)
        return uuid.UUID(bytes=bytes(self.buf[start : start + 16]))

    def uvarint(self, what: str = "unsigned varint", max_bytes: int = 10) -> int:
        start = self.pos
        result = 0
        shift = 0
        buf = self.buf
        for _ in range(max_bytes):
            if self.pos >= self.end:
                raise DecodeError(what, start, "truncated varint")
            byte = buf[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
        raise DecodeError(what, start, f"varint longer than {max_bytes} bytes")

    def varint(self, what: str = "varint") -> int:
        return unzigzag(self.uvarint(what, 5))

    def varlong(self, what: str = "varlong") -> int:
        return unzigzag(self.uvarint(what, 10))

    def raw(self, n: int, what: str = "bytes") -> memoryview:
        start = self._need(n, what)
        return self.buf[start : start + n]

    def length(self, compact: bool, what: str) -> int | None:
        start = self.pos
        if compact:
            n = self.uvarint(what) - 1
        else:
            n = self.int32(what)
        if n < -1:
            raise DecodeError(what, start, f"invalid length {n}")
        return None if n == -1 else n

    def bytes_(self, compact: bool, what: str = "bytes") -> bytes | None:
        n = self.length(compact, what)
        return None if n is None else bytes(self.raw(n, what))

    def string(self, compact: bool, what: str = "string") -> str | None:
        start = self.pos
        if compact:
            n = self.uvarint(what) - 1
        else:
            n = self.int16(what)
        if n < -1:
            raise DecodeError(what, start, f"invalid string length {n}")
        if n == -1:
            return None
        data = self.raw(n, what)
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(what, start, f"invalid UTF-8: {exc.reason}") from None
