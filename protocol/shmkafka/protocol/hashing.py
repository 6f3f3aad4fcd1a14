"""Key hashing for partitioning, bit-exact with the Java client and librdkafka.

- ``murmur2``: Kafka's ``Utils.murmur2`` (seed 0x9747b28c, 4-byte little-endian words),
  returned as a signed 32-bit int like Java's.
- ``murmur2_partition``: ``(murmur2(key) & 0x7fffffff) % n``, the Java default partitioner
  for keyed records and librdkafka's ``murmur2``/``murmur2_random``.
- ``consistent_partition``: librdkafka's ``consistent`` partitioner, CRC-32 (zlib's) of the
  key modulo n; a null key hashes as empty. It is the confluent-kafka default
  (``consistent_random`` differs only for null keys, which it spreads randomly).

Kafka's murmur2 is MurmurHash2 (32-bit) with a fixed seed, so the C implementation of the
``murmurhash2`` package computes it when installed (about 10x faster); the pure-Python
``murmur2_python`` is the fallback and the reference the tests hold both to.
"""

from __future__ import annotations

import struct
import zlib

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORDS: dict[int, struct.Struct] = {}


def _words(count: int) -> struct.Struct:
    fmt = _WORDS.get(count)
    if fmt is None:
        fmt = _WORDS[count] = struct.Struct(f"<{count}I")
    return fmt


def murmur2_python(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit integer (pure Python)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    count = length >> 2
    m = _M
    for k in _words(count).unpack_from(data):
        k = (k * m) & _MASK
        k ^= k >> 24
        h = ((h * m) & _MASK) ^ ((k * m) & _MASK)
    tail = length & 3
    if tail:
        base = count << 2
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * m) & _MASK
    h ^= h >> 13
    h = (h * m) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


try:
    from murmurhash2 import murmurhash2 as _murmurhash2
except ImportError:  # pragma: no cover - platforms without the wheel
    murmur2 = murmur2_python
else:

    def murmur2(data: bytes | bytearray | memoryview) -> int:
        """Kafka's murmur2 of ``data`` as a signed 32-bit integer."""
        h: int = _murmurhash2(bytes(data) if not isinstance(data, bytes) else data, _SEED)
        return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit."""
    return n & 0x7FFFFFFF


def murmur2_partition(key: bytes | bytearray | memoryview, partitions: int) -> int:
    return to_positive(murmur2(key)) % partitions


def consistent_partition(key: bytes | bytearray | memoryview | None, partitions: int) -> int:
    return zlib.crc32(key or b"") % partitions
