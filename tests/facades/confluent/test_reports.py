"""The delivered report's ``Message`` made in C by confluent-kafka's own layout
(``reports.message_layout`` found it, ``_reports.layout_message`` writes it) against its
twin, the type's constructor: the same Message for any value (its memory byte for byte, its
accessors, ``==``, the objects it holds and gives back), and no layout used but a known one
the probes place exactly (else the constructor stays in use)."""

from __future__ import annotations

import gc
import importlib.metadata
import struct
import sys
from typing import Any

import confluent_kafka
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmkafka.facades.confluent import pure, reports

pytestmark = pytest.mark.skipif(
    reports.serve_reports is None, reason="the C extension is not built (SHMKAFKA_PURE_PYTHON)"
)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
PAYLOAD = st.none() | st.binary(max_size=64)
LATENCY = (st.floats(-1e3, 1e6, allow_nan=False)
           | st.integers(0, 10**8).map(lambda us: us / 1e6)  # (whole microseconds: rounding)
           | st.sampled_from([3e-6, 1.5e-6, 2.1e-05, 2.675, 0.6e-6, -0.0, -1e-9]))  # fmt: skip


CHECKED_VERSION = "2.16."  # (the confluent-kafka whose struct KNOWN_LAYOUTS holds)
INSTALLED_VERSION = importlib.metadata.version("confluent-kafka")
needs_checked_version = pytest.mark.skipif(
    not INSTALLED_VERSION.startswith(CHECKED_VERSION),
    reason=f"confluent-kafka {INSTALLED_VERSION}: its layout may be another one",
)


@needs_checked_version
def test_confluent_kafkas_message_has_a_known_layout_in_use() -> None:
    layout = reports.message_layout(confluent_kafka.Message)
    assert layout is not None and reports._known(layout)
    assert reports.LAYOUT_IN_USE


@needs_checked_version
@settings(max_examples=400, deadline=None)
@given(topic=st.text(max_size=20), partition=INT32, offset=INT64, key=PAYLOAD, value=PAYLOAD,
       timestamp=INT64, latency=LATENCY)  # fmt: skip
def test_a_message_made_by_the_layout_is_the_constructors(
    topic: str, partition: int, offset: int, key: Any, value: Any, timestamp: int,
    latency: float,
) -> None:  # fmt: skip
    case = (topic, partition, offset, key, value, confluent_kafka.TIMESTAMP_CREATE_TIME,
            timestamp, latency)  # fmt: skip
    assert reports.same_as_constructed(confluent_kafka.Message, *case)


@needs_checked_version
def test_a_message_made_by_the_layout_gives_back_what_it_held() -> None:
    assert reports.layout_message is not None
    topic, key, value = "held-" + "x" * 10, b"k" * 10, b"v" * 10
    gc.disable()  # (a collection meanwhile could free other garbage that held them)
    try:
        before = [sys.getrefcount(obj) for obj in (topic, key, value)]
        messages = [reports.layout_message(topic, 1, 2, key, value, 1, 3, 0.5)
                    for _ in range(100)]  # fmt: skip
        assert [sys.getrefcount(obj) for obj in (topic, key, value)] == [n + 100 for n in before]
        del messages
        assert [sys.getrefcount(obj) for obj in (topic, key, value)] == before
    finally:
        gc.enable()


def test_a_field_in_two_places_or_in_none_is_not_placed() -> None:
    holds_a, holds_b = tuple(range(1, 9)), tuple(range(11, 19))
    a, b = bytearray(120), bytearray(120)
    for field, (fmt, x, y) in enumerate(zip(reports.FORMATS, holds_a, holds_b, strict=True)):
        struct.pack_into(fmt, a, 16 + 8 * field, x)
        struct.pack_into(fmt, b, 16 + 8 * field, y)
    assert reports._places(bytes(a), bytes(b), holds_a, holds_b) == tuple(
        16 + 8 * field for field in range(8)
    )
    twice_a, twice_b = bytearray(a), bytearray(b)
    struct.pack_into("=q", twice_a, 112, holds_a[2])  # (the offset's value, twice)
    struct.pack_into("=q", twice_b, 112, holds_b[2])
    assert reports._places(bytes(twice_a), bytes(twice_b), holds_a, holds_b) is None
    nowhere_b = bytearray(b)
    struct.pack_into("=q", nowhere_b, 32, 99)  # (in one probe only)
    assert reports._places(bytes(a), bytes(nowhere_b), holds_a, holds_b) is None


def test_a_byte_the_arguments_move_or_that_overwrites_tp_new_has_no_defaults() -> None:
    offsets = (16, 64, 72, 32, 24, 96, 88, 104)
    a, b, blank = bytearray(120), bytearray(120), bytearray(120)
    a[80] = b[80] = 0xFF
    assert reports._defaults(bytes(a), bytes(b), bytes(blank), offsets) is not None
    b[81] = 1  # (differs between the probes: set from an argument no field accounts for)
    assert reports._defaults(bytes(a), bytes(b), bytes(blank), offsets) is None
    b[81], blank[80] = 0, 0x7F  # (the constructor wrote over what its tp_new set)
    assert reports._defaults(bytes(a), bytes(b), bytes(blank), offsets) is None


@needs_checked_version
def test_only_a_known_layout_is_used() -> None:
    layout = reports.message_layout(confluent_kafka.Message)
    assert layout is not None
    moved = reports.Layout(layout.offsets[::-1], layout.none_is_null, layout.defaults)
    more = reports.Layout(layout.offsets, layout.none_is_null, layout.defaults[:-1] + b"\x01")
    assert not reports._known(moved) and not reports._known(more)


class _Subclass(confluent_kafka.Message):  # type: ignore[misc]
    pass


@pytest.mark.parametrize("message_type", [pure.Message, _Subclass, confluent_kafka.TopicPartition,
                                          int, "not a type"])  # fmt: skip
def test_a_type_the_probes_cannot_place_has_no_layout(message_type: Any) -> None:
    assert reports.message_layout(message_type) is None


@needs_checked_version
def test_the_layout_refuses_offsets_outside_the_type() -> None:
    assert reports.use_message_layout is not None
    with pytest.raises(ValueError, match="not a field"):
        reports.use_message_layout(confluent_kafka.Message, (0,) * 8, True,
                                   bytes(confluent_kafka.Message.__basicsize__))  # fmt: skip
    with pytest.raises(TypeError):
        reports.use_message_layout(confluent_kafka.Message, (16,) * 8, True, b"short")
    assert reports.checked_layout(confluent_kafka.Message)  # (still in use: nothing changed)
