"""Every message at every version: round trip, and byte-exact agreement with kafka-python."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol import admin as kp_admin
from kafka.protocol import consumer as kp_consumer
from kafka.protocol import metadata as kp_metadata
from kafka.protocol import producer as kp_producer
from kafka.protocol import sasl as kp_sasl

from shmkafka.protocol.errors import DecodeError, EncodeError
from shmkafka.protocol.messages import (
    APIS,
    ApiVersionsRequest,
    MetadataRequest,
    MetadataResponse,
    OffsetFetchRequest,
    ProduceRequest,
)
from shmkafka.protocol.messages.metadata import MetadataRequestTopic
from shmkafka.protocol.messages.offset_fetch import OffsetFetchRequestTopic
from shmkafka.protocol.schema import Message
from tests.strategies import message_at

KAFKA_PYTHON: dict[str, Any] = {
    "ApiVersionsRequest": kp_metadata.ApiVersionsRequest,
    "ApiVersionsResponse": kp_metadata.ApiVersionsResponse,
    "MetadataRequest": kp_metadata.MetadataRequest,
    "MetadataResponse": kp_metadata.MetadataResponse,
    "ProduceRequest": kp_producer.ProduceRequest,
    "ProduceResponse": kp_producer.ProduceResponse,
    "InitProducerIdRequest": kp_producer.InitProducerIdRequest,
    "InitProducerIdResponse": kp_producer.InitProducerIdResponse,
    "FetchRequest": kp_consumer.FetchRequest,
    "FetchResponse": kp_consumer.FetchResponse,
    "ListOffsetsRequest": kp_consumer.ListOffsetsRequest,
    "ListOffsetsResponse": kp_consumer.ListOffsetsResponse,
    "CreateTopicsRequest": kp_admin.CreateTopicsRequest,
    "CreateTopicsResponse": kp_admin.CreateTopicsResponse,
    "DeleteTopicsRequest": kp_admin.DeleteTopicsRequest,
    "DeleteTopicsResponse": kp_admin.DeleteTopicsResponse,
    "SaslHandshakeRequest": kp_sasl.SaslHandshakeRequest,
    "SaslHandshakeResponse": kp_sasl.SaslHandshakeResponse,
    "SaslAuthenticateRequest": kp_sasl.SaslAuthenticateRequest,
    "SaslAuthenticateResponse": kp_sasl.SaslAuthenticateResponse,
    "FindCoordinatorRequest": kp_metadata.FindCoordinatorRequest,
    "FindCoordinatorResponse": kp_metadata.FindCoordinatorResponse,
    "AddPartitionsToTxnRequest": kp_producer.AddPartitionsToTxnRequest,
    "AddPartitionsToTxnResponse": kp_producer.AddPartitionsToTxnResponse,
    "AddOffsetsToTxnRequest": kp_producer.AddOffsetsToTxnRequest,
    "AddOffsetsToTxnResponse": kp_producer.AddOffsetsToTxnResponse,
    "EndTxnRequest": kp_producer.EndTxnRequest,
    "EndTxnResponse": kp_producer.EndTxnResponse,
    "TxnOffsetCommitRequest": kp_producer.TxnOffsetCommitRequest,
    "TxnOffsetCommitResponse": kp_producer.TxnOffsetCommitResponse,
    "OffsetFetchRequest": kp_consumer.OffsetFetchRequest,
    "OffsetFetchResponse": kp_consumer.OffsetFetchResponse,
}

MESSAGE_VERSIONS = [
    (cls, version)
    for pair in APIS.values()
    for cls in pair
    for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)
]


def _id(param: tuple[type[Message], int]) -> str:
    return f"{param[0].__name__}-v{param[1]}"


@pytest.mark.parametrize("cls_version", MESSAGE_VERSIONS, ids=[_id(p) for p in MESSAGE_VERSIONS])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_and_kafka_python_agree(
    cls_version: tuple[type[Message], int], data: st.DataObject
) -> None:
    cls, version = cls_version
    message = data.draw(message_at(cls, version))
    encoded = message.encode(version)
    assert cls.decode(encoded, version) == message
    # kafka-python parses our bytes completely and re-encodes exactly the same bytes.
    # (It reads an ApiVersionsResponse with an error as v0, the KIP-511 fallback.)
    if cls.__name__ == "ApiVersionsResponse" and message.error_code != 0:
        return
    theirs = KAFKA_PYTHON[cls.__name__].decode(encoded, version=version)
    theirs._header = None  # kafka-python 3.0 reads it in encode() but decode() leaves it unset
    assert bytes(theirs.encode(version=version)) == encoded


def test_all_apis_and_versions_covered() -> None:
    names = {cls.__name__ for cls, _ in MESSAGE_VERSIONS}
    assert names == set(KAFKA_PYTHON)
    assert len(MESSAGE_VERSIONS) == 2 * (
        4 + 12 + 7 + 5 + 9 + 7 + 4 + 2 + 3 + 6 + 5 + 4 + 4 + 4 + 4 + 8
    )


def test_decode_kafka_python_metadata_request_v12() -> None:
    theirs = kp_metadata.MetadataRequest(
        topics=[kp_metadata.MetadataRequest.MetadataRequestTopic(name="orders")],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )
    ours = MetadataRequest.decode(bytes(theirs.encode(version=12)), 12)
    assert ours.topics == (MetadataRequestTopic(name="orders"),)
    assert ours.allow_auto_topic_creation is False
    assert ours.include_topic_authorized_operations is True


def test_decode_kafka_python_produce_request_v9() -> None:
    req = kp_producer.ProduceRequest
    theirs = req(
        transactional_id=None,
        acks=-1,
        timeout_ms=1500,
        topic_data=[
            req.TopicProduceData(
                name="t",
                partition_data=[req.TopicProduceData.PartitionProduceData(index=3, records=b"xyz")],
            )
        ],
    )
    ours = ProduceRequest.decode(bytes(theirs.encode(version=9)), 9)
    assert ours.acks == -1
    assert ours.timeout_ms == 1500
    assert ours.topic_data[0].name == "t"
    assert ours.topic_data[0].partition_data[0].index == 3
    assert ours.topic_data[0].partition_data[0].records == b"xyz"


def test_decode_kafka_python_offset_fetch_requests() -> None:
    req = kp_consumer.OffsetFetchRequest
    topic = req.OffsetFetchRequestTopic(name="in", partition_indexes=[0, 3])
    theirs = req(group_id="g", topics=[topic])
    ours = OffsetFetchRequest.decode(bytes(theirs.encode(version=1)), 1)
    assert ours == OffsetFetchRequest("g", (OffsetFetchRequestTopic("in", (0, 3)),))
    every = req(group_id="g", topics=None, require_stable=True)
    assert OffsetFetchRequest.decode(bytes(every.encode(version=7)), 7) == OffsetFetchRequest(
        "g", None, require_stable=True
    )


def test_offset_fetch_all_topics_is_null_from_v2_only() -> None:
    assert OffsetFetchRequest("g", None).encode(2) == b"\x00\x01g\xff\xff\xff\xff"
    with pytest.raises(EncodeError, match=r"OffsetFetchRequest\.topics is not nullable"):
        OffsetFetchRequest("g", None).encode(1)


def test_metadata_v1_all_topics_is_null_array() -> None:
    assert MetadataRequest(topics=None).encode(1) == b"\xff\xff\xff\xff"
    assert MetadataRequest(topics=None).encode(12)[:1] == b"\x00"  # compact null


def test_null_in_non_nullable_field_is_a_typed_error() -> None:
    with pytest.raises(EncodeError, match=r"MetadataRequestTopic\.name is not nullable"):
        MetadataRequest(topics=(MetadataRequestTopic(name=None),)).encode(9)


def test_out_of_range_integer_names_the_field() -> None:
    with pytest.raises(EncodeError, match=r"ProduceRequest\.acks"):
        ProduceRequest(acks=70000).encode(3)


def test_unsupported_version_is_a_typed_error() -> None:
    with pytest.raises(EncodeError, match="supports versions 0-3"):
        ApiVersionsRequest().encode(4)


@pytest.mark.parametrize("cut", [1, 5, 9, 20])
def test_truncated_message_names_what_and_where(cut: int) -> None:
    encoded = MetadataResponse(brokers=(), topics=(), cluster_id="cluster", controller_id=1).encode(
        2
    )
    assert len(encoded) == 21
    with pytest.raises(DecodeError) as info:
        MetadataResponse.decode(encoded[:cut], 2)
    assert "MetadataResponse" in str(info.value)
    assert info.value.offset <= cut


def test_trailing_bytes_are_rejected() -> None:
    with pytest.raises(DecodeError, match="trailing bytes"):
        ApiVersionsRequest.decode(b"\x00", 0)


def test_absurd_array_length_is_rejected_before_allocation() -> None:
    body = b"\x00\x00\x00\x00" + b"\x7f\xff\xff\xff"  # throttle, broker count 2**31-1
    with pytest.raises(DecodeError, match="cannot fit"):
        MetadataResponse.decode(body, 3)
