"""DeleteTopics on the wire, byte for byte, as DeleteTopicsRequest.json / DeleteTopicsResponse.json
lay it out: v1–v3 classic, v4+ flexible (compact arrays and strings, tagged-field sections),
v6 topics by name or id (``DeleteTopicState``), error messages from v5.

(Every version's round trip, and agreement with kafka-python's codec, is in test_messages.py.)
"""

from __future__ import annotations

import uuid

import pytest

from shmkafka.protocol.errors import EncodeError
from shmkafka.protocol.frames import encode_request
from shmkafka.protocol.messages import APIS, DeleteTopicsRequest, DeleteTopicsResponse
from shmkafka.protocol.messages.delete_topics import DeletableTopicResult, DeleteTopicState
from shmkafka.protocol.primitives import ZERO_UUID
from shmkafka.protocol.versions import CLIENT_VERSIONS

TIMEOUT = b"\x00\x00\x75\x30"  # int32 30000
TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def test_registered_as_api_key_20_versions_1_to_6() -> None:
    assert APIS[20] == (DeleteTopicsRequest, DeleteTopicsResponse)
    assert CLIENT_VERSIONS[20] == (1, 6)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_request_classic_versions(version: int) -> None:
    request = DeleteTopicsRequest(topic_names=("foo", "bar"), timeout_ms=30000)
    # TopicNames: int32 count, int16-length strings; TimeoutMs: int32
    wire = b"\x00\x00\x00\x02" + b"\x00\x03foo" + b"\x00\x03bar" + TIMEOUT
    assert request.encode(version) == wire
    assert DeleteTopicsRequest.decode(wire, version) == request


@pytest.mark.parametrize("version", [4, 5])
def test_request_flexible_versions(version: int) -> None:
    request = DeleteTopicsRequest(topic_names=("foo", "bar"), timeout_ms=30000)
    # compact array (count + 1), compact strings (length + 1), then the empty tag section
    wire = b"\x03" + b"\x04foo" + b"\x04bar" + TIMEOUT + b"\x00"
    assert request.encode(version) == wire
    assert DeleteTopicsRequest.decode(wire, version) == request


def test_request_v6_names_topics_by_name_or_id() -> None:
    request = DeleteTopicsRequest(
        topics=(DeleteTopicState(name="foo"), DeleteTopicState(name=None, topic_id=TOPIC_ID)),
        timeout_ms=30000,
    )
    wire = (
        b"\x03"  # Topics: two DeleteTopicState
        + b"\x04foo" + ZERO_UUID.bytes + b"\x00"  # name, zero id, no tags
        + b"\x00" + TOPIC_ID.bytes + b"\x00"  # null name (compact), the id, no tags
        + TIMEOUT + b"\x00"
    )  # fmt: skip
    assert request.encode(6) == wire
    assert DeleteTopicsRequest.decode(wire, 6) == request


def test_a_request_may_carry_both_forms_only_one_is_sent() -> None:
    request = DeleteTopicsRequest(
        topics=(DeleteTopicState(name="foo"),), topic_names=("foo",), timeout_ms=30000
    )
    assert request.encode(5) == b"\x02\x04foo" + TIMEOUT + b"\x00"
    assert request.encode(6) == b"\x02\x04foo" + ZERO_UUID.bytes + b"\x00" + TIMEOUT + b"\x00"


def test_result_names_are_nullable_only_from_v6() -> None:
    nameless = DeleteTopicsResponse(responses=(DeletableTopicResult(name=None, error_code=0),))
    with pytest.raises(EncodeError, match=r"DeletableTopicResult\.name is not nullable"):
        nameless.encode(5)
    assert DeleteTopicsResponse.decode(nameless.encode(6), 6) == nameless


def test_response_v1_classic() -> None:
    response = DeleteTopicsResponse(
        throttle_time_ms=5, responses=(DeletableTopicResult("foo", error_code=3),)
    )
    wire = b"\x00\x00\x00\x05" + b"\x00\x00\x00\x01" + b"\x00\x03foo" + b"\x00\x03"
    assert response.encode(1) == wire
    assert DeleteTopicsResponse.decode(wire, 1) == response


def test_response_v5_carries_an_error_message() -> None:
    response = DeleteTopicsResponse(
        responses=(
            DeletableTopicResult("foo", error_code=0),
            DeletableTopicResult("bar", error_code=73, error_message="disabled"),
        )
    )
    wire = (
        b"\x00\x00\x00\x00"  # ThrottleTimeMs
        + b"\x03"
        + b"\x04foo" + b"\x00\x00" + b"\x00" + b"\x00"  # error 0, null message, no tags
        + b"\x04bar" + b"\x00\x49" + b"\x09disabled" + b"\x00"
        + b"\x00"
    )  # fmt: skip
    assert response.encode(5) == wire
    assert DeleteTopicsResponse.decode(wire, 5) == response


def test_response_v6_has_the_topic_id_after_the_name() -> None:
    response = DeleteTopicsResponse(
        responses=(DeletableTopicResult(None, topic_id=TOPIC_ID, error_code=100),)
    )
    wire = b"\x00\x00\x00\x00" + b"\x02" + b"\x00" + TOPIC_ID.bytes + b"\x00\x64\x00\x00" + b"\x00"
    assert response.encode(6) == wire
    assert DeleteTopicsResponse.decode(wire, 6) == response


def test_request_frame_uses_header_v2_from_v4() -> None:
    request = DeleteTopicsRequest(topic_names=("foo",), timeout_ms=30000)
    v3 = encode_request(request, 3, 7, "c")
    v4 = encode_request(request, 4, 7, "c")
    header = b"\x00\x14" + b"\x00\x03" + b"\x00\x00\x00\x07" + b"\x00\x01c"
    assert v3[4:] == header + request.encode(3)
    assert v4[4:] == header[:2] + b"\x00\x04" + header[4:] + b"\x00" + request.encode(4)
