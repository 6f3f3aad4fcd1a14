from __future__ import annotations

import os
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import snappy
from hypothesis import given, settings
from hypothesis import strategies as st

from shmkafka.protocol.compression import (
    CompressionType,
    compress,
    compress_parts,
    decompress,
    lz4_block,
)
from shmkafka.protocol.errors import DecodeError, EncodeError

PAYLOAD = b"".join(b"record-%06d;" % i for i in range(20000))  # > several xerial blocks


@pytest.mark.parametrize("codec", list(CompressionType))
def test_round_trip(codec: CompressionType) -> None:
    assert decompress(codec, compress(codec, PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize(
    ("codec", "levels"),
    [
        (CompressionType.GZIP, [1, 9]),
        (CompressionType.LZ4, [0, 9, 16]),
        (CompressionType.ZSTD, [-5, 1, 19]),
    ],
)
def test_levels(codec: CompressionType, levels: list[int]) -> None:
    sizes = []
    for level in levels:
        out = compress(codec, PAYLOAD, level)
        assert decompress(codec, out) == PAYLOAD
        sizes.append(len(out))
    assert sizes[-1] <= sizes[0]


def test_level_out_of_range_is_typed() -> None:
    with pytest.raises(EncodeError, match=r"gzip level must be within 1\.\.9"):
        compress(CompressionType.GZIP, b"x", 10)


def test_snappy_is_xerial_framed_and_raw_is_read_too() -> None:
    framed = compress(CompressionType.SNAPPY, PAYLOAD)
    assert framed.startswith(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    assert decompress(CompressionType.SNAPPY, snappy.compress(PAYLOAD)) == PAYLOAD


def test_lz4_frame_has_independent_blocks_and_no_content_size() -> None:
    frame = compress(CompressionType.LZ4, PAYLOAD)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flags = frame[4]
    assert flags & 0x20  # block independence
    assert not flags & 0x08  # no content size


@pytest.mark.parametrize(
    "codec",
    [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD],
)
def test_corrupt_data_is_typed(codec: CompressionType) -> None:
    with pytest.raises(DecodeError, match="corrupt"):
        decompress(codec, b"\x82SNAPPY\x00garbage-garbage" if codec == 2 else b"garbage")


def test_unknown_name_is_typed() -> None:
    assert CompressionType.from_name("ZSTD") == CompressionType.ZSTD
    with pytest.raises(EncodeError, match="valid: none, gzip, snappy, lz4, zstd"):
        CompressionType.from_name("brotli")


@pytest.mark.parametrize("level", [None, 0, 9])
@pytest.mark.parametrize(
    "data",
    [b"", b"x" * 100, bytes(range(256)) * 700, os.urandom(70_000), os.urandom(9) + b"y" * 200_000],
    ids=["empty", "small", "compressible, several blocks", "random: stored blocks", "mixed"],
)
def test_the_lz4_frame_built_from_blocks_is_one_lz4_frame_reads(level: Any, data: bytes) -> None:
    import lz4.frame

    out = compress(CompressionType.LZ4, data, level)
    assert lz4.frame.decompress(out) == data
    parts = compress_parts(CompressionType.LZ4, data, level)
    assert b"".join(parts) == out and parts[-1] == bytes(4)
    same = lz4.frame.compress(data, compression_level=level or 0, block_linked=False,
                              block_size=lz4.frame.BLOCKSIZE_MAX64KB, content_checksum=False,
                              store_size=False)  # fmt: skip
    assert out == same  # (the library's own frame, byte for byte)


def _block_of_its_own_frame(level: int, block: bytes) -> bytes:
    """What ``lz4_block`` stands for: a frame of the block alone, less its header and end."""
    import lz4.frame

    frame = lz4.frame.compress(block, compression_level=level, block_linked=False,
                               block_size=lz4.frame.BLOCKSIZE_MAX64KB, content_checksum=False,
                               store_size=False)  # fmt: skip
    header = len(lz4.frame.compress(b"", block_linked=False, store_size=False)) - 4
    return frame[header:-4]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 0, 3, 9, 16]),
            st.one_of(
                st.binary(max_size=2_000),
                st.builds(
                    lambda b, n: (b * (65_536 // max(1, len(b)) + 1))[:n],
                    st.binary(min_size=1, max_size=40),
                    st.integers(60_000, 65_536),
                ),
            ),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_a_block_from_the_reused_context_is_the_block_of_its_own_frame(
    blocks: list[tuple[int, bytes]],
) -> None:
    """In any order of levels and sizes, the thread's reused contexts give each block the
    bytes a frame of it alone gives: nothing is carried from one block to the next."""
    for level, block in blocks:
        assert bytes(lz4_block(level, memoryview(block))) == _block_of_its_own_frame(level, block)


def test_each_thread_compresses_with_its_own_context() -> None:
    """The compression threads (sender/compressors.py) compress at once: each with its own
    context, so no block is made of another's state."""
    data = [os.urandom(200) * (i + 50) for i in range(64)]
    expected = [_block_of_its_own_frame(0, d[:65_536]) for d in data]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            got = list(pool.map(lambda d: bytes(lz4_block(0, memoryview(d[:65_536]))), data))
            assert got == expected
