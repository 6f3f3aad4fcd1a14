"""Request and response bodies as frozen dataclasses, one module per API."""

from __future__ import annotations

from shmkafka.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from shmkafka.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from shmkafka.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from shmkafka.protocol.messages.fetch import FetchRequest, FetchResponse
from shmkafka.protocol.messages.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from shmkafka.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from shmkafka.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from shmkafka.protocol.messages.metadata import MetadataRequest, MetadataResponse
from shmkafka.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from shmkafka.protocol.messages.produce import ProduceRequest, ProduceResponse
from shmkafka.protocol.messages.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from shmkafka.protocol.messages.transactions import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from shmkafka.protocol.schema import Message

# api key → (request class, response class)
APIS: dict[int, tuple[type[Message], type[Message]]] = {
    req.API_KEY: (req, resp)
    for req, resp in (
        (ProduceRequest, ProduceResponse),
        (FetchRequest, FetchResponse),
        (ListOffsetsRequest, ListOffsetsResponse),
        (MetadataRequest, MetadataResponse),
        (ApiVersionsRequest, ApiVersionsResponse),
        (CreateTopicsRequest, CreateTopicsResponse),
        (DeleteTopicsRequest, DeleteTopicsResponse),
        (InitProducerIdRequest, InitProducerIdResponse),
        (SaslHandshakeRequest, SaslHandshakeResponse),
        (SaslAuthenticateRequest, SaslAuthenticateResponse),
        (FindCoordinatorRequest, FindCoordinatorResponse),
        (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
        (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
        (EndTxnRequest, EndTxnResponse),
        (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
        (OffsetFetchRequest, OffsetFetchResponse),
    )
}

__all__ = [
    "APIS",
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "EndTxnRequest",
    "EndTxnResponse",
    "FetchRequest",
    "FetchResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "MetadataRequest",
    "MetadataResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "ProduceRequest",
    "ProduceResponse",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitResponse",
]
