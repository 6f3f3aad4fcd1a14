"""The delivered report's ``Message`` made in C by confluent-kafka's own layout
(``reports.message_layout`` found it, ``_reports.layout_message`` writes it) against its
twin, the type's constructor: every field a callback can read is the same for any value, the
Message holds exactly the objects it was given, and a type whose layout the probes cannot
place gets none (its constructor stays in use)."""

from __future__ import annotations

import gc
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
INT32 = st.integers(0, 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
PAYLOAD = st.none() | st.binary(max_size=64)
LATENCY = st.floats(0, 1e6, allow_nan=False) | st.sampled_from([3e-6, 1.5e-6, 2.675, 0.6e-6])


def _constructed(topic: str, partition: int, offset: int, key: Any, value: Any,
                 timestamp: int, latency: float) -> Any:  # fmt: skip
    stamp = (confluent_kafka.TIMESTAMP_CREATE_TIME, timestamp)
    return confluent_kafka.Message(topic, partition, offset, key, value, None, None, stamp,
                                   latency)  # fmt: skip


def test_confluent_kafkas_message_has_a_layout_in_use() -> None:
    layout = reports.message_layout(confluent_kafka.Message)
    assert layout is not None
    assert len(set(layout.offsets)) == len(reports.FIELDS)
    assert reports.LAYOUT_IN_USE


@settings(max_examples=300, deadline=None)
@given(topic=st.text(max_size=20), partition=INT32, offset=INT64, key=PAYLOAD, value=PAYLOAD,
       timestamp=INT64, latency=LATENCY)  # fmt: skip
def test_a_message_made_by_the_layout_reads_as_the_constructors(
    topic: str, partition: int, offset: int, key: Any, value: Any, timestamp: int,
    latency: float,
) -> None:  # fmt: skip
    assert reports.layout_message is not None
    create_time = confluent_kafka.TIMESTAMP_CREATE_TIME
    made = reports.layout_message(topic, partition, offset, key, value, create_time, timestamp,
                                  latency)  # fmt: skip
    twin = _constructed(topic, partition, offset, key, value, timestamp, latency)
    assert reports._fields(made) == reports._fields(twin)
    held = {id(obj) for obj in gc.get_referents(made)}
    assert held == {id(obj) for obj in gc.get_referents(twin)}


def test_a_message_made_by_the_layout_gives_back_what_it_held() -> None:
    assert reports.layout_message is not None
    topic, key, value = "held-" + "x" * 10, b"k" * 10, b"v" * 10
    before = [sys.getrefcount(obj) for obj in (topic, key, value)]
    messages = [reports.layout_message(topic, 1, 2, key, value, 1, 3, 0.5) for _ in range(100)]
    assert [sys.getrefcount(obj) for obj in (topic, key, value)] == [n + 100 for n in before]
    del messages
    assert [sys.getrefcount(obj) for obj in (topic, key, value)] == before


class _Subclass(confluent_kafka.Message):  # type: ignore[misc]
    pass


@pytest.mark.parametrize("message_type", [pure.Message, _Subclass, confluent_kafka.TopicPartition,
                                          int, "not a type"])  # fmt: skip
def test_a_type_the_probes_cannot_place_has_no_layout(message_type: Any) -> None:
    assert reports.message_layout(message_type) is None


def test_the_layout_refuses_offsets_outside_the_type() -> None:
    assert reports.use_message_layout is not None
    with pytest.raises(ValueError, match="not a field"):
        reports.use_message_layout(confluent_kafka.Message, (0,) * 8, True,
                                   bytes(confluent_kafka.Message.__basicsize__))  # fmt: skip
    with pytest.raises(TypeError):
        reports.use_message_layout(confluent_kafka.Message, (16,) * 8, True, b"short")
    assert reports.checked_layout(confluent_kafka.Message)  # (still in use: nothing changed)
