"""Record-batch compression codecs in Kafka's framing.

- gzip: an RFC 1952 stream (``gzip`` module), levels 1–9.
- snappy: written in the xerial framing the Java client uses (a 16-byte header, then blocks
  of up to 32 KiB, each a 4-byte big-endian length and a raw snappy block); read in either
  the xerial framing or as one raw snappy block (librdkafka and others write raw).
- lz4: an LZ4 frame with independent 64 KiB blocks and no content size, which Kafka's
  ``Lz4BlockInputStream`` and librdkafka both read; levels 0–16. The frame is built here
  from 64 KiB blocks compressed apart (the format's header, each block with its size, the
  end mark), so that its blocks can be compressed side by side and written as parts,
  never joined.
- zstd: a zstd frame (``zstandard``), levels -131072–22.
- ``pieces`` gives a codec's output as independent pieces (the blocks of lz4 and of xerial
  snappy, the whole stream of gzip and zstd), which the Sender compresses on as many
  threads as it has (sender/compressors.py), the pieces of every batch of a request
  together.

The codec libraries are imported on first use: app processes never compress (the Sender
does), and each one would cost every app process its memory.
"""

from __future__ import annotations

import enum
import functools
import gzip
import importlib
import struct
import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType

from shmkafka.protocol.errors import DecodeError, EncodeError, UnsupportedCompressionError


class CompressionType(enum.IntEnum):
    """The low three bits of a RecordBatch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str | None) -> CompressionType:
        key = (name or "none").lower()
        try:
            return cls[key.upper()]
        except KeyError:
            valid = ", ".join(m.name.lower() for m in cls)
            raise EncodeError(f"unknown compression type {name!r}; valid: {valid}") from None


# (min, max, default) levels; snappy has none.
LEVELS: dict[CompressionType, tuple[int, int, int]] = {
    CompressionType.GZIP: (1, 9, 6),
    CompressionType.LZ4: (0, 16, 0),
    CompressionType.ZSTD: (-131072, 22, 3),
}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_I32 = struct.Struct(">i")


@functools.cache
def _library(name: str) -> ModuleType:
    """``lz4.frame``, ``snappy`` or ``zstandard``, imported the first time it is needed."""
    return importlib.import_module(name)


def check_level(codec: CompressionType, level: int | None) -> None:
    if level is None or codec not in LEVELS:
        return
    lo, hi, _ = LEVELS[codec]
    if not lo <= level <= hi:
        raise EncodeError(f"{codec.name.lower()} level must be within {lo}..{hi}, got {level}")


Buffer = bytes | memoryview
BlockMap = Callable[[Callable[[memoryview], Buffer], list[memoryview]], Iterable[Buffer]]
LZ4_BLOCK = 64 * 1024
_LZ4_END = bytes(4)


def _lz4_frame(data: bytes | memoryview, level: int) -> bytes:
    """lz4.frame's frame of ``data``: independent 64 KiB blocks, no checksums, no content
    size (what Kafka reads)."""
    lz4_frame = _library("lz4.frame")
    frame: bytes = lz4_frame.compress(
        data, compression_level=level, block_size=lz4_frame.BLOCKSIZE_MAX64KB,
        block_linked=False, content_checksum=False, store_size=False,
    )  # fmt: skip
    return frame


@functools.cache
def _lz4_frame_header() -> bytes:
    """The frame header: magic, flags, its checksum byte (an empty frame less its end)."""
    return _lz4_frame(b"", 0)[: -len(_LZ4_END)]


def lz4_block(level: int, block: memoryview) -> bytes:
    """One frame block, its size word first: the bytes a frame of this block alone holds
    between its header and its end mark.

    Made by this thread's context for ``level`` (``_lz4_context``), not by a frame of its
    own, which sets up a context for every block and takes its settings as keywords
    (``lz4.block`` is a fifth slower per byte). At the fast levels (below 3) lz4 still
    clears its 16 KiB table for every block of 4 KiB or more; the high ones keep theirs."""
    context = _lz4_contexts.by_level.get(level) or _lz4_context(level)
    out: bytes = _library("lz4.frame").compress_chunk(context, block)
    return out


class _Contexts(threading.local):
    """Each thread's lz4 contexts by level (a context is used by one thread at a time)."""

    def __init__(self) -> None:
        self.by_level: dict[int, object] = {}


_lz4_contexts = _Contexts()


def _lz4_context(level: int) -> object:
    """This thread's compression context for ``level``, begun once with the frame's own
    settings: independent blocks and auto-flush, so each chunk it is given comes out as
    exactly its own blocks, the same bytes as a frame of the chunk alone (no block refers
    to another)."""
    lz4_frame = _library("lz4.frame")
    context = lz4_frame.create_compression_context()
    lz4_frame.compress_begin(
        context, compression_level=level, block_size=lz4_frame.BLOCKSIZE_MAX64KB,
        block_linked=False, content_checksum=False, auto_flush=True,
    )  # fmt: skip
    _lz4_contexts.by_level[level] = context
    return context


@dataclass(frozen=True)
class Pieces:
    """A codec's output as independent pieces: ``head``, then ``work`` of each of
    ``inputs`` in order (each on any thread: the codecs release the GIL), then ``tail``."""

    head: bytes
    inputs: list[memoryview]
    work: Callable[[memoryview], Buffer]
    tail: bytes

    def parts(self, outputs: Iterable[Buffer]) -> tuple[Buffer, ...]:
        """The output to write in order, given ``work``'s outputs (no empty part)."""
        return tuple(part for part in (self.head, *outputs, self.tail) if len(part))


def pieces(codec: CompressionType, data: bytes | memoryview, level: int | None = None) -> Pieces:
    """``data`` compressed as independent pieces: an lz4 frame's 64 KiB blocks, xerial
    snappy's 32 KiB blocks; gzip and zstd as one piece (their whole stream)."""
    check_level(codec, level)
    view = memoryview(data)
    if codec == CompressionType.LZ4:
        work = functools.partial(lz4_block, level or 0)
        return Pieces(_lz4_frame_header(), _cut(view, LZ4_BLOCK), work, _LZ4_END)
    if codec == CompressionType.SNAPPY:
        return Pieces(_XERIAL_HEADER, _cut(view, _XERIAL_BLOCK), _xerial_block, b"")
    if codec in (CompressionType.GZIP, CompressionType.ZSTD):
        return Pieces(b"", [view], functools.partial(_whole, codec, level), b"")
    raise EncodeError(f"unknown compression codec {codec!r}")


def _cut(view: memoryview, size: int) -> list[memoryview]:
    return [view[at : at + size] for at in range(0, len(view), size)]


def compress_parts(
    codec: CompressionType, data: bytes | memoryview, level: int | None = None,
    map_blocks: BlockMap = map,
) -> tuple[Buffer, ...]:  # fmt: skip
    """``compress``'s output as parts to be written in order (lz4: the frame's header, each
    block with its size word, the end mark; ``map_blocks`` compresses the pieces, in
    order, as ``map`` does: on several threads if it likes)."""
    plan = pieces(codec, data, level)
    return plan.parts(map_blocks(plan.work, plan.inputs))


def compress(codec: CompressionType, data: bytes | memoryview, level: int | None = None) -> bytes:
    if codec == CompressionType.NONE:
        return bytes(data)
    return b"".join(compress_parts(codec, data, level))


def _whole(codec: CompressionType, level: int | None, data: memoryview) -> bytes:
    """gzip's or zstd's stream of ``data``: one piece."""
    if codec == CompressionType.GZIP:
        return gzip.compress(data, compresslevel=LEVELS[codec][2] if level is None else level)
    cctx = _library("zstandard").ZstdCompressor(level=LEVELS[codec][2] if level is None else level)
    result: bytes = cctx.compress(data)
    return result


def decompress(codec: int, data: bytes | memoryview, where: str = "record batch") -> bytes:
    try:
        if codec == CompressionType.NONE:
            return bytes(data)
        if codec == CompressionType.GZIP:
            return gzip.decompress(data)
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == CompressionType.LZ4:
            out: bytes = _library("lz4.frame").decompress(bytes(data))
            return out
        if codec == CompressionType.ZSTD:
            # Kafka's zstd frames may omit the content size; stream-decode to be safe.
            zstandard = _library("zstandard")
            try:
                return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(bytes(data)))
            except zstandard.ZstdError as exc:
                raise ValueError(str(exc)) from None
    except (OSError, EOFError, RuntimeError, ValueError, zlib.error) as exc:
        name = CompressionType(codec).name.lower()
        raise DecodeError(where, 0, f"{name} data is corrupt: {exc}") from None
    raise UnsupportedCompressionError(where, 0, f"unknown compression codec id {codec}")


def _xerial_block(block: memoryview) -> bytes:
    """One xerial block: its 4-byte big-endian length, then the raw snappy block."""
    out: bytes = _library("snappy").compress(bytes(block))
    return _I32.pack(len(out)) + out


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        raw: bytes = _library("snappy").decompress(data)
        return raw
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError(f"truncated xerial block length at byte {pos}")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise ValueError(f"xerial block of {size} bytes overruns the data at byte {pos}")
        out += _library("snappy").decompress(data[pos : pos + size])
        pos += size
    return bytes(out)
