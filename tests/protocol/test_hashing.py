from __future__ import annotations

import platform
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from shmkafka.protocol import hashing
from shmkafka.protocol.hashing import (
    consistent_partition,
    murmur2,
    murmur2_partition,
    murmur2_python,
)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-quite-long-string-which-is-longer-than-usual", -2061339096),
    ],
)
def test_java_test_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected
    assert murmur2_python(key) == expected


@pytest.mark.skipif(platform.machine() != "x86_64", reason="murmurhash2 is x86_64-only here")
def test_the_c_implementation_is_in_use() -> None:
    assert hashing.murmur2 is not murmur2_python  # murmurhash2 is installed on x86_64


@given(st.binary(max_size=80))
def test_c_and_python_agree(key: bytes) -> None:
    assert murmur2(key) == murmur2_python(key) == murmur2(bytearray(key))


@given(st.binary(max_size=64))
def test_matches_kafka_python(key: bytes) -> None:
    theirs = kafka_python_murmur2(key)  # unsigned-masked in kafka-python
    assert murmur2_python(key) & 0xFFFFFFFF == theirs & 0xFFFFFFFF


def test_partition_is_positive_modulo() -> None:
    rng = random.Random(7)
    for _ in range(500):
        key = rng.randbytes(rng.randrange(0, 40))
        p = murmur2_partition(key, 7)
        assert p == (murmur2(key) & 0x7FFFFFFF) % 7
        assert 0 <= p < 7


def test_consistent_null_and_empty_key_share_a_partition() -> None:
    assert consistent_partition(None, 5) == consistent_partition(b"", 5) == 0
